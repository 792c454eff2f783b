"""The communicator a data-parallel run talks through, and two of its implementations.

A communicator connects the ``size`` ranks of one job. Data-parallel training needs
only these collectives, each called by every rank in the same order:

- ``reduce_scatter(array, out)``: every rank passes an array of the same size; rank
  ``r`` adds chunk ``r`` (``chunk_bounds``) of each rank's array into ``out``, in rank
  order 0, 1, ..., size - 1, so the result does not depend on timing or transport;
- ``allgather(chunk, out)``: every rank's chunk of ``out``, in place, on every rank;
- ``allreduce_sum(array)``: the plain sum in place, in whatever order the transport
  likes (MPI's own reduction; fast, not bit-reproducible across world sizes);
- ``allreduce_ordered(array)``: the sum in rank order, everywhere (small arrays);
- ``broadcast(obj, root)``, ``barrier()``, ``abort(code)``.

``SingleProcess`` is a world of one. ``SimulatedWorld(n)`` runs n ranks as threads of
one process (for tests and ``--simulate-world``); ``riftco.train.distributed.mpi``
holds the MPI implementation.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import numpy as np

from riftco.train.errors import TrainError


class DistributedError(TrainError):
    """A data-parallel job that cannot go on: ranks disagree, a rank failed, or the
    launcher and MPI disagree about the world."""


def chunk_bounds(length: int, size: int) -> list[tuple[int, int]]:
    """``size`` contiguous chunks of ``range(length)``, the first ones one longer."""
    base, extra = divmod(length, size)
    bounds, start = [], 0
    for r in range(size):
        stop = start + base + (1 if r < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _accumulate(out: np.ndarray | None, parts: list[np.ndarray], like: np.ndarray) -> np.ndarray:
    """``out += part`` for each part in order (``out`` None: zeros first)."""
    if out is None:
        out = np.zeros(parts[0].size, dtype=like.dtype)
    for part in parts:
        out += part
    return out


class Communicator:
    """The interface (see the module docstring); ``rank`` and ``size`` are ints."""

    rank: int = 0
    size: int = 1
    name: str = "?"

    def reduce_scatter(self, array: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement reduce_scatter")

    def allgather(self, chunk: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement allgather")

    def allreduce_sum(self, array: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement allreduce_sum")

    def allreduce_ordered(self, array: np.ndarray) -> None:
        """In place: the sum in rank order (reduce_scatter, then allgather)."""
        chunk = self.reduce_scatter(array)
        self.allgather(chunk, array)

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement broadcast")

    def barrier(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement barrier")

    def abort(self, code: int = 1) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement abort")

    @property
    def is_root(self) -> bool:
        return self.rank == 0


class SingleProcess(Communicator):
    """A world of one rank: every collective is the identity."""

    name = "single"

    def reduce_scatter(self, array: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return _accumulate(out, [array.reshape(-1)], array)

    def allgather(self, chunk: np.ndarray, out: np.ndarray) -> None:
        if chunk is not out:
            out[...] = chunk.reshape(out.shape)

    def allreduce_sum(self, array: np.ndarray) -> None:
        pass

    def allreduce_ordered(self, array: np.ndarray) -> None:
        pass

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return obj

    def barrier(self) -> None:
        pass

    def abort(self, code: int = 1) -> None:
        raise SystemExit(code)


class _Hub:
    """What the threads of a simulated world share: one slot per rank and a barrier."""

    def __init__(self, size: int, timeout: float) -> None:
        self.size = size
        self.slots: list[Any] = [None] * size
        self.barrier = threading.Barrier(size, timeout=timeout)
        self.failed: str | None = None


class SimulatedRank(Communicator):
    """One rank of a ``SimulatedWorld``. A collective deposits this rank's part in its
    slot, waits for every rank, computes from all slots, and waits again so the slots
    can be reused. After ``abort`` (or a rank's failure) every collective raises."""

    name = "simulated"

    def __init__(self, hub: _Hub, rank: int) -> None:
        self._hub, self.rank, self.size = hub, rank, hub.size

    def _wait(self) -> None:
        try:
            self._hub.barrier.wait()
        except threading.BrokenBarrierError:
            why = self._hub.failed or "a rank stopped waiting (timeout)"
            raise DistributedError(f"rank {self.rank}: the job was aborted: {why}") from None

    def _exchange(self, part: Any) -> list[Any]:
        self._hub.slots[self.rank] = part
        self._wait()
        return list(self._hub.slots)

    def reduce_scatter(self, array: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        parts = self._exchange(array)
        start, stop = chunk_bounds(array.size, self.size)[self.rank]
        total = _accumulate(out, [part.reshape(-1)[start:stop] for part in parts], array)
        self._wait()
        return total

    def allgather(self, chunk: np.ndarray, out: np.ndarray) -> None:
        parts = self._exchange(chunk)
        flat = out.reshape(-1)
        for (start, stop), part in zip(chunk_bounds(out.size, self.size), parts):
            flat[start:stop] = part.reshape(-1)
        self._wait()

    def allreduce_sum(self, array: np.ndarray) -> None:
        self.allreduce_ordered(array)

    def allreduce_ordered(self, array: np.ndarray) -> None:
        parts = self._exchange(np.array(array, copy=True))
        total = parts[0].copy()
        for part in parts[1:]:
            total += part
        self._wait()
        array[...] = total

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        parts = self._exchange(obj if self.rank == root else None)
        found = copy.deepcopy(parts[root])
        self._wait()
        return found

    def barrier(self) -> None:
        self._wait()

    def abort(self, code: int = 1) -> None:
        if self._hub.failed is None:
            self._hub.failed = f"rank {self.rank} aborted with status {code}"
        self._hub.barrier.abort()
        raise DistributedError(f"rank {self.rank}: aborted the job (status {code})")

    def fail(self, error: BaseException) -> None:
        """Record that this rank failed with ``error`` and release every waiting rank."""
        if self._hub.failed is None:
            self._hub.failed = f"rank {self.rank} failed: {type(error).__name__}: {error}"
        self._hub.barrier.abort()


class SimulatedWorld:
    """``size`` ranks inside one process, one thread each (``run``).

    A collective that waits longer than ``timeout`` seconds breaks the world, so a
    rank that hangs cannot hang the others forever.
    """

    def __init__(self, size: int, timeout: float = 600.0) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a simulated world needs size >= 1, found {size!r}")
        self.size = size
        self._hub = _Hub(size, timeout)
        self.ranks = [SimulatedRank(self._hub, r) for r in range(size)]

    def run(self, work: Any) -> list[Any]:
        """Call ``work(communicator)`` on every rank at once; the results in rank order.

        When a rank raises, the others are released from their collectives, and the
        first rank's error (not the aborts it caused) is raised here.
        """
        results: list[Any] = [None] * self.size
        errors: list[BaseException | None] = [None] * self.size

        def main(rank: SimulatedRank) -> None:
            try:
                results[rank.rank] = work(rank)
            except BaseException as exc:
                errors[rank.rank] = exc
                rank.fail(exc)

        threads = [
            threading.Thread(target=main, args=(r,), name=f"rank-{r.rank}") for r in self.ranks
        ]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        except KeyboardInterrupt:  # Ctrl-C reaches the main thread: release every rank
            if self._hub.failed is None:
                self._hub.failed = "interrupted (Ctrl-C)"
            self._hub.barrier.abort()
            for t in threads:
                t.join()
            raise
        first = [e for e in errors if e is not None and not isinstance(e, DistributedError)]
        first = first or [e for e in errors if e is not None]
        if first:
            raise first[0]
        return results


__all__ = [
    "Communicator",
    "DistributedError",
    "SimulatedRank",
    "SimulatedWorld",
    "SingleProcess",
    "chunk_bounds",
]
