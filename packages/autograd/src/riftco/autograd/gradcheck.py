"""``gradcheck``: compare a function's backward with central finite differences.

The function runs in float32 (riftco.tensor's value type) through the same kernels
as in training. To check every input element against one backward pass, both sides
are contracted with a fixed random vector r of the output's shape: the analytic side
is the VJP with seed r, the numeric side is

    (Σ r·f(x + h e_i) − Σ r·f(x − h e_i)) / (x_i⁺ − x_i⁻)

accumulated in float64 through numpy, where x_i± are the perturbed values as stored
in float32 (so rounding of the step itself does not count as error). With float32
values the rounding noise in f is about 1e-7 relative, divided by 2h: the defaults
(h = 1e-3, atol = 1e-3, rtol = 1e-2) sit well above it and well below any wrong
derivative. Keep inputs away from kinks (relu at 0, ties in max). Outputs that are not
finite at the inputs (the -inf of a causal mask) are constants and are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from riftco.autograd.grad_mode import no_grad
from riftco.autograd.graph.backward import grad
from riftco.autograd.variable import Variable
from riftco.tensor import Tensor, from_numpy


@dataclass(frozen=True)
class GradcheckResult:
    """The outcome; true when every element was within tolerance. ``worst_*`` name the
    element furthest outside (or closest to) its tolerance ``atol + rtol·|numeric|``."""

    ok: bool
    max_error: float
    worst_input: int
    worst_index: tuple[int, ...]
    analytic: float
    numeric: float
    tolerance: float
    checked: int

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        verdict = "passed" if self.ok else "FAILED"
        return (
            f"gradcheck {verdict} over {self.checked} elements: worst at input "
            f"#{self.worst_input} index {self.worst_index}: analytic {self.analytic:.6g}, "
            f"numeric {self.numeric:.6g}, error {self.max_error:.3g} "
            f"(tolerance {self.tolerance:.3g})"
        )

    __repr__ = __str__


def gradcheck(
    fn: Callable[..., Variable],
    inputs: Sequence[Variable | Tensor],
    eps: float = 1e-3,
    atol: float = 1e-3,
    rtol: float = 1e-2,
    seed: int = 0,
) -> GradcheckResult:
    """Check ``fn``'s gradients with respect to its float32 inputs that require them.

    ``inputs`` are Variables (checked when ``requires_grad``) or Tensors (float32 ones
    are checked, others are passed as constants). ``fn(*inputs)`` returns a Variable.
    No ``grad`` is touched. Use as ``assert gradcheck(fn, inputs)``: a failing result
    prints the worst element.
    """
    variables = [_as_variable(x) for x in inputs]
    checked = [i for i, v in enumerate(variables) if v.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires gradients")
    out = fn(*variables)
    if not isinstance(out, Variable) or not out.requires_grad:
        raise ValueError("gradcheck: fn must return a Variable that depends on the inputs")
    rng = np.random.Generator(np.random.PCG64(seed))
    weights = rng.normal(size=out.shape).astype(np.float32)
    # Outputs that are not finite (a causal mask's -inf) are constants: leave them out.
    weights[~np.isfinite(out.numpy())] = 0.0
    weight_tensor = from_numpy(weights, backend=out.backend)
    analytic = grad(out, [variables[i] for i in checked], seeds=weight_tensor, retain_graph=False)
    weights64 = weights.astype(np.float64)
    counted = weights64 != 0.0

    def objective(position: int, values: np.ndarray) -> float:
        args = list(variables)
        args[position] = Variable(from_numpy(values, backend=variables[position].backend))
        with no_grad():
            result = fn(*args)
        values = result.numpy().astype(np.float64)
        values[~counted] = 0.0
        return float(np.sum(values * weights64))

    worst: tuple[float, int, tuple[int, ...], float, float, float]
    worst = (-1.0, 0, (), 0.0, 0.0, 0.0)  # ratio, input, index, analytic, numeric, tol
    count = 0
    for position, g in zip(checked, analytic):
        base = np.array(variables[position].numpy(), dtype=np.float32)
        g_host = np.zeros(base.shape) if g is None else np.asarray(g.numpy(), dtype=np.float64)
        for index in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[index] = np.float32(base[index] + eps)
            minus[index] = np.float32(base[index] - eps)
            step = float(plus[index]) - float(minus[index])
            numeric = (objective(position, plus) - objective(position, minus)) / step
            a = float(g_host[index])
            tol = atol + rtol * abs(numeric)
            error = abs(a - numeric)
            ratio = error / tol if np.isfinite(error) else np.inf
            if ratio > worst[0]:
                worst = (ratio, position, tuple(int(i) for i in index), a, numeric, tol)
            count += 1
    ratio, position, index, a, numeric, tol = worst
    return GradcheckResult(
        ok=bool(ratio <= 1.0),
        max_error=abs(a - numeric),
        worst_input=position,
        worst_index=index,
        analytic=a,
        numeric=numeric,
        tolerance=tol,
        checked=count,
    )


def _as_variable(x: Any) -> Variable:
    if isinstance(x, Variable):
        return x
    if isinstance(x, Tensor):
        return Variable(x, requires_grad=x.dtype.is_floating)
    raise TypeError(f"gradcheck: inputs must be Variables or Tensors, found {type(x).__name__}")


__all__ = ["GradcheckResult", "gradcheck"]
