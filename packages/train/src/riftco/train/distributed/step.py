"""One data-parallel step's gradient: this rank's micro-batches, weighted and reduced.

``ParallelStep.accumulate()`` draws the global batch (materializing only this rank's
rows), runs forward and backward on each of its micro-batches, reduces the weighted
gradients across ranks (``GradientReducer``) and leaves the step's gradient in every
parameter's ``grad``, identical on every rank; the optimizer step that follows is
then the same everywhere. Dropout layers draw the masks of global micro-batch ``j``
whatever rank computes it, so dropout keeps the bits too.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from riftco.autograd import no_grad
from riftco.train.batches import Batch
from riftco.train.distributed.data_parallel import DataParallel
from riftco.train.distributed.gradients import FlatGradients, GradientReducer
from riftco.train.errors import TrainError

if TYPE_CHECKING:
    from riftco.train.engine import Trainer


class ParallelStep:
    """A trainer's data-parallel step; it uses the trainer's public face only (its
    source, optimizer, model and ``forward_backward``)."""

    def __init__(self, trainer: Trainer, parallel: DataParallel) -> None:
        self.trainer, self.parallel = trainer, parallel
        trainable = [p for p in trainer.parameters.values() if p.requires_grad]
        self.flat = FlatGradients(trainable, parallel.bucket_bytes)
        self.reducer = GradientReducer(parallel.communicator, self.flat, parallel.reduction)
        self._strides: dict[str, int] | None = None

    def accumulate(self) -> tuple[float, int]:
        """Leave the step's gradient in the parameters; returns the global batch's loss
        (the token-weighted mean of its micro-batches') and its token count."""
        trainer, parallel = self.trainer, self.parallel
        comm, count = parallel.communicator, parallel.micro_batches
        source = trainer.source
        local = parallel.local_micro_batches(source.batch_size)
        rows = [row for _, micro_rows in local for row in micro_rows]
        batch = source.next_batch(rows=rows)
        b = len(local[0][1])
        micro = []
        for i, (j, _) in enumerate(local):
            part = slice(i * b, (i + 1) * b)
            micro.append((j, Batch(batch.inputs[part], batch.targets[part], batch.weights[part])))
        counts = np.zeros(count, dtype=np.float64)
        for j, m in micro:
            counts[j] = m.loss_tokens
        comm.allreduce_ordered(counts)
        total = float(counts.sum())
        if total == 0:
            raise TrainError(
                f"{trainer.stage} step {trainer.step + 1}: the global batch has no loss tokens"
            )
        dropout = self._dropout_start()
        n_params = len(self.flat.parameters)
        report = np.zeros(count + n_params, dtype=np.float64)
        self.reducer.begin()
        for j, m in micro:
            self._set_dropout(dropout, j)
            if counts[j]:
                value = trainer.forward_backward(m)
                report[j] = value
                if math.isfinite(value):
                    report[count:] += self.flat.gather(counts[j] / total)
                else:
                    self.flat.clear()
            else:
                trainer.optimizer.zero_grad()
                self.flat.clear()
            self.reducer.add()
        self._set_dropout(dropout, count)
        comm.allreduce_ordered(report)
        losses = report[:count]
        if not np.isfinite(losses).all():
            bad = [int(j) for j in np.flatnonzero(~np.isfinite(losses))]
            raise TrainError(
                f"{trainer.stage} step {trainer.step + 1}: the loss of micro-batch(es) {bad} "
                f"is {float(losses[bad[0]])}"
            )
        value = 0.0
        for j in range(count):
            value += float(losses[j]) * (float(counts[j]) / total)
        self.reducer.finish()
        self.flat.scatter(report[count:] > 0)
        tokens = source.batch_size * int(batch.inputs.shape[1])
        return value, tokens

    # -- dropout: the masks of micro-batch j are the same on whichever rank ---------------
    def _dropout_start(self) -> dict[str, tuple[Any, int, int]]:
        modules = _active_dropout(self.trainer.model)
        if not modules:
            return {}
        if self._strides is None:
            self._strides = _calls_per_forward(self.trainer, modules)
        return {name: (m, int(m.calls), self._strides[name]) for name, m in modules.items()}

    @staticmethod
    def _set_dropout(dropout: dict[str, tuple[Any, int, int]], j: int) -> None:
        for module, start, stride in dropout.values():
            module.calls = start + j * stride


def _active_dropout(model: Any) -> dict[str, Any]:
    named = getattr(model, "named_modules", None)
    if not callable(named):
        return {}
    return {
        n: m
        for n, m in named()
        if hasattr(m, "calls") and hasattr(m, "next_key") and getattr(m, "p", 0.0) > 0
    }


def _calls_per_forward(trainer: Trainer, modules: dict[str, Any]) -> dict[str, int]:
    """How far one forward pass advances each dropout layer's counter (measured on a
    one-token input; the counters are put back)."""
    saved = {name: int(m.calls) for name, m in modules.items()}
    ids = trainer.tensor(np.zeros((1, 1), dtype=np.int64))
    with no_grad():
        trainer.model(ids)
    strides = {name: int(m.calls) - saved[name] for name, m in modules.items()}
    for name, m in modules.items():
        m.calls = saved[name]
    return strides


__all__ = ["ParallelStep"]
