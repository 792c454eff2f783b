"""Interventions on a programmed decoder's forward pass, and the capture of its traces.

A forward names its representation sites:

- ``embedding``, ``layer{i}.input`` (the layer's pre-norm output), ``layer{i}.residual``
  (after the layer), ``final`` (after the final norm): ``[B, T, d_model]``;
- branch outputs ``layer{i}.attention{j}``, ``layer{i}.feed_forward``,
  ``layer{i}.program``: ``[B, T, d_model]``;
- the program's logical vectors ``program.input.{name}`` (one per context variable)
  and ``program.output``: ``[B, d]``, in the program's own (privileged) basis.

Interventions act on those sites; ``off`` switches branches off (by full name, or by
kind: ``attention``, ``feed_forward``, ``program``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import riftco.autograd as ag
import riftco.tensor as rt
from riftco.autograd import Variable
from riftco.cajal.programmed.config import ProgrammedConfigError

BRANCH_KINDS = ("attention", "feed_forward", "program")


@dataclass(frozen=True)
class ReplaceInput:
    """Feed ``values`` (``[B, d]``, e.g. exact encodings) to the program as its logical
    input ``name`` instead of what the input projection computed."""

    name: str
    values: Any


@dataclass(frozen=True)
class RollBranch:
    """Batch-roll ablation: example ``b`` receives the branch's output for example
    ``(b + shift) mod B``, which keeps the output's distribution and breaks its tie to
    the input."""

    branch: str
    shift: int = 1


@dataclass(frozen=True)
class Steer:
    """Add ``scale`` times basis vector ``index`` at ``site`` (at ``positions`` only,
    for a sequence site; every position when None)."""

    site: str
    index: int
    scale: float
    positions: Sequence[int] | None = None


Intervention = ReplaceInput | RollBranch | Steer


class ForwardPlan:
    """One forward's captures, interventions and switches, checked against the sites."""

    def __init__(
        self,
        sites: Sequence[str],
        branches: Sequence[str],
        capture: bool | Iterable[str],
        interventions: Iterable[Intervention],
        off: Iterable[str],
    ) -> None:
        self.sites = list(sites)
        if capture is True:
            self.capture = set(self.sites)
        elif capture is False or capture is None:
            self.capture = set()
        else:
            self.capture = set(capture)
            _known("capture", self.capture, self.sites)
        self.off = set()
        for name in off:
            matched = [b for b in branches if b == name or _kind(b) == name]
            if not matched:
                raise ProgrammedConfigError(
                    f"off: {name!r} names no branch; the branches are {list(branches)} "
                    f"(or a kind: {list(BRANCH_KINDS)})"
                )
            self.off.update(matched)
        self.by_site: dict[str, list[Intervention]] = {}
        for item in interventions:
            if isinstance(item, ReplaceInput):
                site = f"program.input.{item.name}"
            elif isinstance(item, RollBranch):
                site = item.branch
                if site not in branches:
                    raise ProgrammedConfigError(
                        f"RollBranch: expected one of the branches {list(branches)}, found {site!r}"
                    )
            elif isinstance(item, Steer):
                site = item.site
            else:
                raise ProgrammedConfigError(
                    f"interventions: expected ReplaceInput, RollBranch or Steer, found "
                    f"{type(item).__name__}"
                )
            _known(type(item).__name__, {site}, self.sites)
            self.by_site.setdefault(site, []).append(item)
        self.traces: dict[str, np.ndarray] = {}

    def apply(self, site: str, value: Any) -> Any:
        """The value at ``site`` after its interventions; captured if asked."""
        for item in self.by_site.get(site, ()):
            value = _intervene(site, item, value)
        if site in self.capture:
            self.traces[site] = np.array(_numpy(value), dtype=np.float32, copy=True)
        return value


def _intervene(site: str, item: Intervention, value: Any) -> Any:
    shape = tuple(value.shape)
    backend = value.value.backend if isinstance(value, Variable) else value.backend
    if isinstance(item, ReplaceInput):
        values = np.asarray(item.values, dtype=np.float32)
        if values.shape != shape:
            raise ProgrammedConfigError(
                f"ReplaceInput {item.name!r}: expected values of shape {list(shape)}, "
                f"found {list(values.shape)}"
            )
        return Variable(rt.from_numpy(values, backend=backend))
    if isinstance(item, RollBranch):
        order = (np.arange(shape[0]) + int(item.shift)) % shape[0]
        return ag.index_select(value, 0, rt.from_numpy(order.astype(np.int64), backend=backend))
    width = shape[-1]
    if not 0 <= item.index < width:
        raise ProgrammedConfigError(
            f"Steer at {site}: expected an index in 0..{width - 1}, found {item.index}"
        )
    delta = np.zeros(shape, dtype=np.float32)
    if len(shape) == 3:
        positions = range(shape[1]) if item.positions is None else list(item.positions)
        for p in positions:
            if not 0 <= p < shape[1]:
                raise ProgrammedConfigError(
                    f"Steer at {site}: position {p} is outside 0..{shape[1] - 1}"
                )
            delta[:, p, item.index] = item.scale
    elif item.positions is not None:
        raise ProgrammedConfigError(
            f"Steer at {site}: a [batch, {width}] site has no positions; pass positions=None"
        )
    else:
        delta[..., item.index] = item.scale
    return value + rt.from_numpy(delta, backend=backend)


def _numpy(value: Any) -> np.ndarray:
    return value.numpy()


def _kind(branch: str) -> str:
    name = branch.split(".", 1)[1]
    return "attention" if name.startswith("attention") else name


def _known(where: str, names: set[str], sites: Sequence[str]) -> None:
    unknown = sorted(set(names) - set(sites))
    if unknown:
        raise ProgrammedConfigError(
            f"{where}: unknown sites {unknown}; the sites are {list(sites)}"
        )
