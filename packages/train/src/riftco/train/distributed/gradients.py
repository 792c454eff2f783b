"""Gradients as views of one flat buffer, reduced across ranks bucket by bucket.

``FlatGradients`` lays the trainable parameters' gradients end to end in one float32
buffer (each parameter's gradient is a view of its span) and cuts the buffer into
buckets of about ``bucket_bytes``, so a collective never needs more than a bucket of
scratch memory per rank. ``GradientReducer`` sums one step's micro-batch gradients:

- ``ordered`` (the default): for micro-step ``i`` every rank ``r`` contributes the
  gradient of global micro-batch ``j = i * size + r``; the owner of each chunk adds the
  contributions into its accumulator in rank order, micro-step after micro-step, so
  every element is ``((g_0 + g_1) + g_2) + ...`` in global micro-batch order, whatever
  the world size and accumulation count that make up the same micro-batches;
- ``sum``: each rank accumulates its own micro-batches, then one MPI sum per bucket.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter
from riftco.train.distributed.communicator import Communicator, chunk_bounds

REDUCTIONS = ("ordered", "sum")
DEFAULT_BUCKET_BYTES = 4 << 20


class FlatGradients:
    """One float32 buffer holding every parameter's gradient, and its buckets."""

    def __init__(
        self, parameters: Sequence[Parameter], bucket_bytes: int = DEFAULT_BUCKET_BYTES
    ) -> None:
        if bucket_bytes < 4:
            raise ValueError(f"bucket_bytes must be >= 4, found {bucket_bytes!r}")
        self.parameters = list(parameters)
        sizes = [int(p.value.size) for p in self.parameters]
        offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(int)
        self.buffer = np.zeros(int(offsets[-1]), dtype=np.float32)
        self.views = [
            self.buffer[offsets[i] : offsets[i + 1]].reshape(p.value.shape)
            for i, p in enumerate(self.parameters)
        ]
        per = max(1, bucket_bytes // self.buffer.itemsize)
        size = self.buffer.size
        self.buckets = [(s, min(s + per, size)) for s in range(0, size, per)]

    @property
    def elements(self) -> int:
        return int(self.buffer.size)

    def gather(self, scale: float) -> np.ndarray:
        """Copy every parameter's ``grad`` times ``scale`` (float32) into its view (zeros
        where there is none); returns which parameters had one (int64 0/1)."""
        factor = np.float32(scale)
        present = np.zeros(len(self.parameters), dtype=np.int64)
        for i, (p, view) in enumerate(zip(self.parameters, self.views)):
            if p.grad is None:
                view[...] = 0.0
            else:
                np.multiply(np.asarray(p.grad.numpy()).reshape(view.shape), factor, out=view)
                present[i] = 1
        return present

    def clear(self) -> None:
        self.buffer[...] = 0.0

    def scatter(self, present: np.ndarray) -> None:
        """Hand the buffer back: each parameter's ``grad`` becomes its span (a tensor on
        the parameter's backend), or None where no micro-batch produced one."""
        for p, view, has in zip(self.parameters, self.views, present):
            p.grad = rt.from_numpy(view, backend=p.value.backend) if has else None


class GradientReducer:
    """Sums the micro-batch gradients of one step across ranks (module docstring)."""

    def __init__(self, communicator: Communicator, flat: FlatGradients, reduction: str) -> None:
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, found {reduction!r}")
        self.communicator, self.flat, self.reduction = communicator, flat, reduction
        if reduction == "ordered":
            rank, size = communicator.rank, communicator.size
            self._chunks = []
            for start, stop in flat.buckets:
                low, high = chunk_bounds(stop - start, size)[rank]
                self._chunks.append(np.zeros(high - low, dtype=np.float32))
        else:
            self._total = np.zeros_like(flat.buffer)
        self._added = 0

    def begin(self) -> None:
        self._added = 0
        for chunk in self._chunks if self.reduction == "ordered" else [self._total]:
            chunk[...] = 0.0

    def add(self) -> None:
        """Contribute this rank's current buffer (one micro-step; every rank calls it)."""
        buffer = self.flat.buffer
        if self.reduction == "ordered":
            for (start, stop), chunk in zip(self.flat.buckets, self._chunks):
                self.communicator.reduce_scatter(buffer[start:stop], out=chunk)
        else:
            self._total += buffer
        self._added += 1

    def finish(self) -> None:
        """Leave the step's summed gradient, identical on every rank, in the buffer."""
        buffer = self.flat.buffer
        if self.reduction == "ordered":
            for (start, stop), chunk in zip(self.flat.buckets, self._chunks):
                self.communicator.allgather(chunk, buffer[start:stop])
        else:
            buffer[...] = self._total
            for start, stop in self.flat.buckets:
                self.communicator.allreduce_sum(buffer[start:stop])


__all__ = ["DEFAULT_BUCKET_BYTES", "REDUCTIONS", "FlatGradients", "GradientReducer"]
