"""Differentiable modules that compute a multilinear map: one class per strategy.

Each module holds the map's coefficients as one float32 tensor named ``coefficients``:
a buffer when frozen (the default: no gradient, not in ``parameters()``, so no
optimizer sees it, yet saved in ``state_dict()``), a ``Parameter`` when trainable. Its
``forward(*arguments)`` takes one ``[..., d_i]`` operand per argument (Variables or
Tensors; the leading shapes must agree) and returns a Variable ``[..., d_out]``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import riftco.autograd as ag
import riftco.nn.functional as F
import riftco.tensor as rt
from riftco.autograd import Parameter, Variable
from riftco.cajal.errors import ShapeError
from riftco.cajal.multilinear import MultilinearMap
from riftco.cajal.plan import LoweringPlan
from riftco.nn import Module
from riftco.tensor import Backend, Tensor


class LoweredProgram(Module):
    """A multilinear map as a module; subclasses fix the coefficient layout."""

    strategy = ""

    def __init__(
        self,
        plan: LoweringPlan,
        tensor: np.ndarray,
        *,
        trainable: bool = False,
        init: str = "map",
        seed: int = 0,
        map_digest: str = "",
        backend: str | Backend | None = None,
    ) -> None:
        super().__init__()
        self.plan = plan
        self.shape = plan.shape
        self.trainable = bool(trainable)
        self.init, self.seed, self.map_digest = init, seed, map_digest
        stored = rt.from_numpy(self._layout(np.asarray(tensor, dtype=np.float64)), backend=backend)
        if self.trainable:
            self.coefficients = Parameter(stored)
        else:
            self.register_buffer("coefficients", stored)

    # -- facts ------------------------------------------------------------------
    @property
    def output_dimension(self) -> int:
        return self.shape[0]

    @property
    def input_dimensions(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def arity(self) -> int:
        return len(self.shape) - 1

    def coefficient_tensor(self) -> Tensor:
        c = self.coefficients
        return c.value if isinstance(c, Variable) else c

    def describe(self) -> dict[str, Any]:
        """Inspectable metadata: strategy, shape, layout, counts, precision, trainability."""
        return {
            "strategy": self.strategy,
            "shape": list(self.shape),
            "layout": list(self.coefficient_tensor().shape),
            "coefficients": self.plan.coefficient_count,
            "nonzero": self.plan.nonzero_count,
            "float32_exact": self.plan.float32_exact,
            "trainable": self.trainable,
            "init": self.init,
            "seed": self.seed,
            "map_digest": self.map_digest,
            "backend": self.coefficient_tensor().backend.name,
        }

    def to_map(self) -> MultilinearMap:
        """The map the module computes now (its current coefficients, as float64)."""
        stored = self.coefficient_tensor().numpy().astype(np.float64)
        tensor = self._unlayout(stored)
        return MultilinearMap(self.shape, tuple(float(x) for x in tensor.reshape(-1)))

    # -- layout (subclasses) -------------------------------------------------------
    def _layout(self, tensor: np.ndarray) -> np.ndarray:
        """``T [d_out, d_1, ...]`` in the stored layout."""
        return tensor.reshape(self.shape)

    def _unlayout(self, stored: np.ndarray) -> np.ndarray:
        return stored.reshape(self.shape)

    # -- forward ------------------------------------------------------------------
    def _operands(self, arguments: tuple[Any, ...]) -> tuple[tuple[int, ...], list[Any]]:
        if len(arguments) != self.arity:
            raise ShapeError(
                f"{type(self).__name__} of shape {list(self.shape)}: expected {self.arity} "
                f"arguments, found {len(arguments)}"
            )
        lead: tuple[int, ...] | None = None
        flat = []
        for position, (argument, width) in enumerate(zip(arguments, self.input_dimensions)):
            shape = tuple(argument.shape)
            if not shape or shape[-1] != width:
                raise ShapeError(
                    f"argument {position + 1}: expected shape [..., {width}], found {list(shape)}"
                )
            if lead is not None and shape[:-1] != lead:
                raise ShapeError(
                    f"argument {position + 1}: expected leading shape {list(lead)} like "
                    f"argument 1, found {list(shape[:-1])}"
                )
            lead = shape[:-1]
            flat.append(ag.reshape(argument, math.prod(lead), width))
        return lead or (), flat

    def forward(self, *arguments: Any) -> Variable:
        raise NotImplementedError(
            f"{type(self).__name__} defines no forward (a lowering strategy does)"
        )

    def extra_repr(self) -> str:
        state = "trainable" if self.trainable else "frozen"
        return f"shape={list(self.shape)}, {state}"


class DenseProgram(LoweredProgram):
    """Any arity: contract the last argument with the whole tensor, then each earlier one
    by a batched matrix-vector product. Arity 0 is the constant ``T``."""

    strategy = "dense"

    def forward(self, *arguments: Any, leading_shape: tuple[int, ...] = ()) -> Variable:
        coefficients = self.coefficients
        if self.arity == 0:
            if len(arguments):
                raise ShapeError(f"constant map: expected no arguments, found {len(arguments)}")
            value = ag.reshape(coefficients, self.output_dimension)
            return ag.broadcast_to(value, (*leading_shape, self.output_dimension))
        lead, flat = self._operands(arguments)
        rows = flat[0].shape[0]
        rest = math.prod(self.shape[:-1])
        z = ag.matmul(flat[-1], ag.reshape(coefficients, rest, self.shape[-1]), transpose_b=True)
        for position in range(self.arity - 2, -1, -1):
            width = self.input_dimensions[position]
            rest //= width
            z = ag.matmul(
                ag.reshape(z, rows, rest, width), ag.reshape(flat[position], rows, width, 1)
            )
            z = ag.reshape(z, rows, rest)
        return ag.reshape(z, *lead, self.output_dimension)


class LinearProgram(LoweredProgram):
    """Arity 1: ``x -> x @ T.T``, a bias-free linear layer with weight ``T [d_out, d_1]``."""

    strategy = "linear"

    def forward(self, *arguments: Any) -> Variable:
        lead, (x,) = self._operands(arguments)
        y = F.linear(x, self.coefficients)
        y = y if isinstance(y, Variable) else Variable(y)
        return ag.reshape(y, *lead, self.output_dimension)


class LinearAttentionProgram(LoweredProgram):
    """Arity 2, ``f(x, y) = sum_j y_j V_j x``: linear attention with the identity kernel.

    The query is ``y``; slot ``j``'s key is the basis vector ``e_j``, so its score is
    ``y_j`` (no softmax, no normalization), and its value is ``V_j x``. The coefficients
    are the value projection, stored ``[d_2 * d_out, d_1]`` with row ``j * d_out + o``
    holding ``T[o, :, j]``.
    """

    strategy = "linear_attention"

    def _layout(self, tensor: np.ndarray) -> np.ndarray:
        out, d1, d2 = self.shape
        return tensor.reshape(self.shape).transpose(2, 0, 1).reshape(d2 * out, d1)

    def _unlayout(self, stored: np.ndarray) -> np.ndarray:
        out, d1, d2 = self.shape
        return stored.reshape(d2, out, d1).transpose(1, 2, 0)

    def forward(self, *arguments: Any) -> Variable:
        lead, (x, y) = self._operands(arguments)
        out, _, slots = self.shape
        rows = x.shape[0]
        values = F.linear(x, self.coefficients)
        values = values if isinstance(values, Variable) else Variable(values)
        values = ag.reshape(values, rows, slots, out)
        scores = ag.reshape(y, rows, 1, slots)
        return ag.reshape(ag.matmul(scores, values), *lead, out)


MODULES: dict[str, type[LoweredProgram]] = {
    "dense": DenseProgram,
    "linear": LinearProgram,
    "linear_attention": LinearAttentionProgram,
}
