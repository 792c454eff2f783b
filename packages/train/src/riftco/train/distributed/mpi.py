"""The MPI communicator, through mpi4py (extra ``riftco-train[mpi]``), imported lazily.

``mpi_world()`` initializes MPI once, checks that the launcher and MPI agree about the
world (``check_not_singletons``), and installs an exception hook that aborts the whole
job when any rank dies of an uncaught exception, so the others never wait forever.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from riftco.train.distributed.communicator import Communicator, DistributedError, chunk_bounds

# Variables through which launchers tell each process the job's size: Open MPI's
# mpiexec, MPICH/Intel MPI's Hydra (PMI), and Slurm's srun (per job step).
LAUNCHER_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS")


def launcher_world_size(environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """The (variable, size) a launcher announced, or None when none did."""
    environ = os.environ if environ is None else environ
    for name in LAUNCHER_SIZE_VARIABLES:
        value = environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return name, int(value)
    return None


def check_not_singletons(size: int, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a world of one when the launcher started several processes: each then
    trained alone on the same data (mpi4py built against another MPI than the
    launcher's, or a launcher without PMI support)."""
    announced = launcher_world_size(environ)
    if announced is not None and size == 1 and announced[1] > 1:
        name, count = announced
        raise DistributedError(
            f"the launcher started {count} processes ({name}={count}), but MPI sees a world "
            "of 1 in each: every copy would train alone. Launch with the mpiexec of the MPI "
            "that mpi4py uses (python -c 'import mpi4py; print(mpi4py.get_config())'), or "
            "with srun --mpi=pmix under Slurm"
        )


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DistributedError(
            f"--distributed needs mpi4py and an MPI library ({exc}); install them with "
            "pip install 'riftco-train[mpi]'"
        ) from None
    return MPI


class MPICommunicator(Communicator):
    """A communicator over an ``mpi4py`` communicator (default ``COMM_WORLD``)."""

    name = "mpi"

    def __init__(self, comm: Any = None) -> None:
        self._MPI = _mpi()
        self._comm = self._MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self._comm.Get_rank(), self._comm.Get_size()

    @property
    def comm(self) -> Any:
        """The mpi4py communicator underneath."""
        return self._comm

    def reduce_scatter(self, array: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        flat = np.ascontiguousarray(array).reshape(-1)
        bounds = chunk_bounds(flat.size, self.size)
        counts = [stop - start for start, stop in bounds]
        starts = [start for start, _ in bounds]
        mine = counts[self.rank]
        received = np.empty((self.size, mine), dtype=flat.dtype)
        self._comm.Alltoallv(
            [flat, (counts, starts)],
            [received, ([mine] * self.size, [mine * r for r in range(self.size)])],
        )
        if out is None:
            out = np.zeros(mine, dtype=flat.dtype)
        for part in received:
            out += part
        return out

    def allgather(self, chunk: np.ndarray, out: np.ndarray) -> None:
        flat = out.reshape(-1)
        bounds = chunk_bounds(flat.size, self.size)
        counts = [stop - start for start, stop in bounds]
        starts = [start for start, _ in bounds]
        send = np.ascontiguousarray(chunk, dtype=flat.dtype).reshape(-1)
        self._comm.Allgatherv(send, [flat, (counts, starts)])

    def allreduce_sum(self, array: np.ndarray) -> None:
        self._comm.Allreduce(self._MPI.IN_PLACE, array, op=self._MPI.SUM)

    def allreduce_ordered(self, array: np.ndarray) -> None:
        parts = self._comm.allgather(np.array(array, copy=True))
        total = parts[0].copy()
        for part in parts[1:]:
            total += part
        array[...] = total

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return self._comm.bcast(obj, root=root)

    def barrier(self) -> None:
        self._comm.Barrier()

    def abort(self, code: int = 1) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._comm.Abort(code)


_WORLD: MPICommunicator | None = None


def mpi_world() -> MPICommunicator:
    """``COMM_WORLD`` as a communicator, checked and with the abort-on-exception hook."""
    global _WORLD
    if _WORLD is None:
        world = MPICommunicator()
        check_not_singletons(world.size)
        if world.size > 1:
            install_abort_hook(world)
        _WORLD = world
    return _WORLD


def install_abort_hook(world: Communicator) -> None:
    """An uncaught exception on this rank prints its traceback and aborts every rank."""
    previous = sys.excepthook

    def hook(kind: Any, error: Any, traceback: Any) -> None:
        print(f"rank {world.rank} of {world.size}: aborting the job", file=sys.stderr)
        previous(kind, error, traceback)
        world.abort(1)

    sys.excepthook = hook


__all__ = [
    "LAUNCHER_SIZE_VARIABLES",
    "MPICommunicator",
    "check_not_singletons",
    "install_abort_hook",
    "launcher_world_size",
    "mpi_world",
]
