"""Training metrics: the immutable record of a step, its log, its progress line, its plot."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, TextIO

from riftco.core import JSONError, loads_strict

TIMING_FIELDS = ("seconds", "tokens_per_second")
"""Fields that depend on the machine's speed; everything else is reproducible."""


@dataclass(frozen=True)
class TrainingMetric:
    """What one training step (phase ``train``) or one held-out evaluation (phase
    ``validation``) measured. Evaluations have no gradient, clip scale or rate."""

    stage: str
    phase: str
    step: int
    loss: float
    perplexity: float
    moving_average_loss: float | None
    gradient_norm: float | None
    clip_scale: float | None
    learning_rate: float | None
    tokens: int
    seconds: float
    tokens_per_second: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def without_timing(self) -> TrainingMetric:
        """The same metric with the timing fields zeroed (for reproducibility checks)."""
        return replace(self, seconds=0.0, tokens_per_second=0.0)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> TrainingMetric:
        return cls(**{f.name: record[f.name] for f in fields(cls)})


def perplexity(loss: float) -> float:
    """``exp(loss)``, infinite rather than overflowing."""
    return math.exp(loss) if loss < 700 else math.inf


class MovingAverage:
    """Exponential moving average with bias correction (as Adam corrects its moments)."""

    def __init__(self, decay: float = 0.9) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), found {decay!r}")
        self.decay = decay
        self._value = 0.0
        self._count = 0

    def update(self, x: float) -> float:
        self._value = self.decay * self._value + (1.0 - self.decay) * x
        self._count += 1
        value = self.value
        assert value is not None  # one update made
        return value

    @property
    def value(self) -> float | None:
        if self._count == 0:
            return None
        return self._value / (1.0 - self.decay**self._count)

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "value": self._value, "count": self._count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.decay, self._value, self._count = (
            float(state["decay"]),
            float(state["value"]),
            int(state["count"]),
        )


class MetricsLog:
    """Metrics as JSONL, one object per line, flushed as written.

    ``keep_through=k`` (on resume) first drops the records of steps after ``k``, which an
    interrupted run may have logged after its last checkpoint.
    """

    def __init__(self, path: str | os.PathLike[str], keep_through: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if keep_through is not None and self.path.exists():
            lines = self.path.read_text("utf-8").splitlines()
            kept = [line + "\n" for line in lines if _step_of(line) <= keep_through]
            self.path.write_text("".join(kept), "utf-8")
        elif keep_through is None:
            self.path.write_text("", "utf-8")
        self._handle: TextIO | None = open(self.path, "a", encoding="utf-8")

    def __call__(self, metric: TrainingMetric) -> None:
        if self._handle is not None:
            self._handle.write(json.dumps(metric.to_dict()) + "\n")
            self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _step_of(line: str) -> float:
    """The step a logged line records; a line cut short by a crash counts as never logged."""
    try:
        return int(loads_strict(line)["step"])
    except (JSONError, ValueError, KeyError, TypeError):
        return math.inf


def read_metrics(path: str | os.PathLike[str]) -> list[TrainingMetric]:
    """The metrics a ``MetricsLog`` wrote."""
    lines = Path(path).read_text("utf-8").splitlines()
    return [TrainingMetric.from_dict(loads_strict(line)) for line in lines if line.strip()]


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class ProgressBar:
    """One line per update: a bar, step, loss (and its moving average), tokens/s, ETA.

    On a terminal the line redraws in place; elsewhere it prints every ``every`` steps
    and at the end, so logs stay short. Validation results print on their own line.
    """

    def __init__(
        self, total_steps: int, stream: TextIO | None = None, every: int = 25, width: int = 20
    ) -> None:
        self.total = max(1, total_steps)
        self.stream = stream if stream is not None else sys.stderr
        self.every = max(1, every)
        self.width = width
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._open = False

    def __call__(self, metric: TrainingMetric) -> None:
        if metric.phase != "train":
            self._end_line()
            print(
                f"{metric.stage}: validation at step {metric.step}: loss {metric.loss:.4f} "
                f"(perplexity {metric.perplexity:.2f})",
                file=self.stream,
                flush=True,
            )
            return
        line = self.render(metric)
        if self.live:
            print("\r" + line, end="", file=self.stream, flush=True)
            self._open = True
        elif metric.step % self.every == 0 or metric.step >= self.total or metric.step == 1:
            print(line, file=self.stream, flush=True)

    def render(self, metric: TrainingMetric) -> str:
        filled = round(self.width * min(metric.step, self.total) / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        average = (
            metric.moving_average_loss if metric.moving_average_loss is not None else metric.loss
        )
        rate = metric.tokens_per_second
        left = (self.total - metric.step) * (metric.seconds / max(metric.step, 1))
        return (
            f"{metric.stage} [{bar}] {metric.step}/{self.total} loss {metric.loss:.4f} "
            f"(avg {average:.4f}) {rate:,.0f} tok/s eta {_duration(left)}"
        )

    def _end_line(self) -> None:
        if self._open:
            print(file=self.stream, flush=True)
            self._open = False

    def close(self) -> None:
        self._end_line()


def plot_loss_curve(
    metrics: Iterable[TrainingMetric], path: str | os.PathLike[str], title: str = "loss"
) -> Path | None:
    """A PNG of training loss (and its moving average) and validation loss against step.

    Returns the path, or None when matplotlib is not installed (extra ``plot``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    metrics = list(metrics)
    train = [m for m in metrics if m.phase == "train"]
    validation = [m for m in metrics if m.phase == "validation"]
    figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
    try:
        if train:
            axes.plot(
                [m.step for m in train], [m.loss for m in train], lw=0.6, alpha=0.4, label="train"
            )
            smooth = [
                (m.step, m.moving_average_loss) for m in train if m.moving_average_loss is not None
            ]
            axes.plot(*zip(*smooth), lw=1.5, label="train (moving average)")
        if validation:
            axes.plot(
                [m.step for m in validation], [m.loss for m in validation], "o-", label="validation"
            )
        axes.set_xlabel("step")
        axes.set_ylabel("cross-entropy (nats per token)")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        path = Path(path)
        figure.savefig(path)
    finally:
        plt.close(figure)
    return path


__all__ = [
    "TIMING_FIELDS",
    "MetricsLog",
    "MovingAverage",
    "ProgressBar",
    "TrainingMetric",
    "perplexity",
    "plot_loss_curve",
    "read_metrics",
]
