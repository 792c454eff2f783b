"""The training engine: forward, loss, backward, clip, update, on a fresh graph each step.

After every step the engine publishes an immutable ``TrainingMetric`` to its callbacks;
it evaluates on held-out batches before training (step 0), every ``eval_every`` steps
and at the last step. ``state_dict()`` and ``load_state_dict()`` cover everything an
exact resume needs besides the weights' file format (see ``checkpoint``): step, tokens,
elapsed time, the loss moving average, the optimizer, and the batch source.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Parameter, Variable, no_grad
from riftco.nn.precision import PRECISIONS, mixed_precision
from riftco.train.batches import Batch, BatchSource
from riftco.train.distributed.data_parallel import DataParallel, check_resume_layout
from riftco.train.distributed.step import ParallelStep
from riftco.train.errors import ResumeMismatch, TrainError
from riftco.train.losses import masked_cross_entropy
from riftco.train.metrics import MovingAverage, TrainingMetric, perplexity

STATE_VERSION = 1

LossFunction = Callable[[Variable, rt.Tensor, rt.Tensor], Variable]
Callback = Callable[[TrainingMetric], None]


class LanguageModel(Protocol):
    """What the engine needs of a model: logits ``[B, T, V]`` from ids ``[B, T]``."""

    def __call__(self, ids: rt.Tensor) -> Variable: ...

    def named_parameters(self) -> Iterable[tuple[str, Parameter]]: ...


class Optimizer(Protocol):
    @property
    def step_count(self) -> int: ...

    def set_lr(self, lr: float) -> None: ...

    def zero_grad(self) -> None: ...

    def measure(self, values: Sequence[rt.Tensor] = ()) -> tuple[float, list[float]]: ...

    def step(self, gradient_norm: float | None = None) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Schedule(Protocol):
    def lr_at(self, step: int) -> float: ...

    def state_dict(self) -> dict[str, Any]: ...


class Trainer:
    """Runs one stage (``pretraining`` or ``post_training``) of training.

    ``validation`` is a fixed list of held-out batches (empty: no evaluation).
    ``callbacks`` receive every metric, training and validation, in order.
    ``precision`` ``bf16`` runs the model's forward (and so its backward) under
    ``riftco.nn.mixed_precision("bfloat16")``; ``f32`` (the default) rounds nothing.
    """

    def __init__(
        self,
        model: LanguageModel,
        optimizer: Optimizer,
        schedule: Schedule,
        source: BatchSource,
        *,
        stage: str,
        total_steps: int,
        validation: Sequence[Batch] = (),
        eval_every: int = 0,
        loss_function: LossFunction = masked_cross_entropy,
        callbacks: Sequence[Callback] = (),
        moving_average_decay: float = 0.9,
        backend: Any = None,
        parallel: DataParallel | None = None,
        precision: str = "f32",
    ) -> None:
        if total_steps < 0:
            raise ValueError(f"total_steps must be >= 0, found {total_steps}")
        if precision not in PRECISIONS:
            raise ValueError(
                f"precision must be one of {', '.join(PRECISIONS)}, found {precision!r}"
            )
        self.precision = precision
        self.model, self.optimizer, self.schedule, self.source = model, optimizer, schedule, source
        self.stage, self.total_steps = stage, total_steps
        self.validation = list(validation)
        self.eval_every = eval_every
        self.loss_function = loss_function
        self.callbacks = list(callbacks)
        self.backend = backend
        self.parameters = dict(model.named_parameters())
        self.step = 0
        self.tokens = 0
        self.seconds = 0.0
        self.average = MovingAverage(moving_average_decay)
        self.history: list[TrainingMetric] = []
        self._evaluated_at: int | None = None
        self.parallel = parallel if parallel is not None else DataParallel()
        self.parallel.micro_batch_size(source.batch_size)
        self._parallel_step = (
            ParallelStep(self, self.parallel) if self.parallel.micro_batches > 1 else None
        )

    # -- one step ---------------------------------------------------------------
    def tensor(self, array: np.ndarray) -> rt.Tensor:
        """``array`` as a tensor on the trainer's backend (the default one when none
        was given)."""
        return rt.from_numpy(array, backend=self.backend) if self.backend else rt.from_numpy(array)

    def loss(self, batch: Batch) -> Variable:
        """The model's loss on ``batch`` (forward and loss function at the trainer's
        precision), recording its graph unless gradients are off."""
        if self.precision != "f32":
            # The nodes recorded here keep their precision for backward.
            with mixed_precision(PRECISIONS[self.precision]):
                logits = self.model(self.tensor(batch.inputs))
        else:
            logits = self.model(self.tensor(batch.inputs))
        return self.loss_function(logits, self.tensor(batch.targets), self.tensor(batch.weights))

    def forward_backward(self, batch: Batch) -> float:
        """One micro-batch of a data-parallel step: zero the gradients, take the loss on
        ``batch`` and, when it is finite, backpropagate it, leaving this micro-batch's
        gradient in every parameter's ``grad``; returns the loss (read on the host).

        ``ParallelStep`` calls this for each of its rank's micro-batches and combines
        the gradients; ``train_step`` then applies the combined gradient with the
        optimizer, as it applies its own in a single-process step."""
        self.optimizer.zero_grad()
        loss = self.loss(batch)
        value = float(loss.item())
        if math.isfinite(value):
            loss.backward()
        return value

    def train_step(self) -> TrainingMetric:
        """Draw a batch, build a fresh graph, backpropagate, clip and update."""
        _set_mode(self.model, training=True)
        started = time.perf_counter()
        if self._parallel_step is not None:
            value, tokens = self._parallel_step.accumulate()
            norm = None
        else:
            batch = self.source.next_batch()
            self.optimizer.zero_grad()
            loss = self.loss(batch)
            loss.backward()
            tokens = batch.tokens
        lr = self.schedule.lr_at(self.step + 1)
        self.optimizer.set_lr(lr)
        measured_step = getattr(self.optimizer, "measured_step", None)
        if self._parallel_step is not None:
            stats = self.optimizer.step(gradient_norm=norm)
        elif measured_step is not None:
            # The loss, the gradient norm and the update's outcome come to the host in
            # one read, after the update (nothing is updated on a non-finite loss): on
            # an accelerator, the only device round trip of the step.
            stats, (value,) = measured_step([loss.value])
            if stats is None or not math.isfinite(value):
                raise TrainError(f"{self.stage} step {self.step + 1}: the loss is {value}")
        else:
            norm, (value,) = self.optimizer.measure([loss.value])
            if not math.isfinite(value):
                raise TrainError(f"{self.stage} step {self.step + 1}: the loss is {value}")
            stats = self.optimizer.step(gradient_norm=norm)
        elapsed = time.perf_counter() - started
        self.step += 1
        self.tokens += tokens
        self.seconds += elapsed
        metric = TrainingMetric(
            stage=self.stage,
            phase="train",
            step=self.step,
            loss=value,
            perplexity=perplexity(value),
            moving_average_loss=self.average.update(value),
            gradient_norm=float(stats.gradient_norm),
            clip_scale=float(stats.clip_scale),
            learning_rate=float(lr),
            tokens=self.tokens,
            seconds=self.seconds,
            tokens_per_second=tokens / elapsed if elapsed > 0 else 0.0,
        )
        self._publish(metric)
        return metric

    def evaluate(self) -> TrainingMetric | None:
        """Mean loss over the held-out batches (weighted by loss tokens); None without any.

        Over several ranks, each evaluates every size-th batch and the per-batch sums are
        combined in batch order, so every layout reports the same bits.
        """
        if not self.validation:
            return None
        _set_mode(self.model, training=False)
        started = time.perf_counter()
        rank, size = self.parallel.rank, self.parallel.size
        sums = np.zeros((3, len(self.validation)), dtype=np.float64)
        with no_grad():
            for i, batch in enumerate(self.validation):
                n = batch.loss_tokens
                if n and i % size == rank:
                    sums[:, i] = float(self.loss(batch).item()) * n, n, batch.tokens
        if size > 1:
            self.parallel.communicator.allreduce_ordered(sums)
        total = 0.0
        for part in sums[0]:
            total += float(part)
        count, tokens = int(sums[1].sum()), int(sums[2].sum())
        _set_mode(self.model, training=True)
        elapsed = time.perf_counter() - started
        loss = total / max(count, 1)
        metric = TrainingMetric(
            stage=self.stage,
            phase="validation",
            step=self.step,
            loss=loss,
            perplexity=perplexity(loss),
            moving_average_loss=None,
            gradient_norm=None,
            clip_scale=None,
            learning_rate=None,
            tokens=self.tokens,
            seconds=self.seconds,
            tokens_per_second=tokens / elapsed if elapsed > 0 else 0.0,
        )
        self._evaluated_at = self.step
        self._publish(metric)
        return metric

    def _publish(self, metric: TrainingMetric) -> None:
        self.history.append(metric)
        for callback in self.callbacks:
            callback(metric)

    # -- the loop -----------------------------------------------------------------
    def run(
        self,
        *,
        until: int | None = None,
        checkpoint: Callable[[Trainer], Any] | None = None,
        checkpoint_every: int = 0,
        stop: Callable[[], bool] | None = None,
    ) -> str:
        """Train to ``total_steps`` (or to step ``until``); returns ``"finished"``,
        ``"paused"`` (reached ``until``) or ``"interrupted"`` (``stop()`` turned true).

        ``checkpoint(trainer)`` runs every ``checkpoint_every`` steps, at the end, and
        when stopped early, so an interrupted run can resume where it stopped.
        """
        end = self.total_steps if until is None else min(until, self.total_steps)
        if self.step == 0 and self._evaluated_at is None:
            self.evaluate()
        saved_at = None
        while self.step < end:
            self.train_step()
            due = self.eval_every and self.step % self.eval_every == 0
            if due or self.step == self.total_steps:
                self.evaluate()
            if checkpoint and (
                (checkpoint_every and self.step % checkpoint_every == 0)
                or self.step == self.total_steps
            ):
                checkpoint(self)
                saved_at = self.step
            if stop is not None and self.step < self.total_steps and stop():
                if checkpoint and saved_at != self.step:
                    checkpoint(self)
                return "interrupted"
        if self.step >= self.total_steps:
            return "finished"
        if checkpoint and saved_at != self.step:
            checkpoint(self)
        return "paused"

    # -- state ------------------------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        """Every parameter as a float32 numpy copy, by qualified name."""
        return {
            name: np.array(p.value.numpy(), dtype=np.float32) for name, p in self.parameters.items()
        }

    def state_dict(self) -> dict[str, Any]:
        """The engine's progress, the optimizer's state and the batch source's position."""
        return {
            "engine": {
                "version": STATE_VERSION,
                "stage": self.stage,
                "step": self.step,
                "total_steps": self.total_steps,
                "tokens": self.tokens,
                "seconds": self.seconds,
                "evaluated_at": self._evaluated_at,
                "moving_average": self.average.state_dict(),
                "schedule": self.schedule.state_dict(),
                "dropout": _dropout_calls(self.model),
                "parallel": self.parallel.layout(self.source.batch_size),
            },
            "optimizer": self.optimizer.state_dict(),
            "source": self.source.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], weights: dict[str, np.ndarray]) -> None:
        """Restore a ``state_dict()`` and the weights; all or nothing.

        Raises ``ResumeMismatch`` (changing nothing) when the weights do not fit the model,
        the stage differs, or the source or optimizer refuse their state.
        """
        engine = state["engine"]
        if engine.get("version") != STATE_VERSION or engine.get("stage") != self.stage:
            raise ResumeMismatch(
                f"the checkpoint is of stage {engine.get('stage')!r} (engine state version "
                f"{engine.get('version')!r}); this run is {self.stage!r} (version {STATE_VERSION})"
            )
        _check_weights(self.parameters, weights)
        if self.parallel.is_root:
            check_resume_layout(engine.get("parallel"), self.parallel, self.source.batch_size)
        dropout = engine.get("dropout", {})
        if set(dropout) != set(_dropout_calls(self.model)):
            raise ResumeMismatch(
                f"the checkpoint's dropout layers {sorted(dropout)} are not the model's "
                f"{sorted(_dropout_calls(self.model))}"
            )
        rollback = (self.source.state_dict(), self.optimizer.state_dict())
        try:
            self.source.load_state_dict(state["source"])
            self.optimizer.load_state_dict(state["optimizer"])
        except Exception as exc:
            self.source.load_state_dict(rollback[0])
            self.optimizer.load_state_dict(rollback[1])
            if isinstance(exc, ResumeMismatch):
                raise
            raise ResumeMismatch(f"the checkpoint's optimizer state does not fit: {exc}") from exc
        for name, p in self.parameters.items():
            p.value.assign_(
                rt.from_numpy(np.ascontiguousarray(weights[name]), backend=p.value.backend)
            )
        self.step, self.tokens = int(engine["step"]), int(engine["tokens"])
        self.seconds = float(engine["seconds"])
        self._evaluated_at = engine["evaluated_at"]
        self.average.load_state_dict(engine["moving_average"])
        modules = dict(_dropout_modules(self.model))
        for name, calls in dropout.items():
            modules[name].calls = int(calls)


def _check_weights(parameters: dict[str, Parameter], weights: dict[str, np.ndarray]) -> None:
    missing = sorted(set(parameters) - set(weights))
    unexpected = sorted(set(weights) - set(parameters))
    if missing or unexpected:
        raise ResumeMismatch(
            f"the checkpoint's weights do not fit the model: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    for name, p in parameters.items():
        found = weights[name]
        if tuple(found.shape) != tuple(p.value.shape) or found.dtype != np.float32:
            raise ResumeMismatch(
                f"the checkpoint's weight {name!r} is {found.dtype} {tuple(found.shape)}; "
                f"the model expects float32 {tuple(p.value.shape)}"
            )


def _dropout_modules(model: Any) -> list[tuple[str, Any]]:
    """Modules that draw random masks from a counter (riftco.nn's Dropout): their
    counters are the model's generator state."""
    named = getattr(model, "named_modules", None)
    if not callable(named):
        return []
    return [(n, m) for n, m in named() if hasattr(m, "calls") and hasattr(m, "next_key")]


def _dropout_calls(model: Any) -> dict[str, int]:
    return {name: int(m.calls) for name, m in _dropout_modules(model)}


def _set_mode(model: Any, training: bool) -> None:
    method = getattr(model, "train" if training else "eval", None)
    if callable(method):
        method()


__all__ = ["Callback", "LanguageModel", "LossFunction", "Trainer"]
