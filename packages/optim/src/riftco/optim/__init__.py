"""riftco.optim: Adam and AdamW with overflow-safe clipping, all-or-nothing fused updates,
paged moments and learning-rate schedules.

>>> import riftco.tensor as rt
>>> from riftco.autograd import Parameter
>>> from riftco.optim import AdamW, WarmupCosineSchedule
>>> w = Parameter(rt.ones(3))
>>> opt = AdamW([w], lr=1e-3, weight_decay=0.1)
>>> schedule = WarmupCosineSchedule(peak_lr=1e-3, warmup_steps=10, total_steps=100)
>>> w.grad = rt.tensor([0.5, -0.5, 0.0])
>>> opt.set_lr(schedule.lr_at(opt.step_count + 1))
>>> opt.step()
AdamStepStats(step=1, gradient_norm=0.7071067811865476, clip_scale=1.0)
"""

from __future__ import annotations

__version__ = "0.1.0"

from riftco.optim.adam import STATE_VERSION, Adam, AdamStepStats, AdamW
from riftco.optim.clipping import clip_scale, global_grad_norm, norm_and_values
from riftco.optim.errors import (
    NonFiniteUpdate,
    OptimizerConfigError,
    OptimizerStateError,
    ParameterError,
)
from riftco.optim.groups import weight_decay_groups
from riftco.optim.moments import Moments, page_lengths
from riftco.optim.schedules import (
    ConstantSchedule,
    Schedule,
    WarmupCosineSchedule,
    schedule_from_state,
)

__all__ = [
    "STATE_VERSION",
    "Adam",
    "AdamStepStats",
    "AdamW",
    "ConstantSchedule",
    "Moments",
    "NonFiniteUpdate",
    "OptimizerConfigError",
    "OptimizerStateError",
    "ParameterError",
    "Schedule",
    "WarmupCosineSchedule",
    "clip_scale",
    "global_grad_norm",
    "norm_and_values",
    "page_lengths",
    "schedule_from_state",
    "weight_decay_groups",
]
