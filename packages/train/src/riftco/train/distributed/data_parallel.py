"""How a step is split across ranks and micro-batches, and the checks ranks share.

A step trains on one global batch of ``batch_size`` rows, cut into
``micro_batches = world size x grad_accum`` micro-batches of equal size. Global
micro-batch ``j`` is rows ``[j b, (j + 1) b)``; rank ``r`` computes micro-batches
``r, r + size, r + 2 size, ...`` (one per accumulation step). Each micro-batch's
gradient is weighted by its share of the global batch's loss tokens, so the step's
gradient is that of the mean loss over the global batch, and (with the ordered
reduction) the same bits for every layout with the same number of micro-batches:
``mpiexec -n 4``, ``--simulate-world 4`` and ``--grad-accum 4`` in one process.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from riftco.interchange import tensors_digest
from riftco.train.distributed.communicator import Communicator, DistributedError, SingleProcess
from riftco.train.distributed.gradients import DEFAULT_BUCKET_BYTES, REDUCTIONS


@dataclass(frozen=True)
class DataParallel:
    """The layout of a run: its communicator, the accumulation count, the reduction
    (``ordered``: bit-reproducible; ``sum``: MPI's own sum) and the bucket size."""

    communicator: Communicator = field(default_factory=SingleProcess)
    grad_accum: int = 1
    reduction: str = "ordered"
    bucket_bytes: int = DEFAULT_BUCKET_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.grad_accum, bool) or not isinstance(self.grad_accum, int):
            raise ValueError(f"grad_accum must be an int, found {self.grad_accum!r}")
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum must be >= 1, found {self.grad_accum}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, found {self.reduction!r}")
        if self.bucket_bytes < 4:
            raise ValueError(f"bucket_bytes must be >= 4, found {self.bucket_bytes}")

    @property
    def rank(self) -> int:
        return self.communicator.rank

    @property
    def size(self) -> int:
        return self.communicator.size

    @property
    def is_root(self) -> bool:
        return self.communicator.rank == 0

    @property
    def micro_batches(self) -> int:
        return self.communicator.size * self.grad_accum

    def micro_batch_size(self, batch_size: int) -> int:
        """Rows per micro-batch; the global batch must split evenly."""
        count = self.micro_batches
        if batch_size % count:
            raise DistributedError(
                f"the global batch of {batch_size} rows does not split into {count} equal "
                f"micro-batches ({self.size} ranks x {self.grad_accum} accumulation steps); "
                f"choose a batch size that is a multiple of {count}"
            )
        return batch_size // count

    def local_micro_batches(self, batch_size: int) -> list[tuple[int, list[int]]]:
        """This rank's ``(global micro-batch index, its rows)``, in accumulation order."""
        b = self.micro_batch_size(batch_size)
        found = []
        for i in range(self.grad_accum):
            j = i * self.size + self.rank
            found.append((j, list(range(j * b, (j + 1) * b))))
        return found

    def layout(self, batch_size: int) -> dict[str, Any]:
        """What a checkpoint records of the layout."""
        return {
            "world_size": self.size,
            "grad_accum": self.grad_accum,
            "micro_batches": self.micro_batches,
            "micro_batch_size": self.micro_batch_size(batch_size),
            "reduction": self.reduction,
        }


def check_resume_layout(saved: dict[str, Any] | None, parallel: DataParallel, batch: int) -> None:
    """Warn when a resumed run splits the global batch differently from the one that
    wrote the checkpoint: training goes on with the same global batch, but its bits
    differ from an uninterrupted run's."""
    ours = parallel.layout(batch)
    if saved is None:
        saved = {"world_size": 1, "grad_accum": 1, "micro_batches": 1, "reduction": "ordered"}
    same = saved.get("micro_batches") == ours["micro_batches"]
    exact = same and saved.get("reduction") == ours["reduction"] == "ordered"
    if ours["micro_batches"] == 1 and saved.get("micro_batches") == 1:
        exact = True
    if not exact:
        warnings.warn(
            f"resuming a checkpoint written by {saved.get('world_size')} rank(s) x "
            f"{saved.get('grad_accum')} accumulation step(s) ({saved.get('reduction')} "
            f"reduction) with {ours['world_size']} x {ours['grad_accum']} "
            f"({ours['reduction']}): the global batch stays {batch} rows, but the run will "
            "not be bit-identical to an uninterrupted one",
            RuntimeWarning,
            stacklevel=2,
        )


def check_same_parameters(communicator: Communicator, weights: dict[str, Any], when: str) -> str:
    """Every rank must hold the same parameters: rank 0's digest is broadcast, every
    rank compares, and a mismatch anywhere raises ``DistributedError`` on every rank."""
    mine = tensors_digest({k: np.ascontiguousarray(v) for k, v in weights.items()})
    if communicator.size == 1:
        return mine
    reference = communicator.broadcast(mine, root=0)
    differs = np.zeros(communicator.size, dtype=np.int64)
    differs[communicator.rank] = int(mine != reference)
    communicator.allreduce_ordered(differs)
    if differs.any():
        ranks = [int(r) for r in np.flatnonzero(differs)]
        raise DistributedError(
            f"{when}: the parameters of rank(s) {ranks} differ from rank 0's (SHA-256 "
            f"{reference[:16]}...); the ranks were not started from the same model or data, "
            "or a reduction was not identical on every rank"
        )
    return mine


__all__ = ["DataParallel", "check_resume_layout", "check_same_parameters"]
