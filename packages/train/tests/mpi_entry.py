"""What the MPI tests launch under mpiexec: ``pretrain ARGS`` or ``post-train ARGS``
(the commands), or ``uncaught`` (rank 1 dies of an uncaught exception while the
others wait in a barrier).

``RIFTCO_TEST_FAIL_RANK=r`` and ``RIFTCO_TEST_FAIL_STEP=s`` make rank r raise a
RuntimeError before step s. The failing rank first writes ``time.time()`` to the file
``RIFTCO_TEST_FAIL_MARK`` (a file, since an aborted job may lose its last output).
"""

import os
import sys
import time


def mark() -> None:
    with open(os.environ["RIFTCO_TEST_FAIL_MARK"], "w") as handle:
        handle.write(repr(time.time()))
        handle.flush()
        os.fsync(handle.fileno())


def inject_failure() -> None:
    rank = os.environ.get("RIFTCO_TEST_FAIL_RANK")
    if rank is None:
        return
    from riftco.train.engine import Trainer

    step = int(os.environ.get("RIFTCO_TEST_FAIL_STEP", "2"))
    original = Trainer.train_step

    def failing(self):
        if self.parallel.rank == int(rank) and self.step + 1 == step:
            mark()
            raise RuntimeError(f"injected failure on rank {rank}")
        return original(self)

    Trainer.train_step = failing


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "uncaught":
        from riftco.train.distributed.mpi import mpi_world

        world = mpi_world()
        if world.rank == 1:
            mark()
            raise RuntimeError("rank 1 died")
        world.barrier()
        return 0
    inject_failure()
    from riftco.train.commands import post_train_main, pretrain_main

    return {"pretrain": pretrain_main, "post-train": post_train_main}[command](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
