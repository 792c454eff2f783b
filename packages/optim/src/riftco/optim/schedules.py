"""Learning-rate schedules: objects the training loop asks for the rate of a step.

Steps count from 1, as ``AdamStepStats.step`` does: ``lr_at(t)`` is the rate
for the t-th update. Schedules are immutable and save to plain dicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, Protocol, runtime_checkable

from riftco.optim.errors import OptimizerConfigError


@runtime_checkable
class Schedule(Protocol):
    def lr_at(self, step: int) -> float:
        """The learning rate of update number ``step`` (counting from 1)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...


def _check_step(step: int) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise OptimizerConfigError(f"schedule: steps count from 1, found {step!r}")
    return step


def _check_rate(name: str, value: float) -> float:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and value >= 0):
        raise OptimizerConfigError(
            f"schedule: {name} must be a finite non-negative number, found {value!r}"
        )
    return float(value)


@dataclass(frozen=True)
class ConstantSchedule:
    """The same rate at every step."""

    lr: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", _check_rate("lr", self.lr))

    def lr_at(self, step: int) -> float:
        _check_step(step)
        return self.lr

    __call__ = lr_at

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "constant", **asdict(self)}


@dataclass(frozen=True)
class WarmupCosineSchedule:
    """Linear warmup to ``peak_lr``, then cosine decay to ``min_lr`` at ``total_steps``.

    Step t <= warmup_steps gets ``peak_lr * t / warmup_steps``; later steps get
    ``min_lr + (peak_lr - min_lr) * (1 + cos(pi * p)) / 2`` with
    ``p = (t - warmup_steps) / (total_steps - warmup_steps)``; steps past
    ``total_steps`` stay at ``min_lr``.
    """

    peak_lr: float
    warmup_steps: int
    total_steps: int
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_lr", _check_rate("peak_lr", self.peak_lr))
        object.__setattr__(self, "min_lr", _check_rate("min_lr", self.min_lr))
        for name in ("warmup_steps", "total_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OptimizerConfigError(
                    f"schedule: {name} must be a non-negative int, found {value!r}"
                )
        if not 1 <= self.total_steps or self.warmup_steps > self.total_steps:
            raise OptimizerConfigError(
                f"schedule: expected 0 <= warmup_steps <= total_steps and total_steps >= 1, "
                f"found warmup_steps={self.warmup_steps}, total_steps={self.total_steps}"
            )
        if self.min_lr > self.peak_lr:
            raise OptimizerConfigError(
                f"schedule: min_lr {self.min_lr} exceeds peak_lr {self.peak_lr}"
            )

    def lr_at(self, step: int) -> float:
        t = _check_step(step)
        if t <= self.warmup_steps:
            return self.peak_lr * t / self.warmup_steps
        if t >= self.total_steps:
            return self.min_lr
        progress = (t - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.min_lr + 0.5 * (self.peak_lr - self.min_lr) * (
            1.0 + math.cos(math.pi * progress)
        )

    __call__ = lr_at

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "warmup_cosine", **asdict(self)}


_KINDS = {"constant": ConstantSchedule, "warmup_cosine": WarmupCosineSchedule}


def schedule_from_state(state: Mapping[str, Any]) -> ConstantSchedule | WarmupCosineSchedule:
    """The schedule a ``state_dict()`` describes; OptimizerConfigError naming the field
    when it describes none (an unknown kind, a missing or unknown field, a bad value)."""
    if not isinstance(state, Mapping):
        raise OptimizerConfigError(
            f"schedule_from_state: expected a dict with 'kind'; found {type(state).__name__}"
        )
    fields = dict(state)
    kind = fields.pop("kind", None)
    if not isinstance(kind, str) or kind not in _KINDS:
        raise OptimizerConfigError(
            f"schedule_from_state: unknown kind {kind!r}; expected one of {sorted(_KINDS)}"[:300]
        )
    schedule = _KINDS[kind]
    known = {f.name: f for f in dataclass_fields(schedule)}
    unknown = sorted(str(k) for k in fields if k not in known)
    missing = sorted(
        name for name, f in known.items() if name not in fields and f.default is MISSING
    )
    if unknown or missing:
        raise OptimizerConfigError(
            f"schedule_from_state: a {kind!r} schedule has the fields {sorted(known)}; "
            f"missing {missing}, unknown {unknown[:8]}"[:400]
        )
    return schedule(**fields)


__all__ = ["ConstantSchedule", "Schedule", "WarmupCosineSchedule", "schedule_from_state"]
