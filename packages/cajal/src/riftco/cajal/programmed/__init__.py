"""riftco.cajal.programmed: a decoder that hosts a lowered program beside learned
branches, with capture sites, interventions and a time-range loss.

Needs the extra ``lowering``; ``riftco.cajal.programmed.bundle`` (``.rift`` files)
needs the extra ``bundle``.
"""

from __future__ import annotations

from riftco.cajal.programmed.config import ProgrammedConfig, ProgrammedConfigError, Span
from riftco.cajal.programmed.interventions import (
    BRANCH_KINDS,
    ReplaceInput,
    RollBranch,
    Steer,
)
from riftco.cajal.programmed.loss import TimeRangeLoss, time_range_cross_entropy, time_range_mask
from riftco.cajal.programmed.model import (
    ProgramBranch,
    ProgrammedDecoder,
    ProgrammedOutput,
    program_record,
)

__all__ = [
    "BRANCH_KINDS",
    "ProgramBranch",
    "ProgrammedConfig",
    "ProgrammedConfigError",
    "ProgrammedDecoder",
    "ProgrammedOutput",
    "ReplaceInput",
    "RollBranch",
    "Span",
    "Steer",
    "TimeRangeLoss",
    "program_record",
    "time_range_cross_entropy",
    "time_range_mask",
]
