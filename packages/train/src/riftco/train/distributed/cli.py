"""The data-parallel flags of ``riftco pretrain`` and ``riftco post-train``, and the
runner that starts a stage on every rank.

``--distributed``: every process started by ``mpiexec -n N`` (or ``srun --mpi=pmix``)
is one rank of an MPI world. ``--simulate-world N``: N ranks as threads of this one
process, over the same code path. ``--grad-accum K``: K micro-batches per rank and
step. On any rank's failure the whole job stops with a non-zero status: MPI's abort
ends every process, a simulated world releases its other threads.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import Any

from riftco.tensor import RiftcoError
from riftco.train.distributed.communicator import SimulatedWorld, SingleProcess
from riftco.train.distributed.data_parallel import DataParallel
from riftco.train.distributed.gradients import DEFAULT_BUCKET_BYTES, REDUCTIONS


def add_parallel_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("data parallelism")
    add = g.add_argument
    add(
        "--distributed",
        action="store_true",
        help="one rank of an MPI job: run under mpiexec -n N (or srun --mpi=pmix); each rank trains on its share of every batch, rank 0 writes the files (needs riftco-train[mpi])",
    )
    add(
        "--simulate-world",
        type=int,
        default=None,
        metavar="N",
        help="run N ranks as threads of this process, as --distributed would over N processes (same bits)",
    )
    add(
        "--grad-accum",
        type=int,
        default=1,
        metavar="K",
        help="micro-batches per rank and step, gradients accumulated; --batch-size stays the global batch, split into ranks x K micro-batches (default %(default)s)",
    )
    add(
        "--reduction",
        choices=REDUCTIONS,
        default="ordered",
        help="ordered: gradients summed in a fixed order, bit-identical to one process with the same micro-batches; sum: MPI's own sum, faster, not bit-reproducible (default %(default)s)",
    )
    add(
        "--bucket-mb",
        type=float,
        default=DEFAULT_BUCKET_BYTES / 2**20,
        metavar="MB",
        help="gradient all-reduce bucket size in MiB (default %(default)s)",
    )


def check_parallel_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.distributed and args.simulate_world is not None:
        parser.error("--distributed and --simulate-world exclude each other")
    if args.simulate_world is not None and args.simulate_world < 1:
        parser.error(f"--simulate-world must be >= 1, found {args.simulate_world}")
    if args.grad_accum < 1:
        parser.error(f"--grad-accum must be >= 1, found {args.grad_accum}")
    if not args.bucket_mb > 0:
        parser.error(f"--bucket-mb must be > 0, found {args.bucket_mb}")


def run_parallel(
    name: str,
    args: argparse.Namespace,
    work: Callable[[DataParallel], Any],
    errors: tuple[type[BaseException], ...] = (RiftcoError, OSError),
) -> tuple[int, Any]:
    """Run ``work(parallel)`` on every rank; returns ``(status, rank 0's result)``.

    One of ``errors`` prints ``riftco NAME: ...`` and gives status 1; over MPI any
    failure aborts every rank, so none waits forever for a dead one.
    """

    def layout(communicator: Any) -> DataParallel:
        return DataParallel(
            communicator,
            grad_accum=args.grad_accum,
            reduction=args.reduction,
            bucket_bytes=max(4, int(args.bucket_mb * 2**20)),
        )

    try:
        if args.simulate_world is not None:
            simulated = SimulatedWorld(args.simulate_world)
            return 0, simulated.run(lambda comm: work(layout(comm)))[0]
        if not args.distributed:
            return 0, work(layout(SingleProcess()))
        from riftco.train.distributed.mpi import mpi_world

        world = mpi_world()
    except errors as exc:
        print(f"riftco {name}: {exc}", file=sys.stderr)
        return 1, None
    try:
        return 0, work(layout(world))
    except BaseException as exc:
        if world.size == 1 and isinstance(exc, errors):
            print(f"riftco {name}: {exc}", file=sys.stderr)
            return 1, None
        if world.size == 1:
            raise
        expected = isinstance(exc, (*errors, KeyboardInterrupt))
        detail = f"{exc}" if expected else traceback.format_exc()
        print(
            f"riftco {name}: rank {world.rank} of {world.size}: {detail}\n"
            f"riftco {name}: aborting every rank",
            file=sys.stderr,
            flush=True,
        )
        world.abort(1)
        raise


__all__ = ["add_parallel_flags", "check_parallel_flags", "run_parallel"]
