"""Lowering analysis: what a lowering of a map would be, decided before anything is allocated.

``analyze(map, strategy)`` picks the strategy (``auto`` tries ``linear``, then
``linear_attention``, then ``dense``), counts the coefficients it would hold, refuses a
map over the coefficient limit before reading a single entry, and says whether float32
holds every coefficient exactly. It uses the standard library only, so a plan can be
inspected where riftco-nn is not installed; ``riftco.cajal.lowering.lower`` acts on it.

Strategies, for a map ``T`` of shape ``[d_out, d_1, ..., d_k]``:

- ``dense`` (any arity): the whole tensor, contracted one argument at a time;
- ``linear`` (arity 1): a bias-free linear layer with weight ``T`` (``[d_out, d_1]``);
- ``linear_attention`` (arity 2): a bilinear identity-kernel linear attention. The
  second argument is the query; slot ``j`` has the fixed key ``e_j`` (so the score of
  slot ``j`` is ``y_j``, with no softmax and no normalization) and the value
  ``V_j x`` with ``V_j = T[:, :, j]``: ``f(x, y) = sum_j y_j V_j x``.

``mlp`` names a lowering that would only approximate an arbitrary map; it is refused
with the reason, never substituted silently.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

from riftco.cajal.errors import (
    CoefficientLimitError,
    LossyLoweringError,
    ShapeError,
    UnsupportedStrategyError,
)
from riftco.cajal.multilinear import MultilinearMap

STRATEGIES = ("linear", "linear_attention", "dense")
"""The strategies riftco lowers to, in the order ``auto`` tries them."""

DEFAULT_MAX_COEFFICIENTS = 1 << 24

REFUSED = {
    "mlp": (
        "an exact MLP lowering is not implemented: a GELU feed-forward network only "
        "approximates an arbitrary multilinear map, and a program is never approximated "
        "silently; use 'dense', 'linear', 'linear_attention' or 'auto'"
    ),
}

_ARITY = {"linear": 1, "linear_attention": 2}


@dataclass(frozen=True)
class LoweringPlan:
    """What lowering a map would allocate, and whether it would be exact."""

    requested: str
    strategy: str
    shape: tuple[int, ...]
    coefficient_count: int
    nonzero_count: int
    float32_exact: bool
    inexact_count: int
    max_rounding_error: float
    exact_required: bool
    max_coefficients: int
    passed_over: tuple[tuple[str, str], ...]
    """For ``auto``: each strategy tried before the chosen one, with why it did not fit."""

    @property
    def arity(self) -> int:
        return len(self.shape) - 1

    @property
    def float32_bytes(self) -> int:
        return 4 * self.coefficient_count

    def describe(self) -> str:
        lines = [
            f"strategy {self.strategy} (asked for {self.requested}) for a map of shape "
            f"{list(self.shape)}: {self.coefficient_count} coefficients "
            f"({self.nonzero_count} nonzero, {self.float32_bytes} bytes as float32; "
            f"limit {self.max_coefficients})",
            "float32 holds every coefficient exactly"
            if self.float32_exact
            else f"float32 rounds {self.inexact_count} coefficients (largest error "
            f"{self.max_rounding_error:.3g})",
        ]
        lines += [f"passed over {name}: {why}" for name, why in self.passed_over]
        return "\n".join(lines)


def coefficient_count(shape: tuple[int, ...]) -> int:
    """Coefficients every strategy stores for a map of ``shape`` (they are all dense)."""
    return math.prod(shape)


def choose_strategy(
    shape: tuple[int, ...], strategy: str = "auto"
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The strategy for a map of ``shape`` and the ones ``auto`` passed over (and why)."""
    if strategy in REFUSED:
        raise UnsupportedStrategyError(f"strategy {strategy!r} is refused: {REFUSED[strategy]}")
    if strategy != "auto" and strategy not in STRATEGIES:
        raise UnsupportedStrategyError(
            f"strategy: expected one of {[*STRATEGIES, 'auto']}, found {strategy!r}"
        )
    arity = len(shape) - 1
    candidates = STRATEGIES if strategy == "auto" else (strategy,)
    passed: list[tuple[str, str]] = []
    for candidate in candidates:
        needed = _ARITY.get(candidate)
        if needed is None or needed == arity:
            return candidate, tuple(passed)
        why = f"needs a map of arity {needed}, found arity {arity}"
        if strategy != "auto":
            raise UnsupportedStrategyError(f"strategy {candidate!r} {why} (shape {list(shape)})")
        passed.append((candidate, why))
    raise AssertionError("dense fits every arity")


def analyze(
    multilinear_map: MultilinearMap,
    strategy: str = "auto",
    *,
    exact: bool = True,
    max_coefficients: int = DEFAULT_MAX_COEFFICIENTS,
) -> LoweringPlan:
    """The plan for lowering ``multilinear_map`` with ``strategy``.

    Raises ``UnsupportedStrategyError`` (unknown, refused, or the wrong arity),
    ``CoefficientLimitError`` (more than ``max_coefficients``, checked from the shape
    alone) and, with ``exact``, ``LossyLoweringError`` when float32 would round a
    coefficient. A coefficient float32 cannot hold at all (overflow) is refused always.
    """
    if not isinstance(multilinear_map, MultilinearMap):
        raise ShapeError(
            f"analyze: expected a MultilinearMap, found {type(multilinear_map).__name__}"
        )
    if isinstance(max_coefficients, bool) or not isinstance(max_coefficients, int):
        raise CoefficientLimitError(
            f"max_coefficients: expected a positive int, found {max_coefficients!r}"
        )
    if max_coefficients < 1:
        raise CoefficientLimitError(
            f"max_coefficients: expected a positive int, found {max_coefficients}"
        )
    shape = multilinear_map.shape
    chosen, passed = choose_strategy(shape, strategy)
    count = coefficient_count(shape)
    if count > max_coefficients:
        raise CoefficientLimitError(
            f"a map of shape {list(shape)} has {count} coefficients; the limit is "
            f"{max_coefficients} (raise max_coefficients to lower it anyway)"
        )
    data = multilinear_map.data
    rounded = array("f", data)
    nonzero = inexact = 0
    worst, worst_at = 0.0, -1
    for index, (value, stored) in enumerate(zip(data, rounded)):
        if value:
            nonzero += 1
        if stored != value:
            if not math.isfinite(value) or math.isinf(stored):
                raise LossyLoweringError(
                    f"coefficient {index} of the map of shape {list(shape)} is {value!r}; "
                    "expected a finite value within float32's range"
                )
            inexact += 1
            error = abs(stored - value)
            if error > worst:
                worst, worst_at = error, index
    if exact and inexact:
        raise LossyLoweringError(
            f"exact lowering: float32 rounds {inexact} of {count} coefficients of the map "
            f"of shape {list(shape)} (the worst, coefficient {worst_at} = "
            f"{data[worst_at]!r}, by {worst:.3g}); pass exact=False to accept the rounding"
        )
    return LoweringPlan(
        requested=strategy,
        strategy=chosen,
        shape=shape,
        coefficient_count=count,
        nonzero_count=nonzero,
        float32_exact=not inexact,
        inexact_count=inexact,
        max_rounding_error=worst,
        exact_required=exact,
        max_coefficients=max_coefficients,
        passed_over=passed,
    )
