"""The backend interface: one method per capability, over opaque storage handles.

A backend is a Python object. Its storage handles are whatever it likes (a
numpy array for the CPU backend, a device buffer elsewhere); riftco.tensor
never looks inside them, it only passes them back to the backend that made
them, together with the shapes and dtypes it has already validated. Every
shape argument is a tuple of ints; every handle is C-contiguous row-major.

Adding a capability: add a method here (its default raises CapabilityMissing),
implement it in the CPU backend and the numpy reference backend
(riftco.testing.tensor), test it against a numpy formula, list it in
CAPABILITIES (riftco.tensor.capabilities) and bump the minor API version.

A plugin says what it is through three class attributes and one method:
``api_version`` (the interface it implements), ``runs_on_host`` (compute on
the host CPU: never chosen by ``auto``), ``priority`` (``auto`` takes the
available accelerator with the highest; cpu is 0) and ``capabilities()``
(the CAPABILITIES methods its class overrides: its own kernels only; a backend
may narrow that set, for a device that lacks a kernel, but never widen it). What
the op layer composes from a backend's other ops is listed apart (COMPOSED,
`composed_capabilities`); whole-step decoding is never composed: a backend without
``decode_step`` decodes op by op in riftco-nn.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from riftco.tensor.backend_fused import FusedKernels
from riftco.tensor.capabilities import (
    BACKEND_API_VERSION,
    BASE_CAPABILITIES,
    BASE_DTYPES,
    CAPABILITIES,
    COMPOSED,
)
from riftco.tensor.dtypes import DType
from riftco.tensor.errors import CapabilityMissing, DTypeError

# The tables (riftco.tensor.capabilities) are importable from here too.
__all__ = [
    "BACKEND_API_VERSION",
    "BASE_CAPABILITIES",
    "BASE_DTYPES",
    "CAPABILITIES",
    "COMPOSED",
    "Backend",
    "Shape",
    "Storage",
    "composed_capabilities",
    "overridden_capabilities",
    "require_dtype_support",
]

Storage = Any
Shape = tuple[int, ...]


def require_dtype_support(op: str, backend: Backend, dtype: DType) -> None:
    """Raise DTypeError unless ``backend`` holds ``dtype`` tensors."""
    if dtype not in backend.dtypes:
        held = ", ".join(d.value for d in DType if d in backend.dtypes)
        raise DTypeError(
            f"{op}: backend {backend.name!r} does not hold {dtype.value} tensors (it holds {held})"
        )


class Backend(FusedKernels):
    """Base class of every backend. Subclasses override the capabilities they have: the
    general op layer here, the fused kernels in `FusedKernels`
    (riftco.tensor.backend_fused)."""

    #: Registry name (``cpu``, ``cuda``, ...).
    name: str = "?"
    #: The interface version this backend implements.
    api_version: tuple[int, int] = BACKEND_API_VERSION
    #: True when compute runs on the host CPU (never chosen by ``auto``).
    runs_on_host: bool = True
    #: ``auto``'s ranking among available accelerators: the highest wins, ties go to
    #: the name first in alphabetical order. The built-in cpu is 0, the lowest.
    priority: int = 0
    #: The dtypes its storage holds (API 1.5). A backend that lists ``bfloat16`` takes
    #: bfloat16 handles where the methods below say so; riftco.tensor refuses to make a
    #: tensor of a dtype its backend does not list.
    dtypes: frozenset[DType] = BASE_DTYPES

    def describe(self) -> str:
        """One line about the device, for ``riftco backends``."""
        return self.name

    def capabilities(self) -> frozenset[str]:
        """The capabilities this backend implements: the CAPABILITIES methods its class
        overrides. A subclass may return fewer (a device lacking a kernel), never more."""
        # A class is hashable; mypy checks Hashable against the instance __hash__.
        return overridden_capabilities(type(self))  # type: ignore[arg-type]

    def missing_hint(self, capability: str) -> str | None:
        """What a user can do when this backend lacks ``capability`` (appended to the
        ``CapabilityMissing`` message), or None. A plugin overrides this, not the error."""
        return None

    def _missing(self, capability: str) -> CapabilityMissing:
        hint = self.missing_hint(capability)
        message = f"backend {self.name!r} does not implement {capability!r}"
        return CapabilityMissing(message if hint is None else f"{message}; {hint}")

    # -- storage --------------------------------------------------------------
    def from_numpy(self, array: np.ndarray) -> Storage:
        """Own a copy of a C-contiguous numpy array (float32, int64, bool or uint8; an
        ``ml_dtypes.bfloat16`` array where ``dtypes`` has bfloat16). ``to_numpy`` gives
        bfloat16 back as an ``ml_dtypes.bfloat16`` array."""
        raise self._missing("from_numpy")

    def to_numpy(self, x: Storage, shape: Shape, dtype: DType) -> np.ndarray:
        """The values as a numpy array that callers must not write to (a view or a copy)."""
        raise self._missing("to_numpy")

    def reshape(self, x: Storage, shape: Shape, new_shape: Shape) -> Storage:
        """The same elements under a new shape of equal size; must not copy."""
        raise self._missing("reshape")

    def assign(self, dst: Storage, src: Storage, shape: Shape, dtype: DType) -> None:
        """Overwrite ``dst`` in place with ``src`` (same shape and dtype)."""
        raise self._missing("assign")

    def astype(self, x: Storage, shape: Shape, src: DType, dst: DType) -> Storage:
        """Convert element type (float -> int truncates toward zero). To bfloat16: the
        nearest value, ties to even, overflow to infinity, a NaN to the quiet NaN of its
        sign (``0x7FC0`` / ``0xFFC0``), as ``ml_dtypes`` casts; from bfloat16 to float32:
        exact; other pairs with bfloat16 go through float32."""
        raise self._missing("astype")

    # -- layout ---------------------------------------------------------------
    def copy_strided(
        self,
        x: Storage,
        shape: Shape,
        dtype: DType,
        out_shape: Shape,
        strides: Sequence[int],
        offset: int,
    ) -> Storage:
        """Contiguous copy of the view ``out[i] = flat(x)[offset + sum(i_d * strides[d])]``.

        Strides are in elements and non-negative (0 broadcasts). Permute, slicing,
        narrow and broadcast_to are all this one capability.
        """
        raise self._missing("copy_strided")

    def concat(
        self, xs: Sequence[Storage], shapes: Sequence[Shape], dtype: DType, axis: int
    ) -> Storage:
        """Concatenate along ``axis``; the shapes agree on every other axis."""
        raise self._missing("concat")

    # -- elementwise ----------------------------------------------------------
    def unary(self, op: str, x: Storage, shape: Shape, dtype: DType) -> Storage:
        """``op`` in neg abs exp log sqrt rsqrt tanh sigmoid relu gelu gelu_tanh silu
        (float32; int64 has neg and abs), or ``logical_not`` (bool). For bfloat16 (API
        1.5, where ``dtypes`` has it) the float32 function of the widened value, rounded
        once to bfloat16."""
        raise self._missing("unary")

    def binary(
        self,
        op: str,
        a: Storage,
        a_shape: Shape,
        b: Storage,
        b_shape: Shape,
        out_shape: Shape,
        dtype: DType,
    ) -> Storage:
        """``op`` in add sub mul div pow maximum minimum with numpy broadcasting to
        ``out_shape``; both operands have ``dtype`` (int64: no div or pow; bfloat16:
        computed in float32 and rounded once to bfloat16)."""
        raise self._missing("binary")

    def compare(
        self,
        op: str,
        a: Storage,
        a_shape: Shape,
        b: Storage,
        b_shape: Shape,
        out_shape: Shape,
        dtype: DType,
    ) -> Storage:
        """``op`` in eq ne lt le gt ge logical_and logical_or, broadcasting; bool result
        (bfloat16 operands compare as their float32 values)."""
        raise self._missing("compare")

    def where(
        self,
        cond: Storage,
        cond_shape: Shape,
        a: Storage,
        a_shape: Shape,
        b: Storage,
        b_shape: Shape,
        out_shape: Shape,
        dtype: DType,
    ) -> Storage:
        """``cond ? a : b`` with broadcasting; ``cond`` is bool."""
        raise self._missing("where")

    # -- reductions -----------------------------------------------------------
    def reduce(self, op: str, x: Storage, shape: Shape, dtype: DType, axis: int) -> Storage:
        """``op`` in sum mean max min sum_squares over one axis, which is removed.

        int64 has sum, max and min. sum_squares accumulates in float64.
        """
        raise self._missing("reduce")

    def argmax(self, x: Storage, shape: Shape, dtype: DType, axis: int) -> Storage:
        """int64 index of the first largest element along ``axis`` (removed)."""
        raise self._missing("argmax")

    # -- linear algebra -------------------------------------------------------
    def matmul(
        self,
        a: Storage,
        a_shape: Shape,
        b: Storage,
        b_shape: Shape,
        transpose_a: bool,
        transpose_b: bool,
    ) -> Storage:
        """Batched float32 matmul over the last two axes; batch axes broadcast.
        ``transpose_a`` reads a as its transpose ([..., k, m]) without a copy.

        API 1.5, where ``dtypes`` has bfloat16: both operands may be bfloat16 (never
        one of each). Products and sums are then float32 (each product of two
        bfloat16 values is exact in float32) and the result is float32; the
        backend knows the dtype from its own handles."""
        raise self._missing("matmul")

    def matmul_compute(
        self,
        a: Storage,
        a_shape: Shape,
        b: Storage,
        b_shape: Shape,
        transpose_a: bool,
        transpose_b: bool,
        compute: DType,
    ) -> Storage:
        """API 1.9: ``matmul`` of two float32 operands in the compute dtype ``compute``
        (bfloat16): each operand element is rounded to bfloat16 (to nearest, ties to
        even) as it is read, the products of the roundings are exact in float32, the
        sums float32, the result float32 -- bit for bit ``matmul`` of the two operands
        converted with ``astype`` first, without writing the converted copies. The op
        layer composes it from ``astype`` and ``matmul`` for a backend without it."""
        raise self._missing("matmul_compute")

    def linear(
        self,
        x: Storage,
        x_shape: Shape,
        w: Storage,
        w_shape: Shape,
        bias: Storage | None,
        compute: DType | None = None,
    ) -> Storage:
        """API 1.10: ``x @ w.T + bias`` for ``x [rows, in]``, ``w [out, in]`` (both
        float32 or both bfloat16) and a float32 ``bias [out]`` or None: a float32
        ``[rows, out]``, the product's float32 sums with the bias added once (the bits of
        ``matmul`` then ``binary("add")``). ``compute`` bfloat16: float32 operands read
        as their bfloat16 roundings (``matmul_compute``'s rule). The op layer composes it
        from ``astype``, ``matmul`` and ``binary`` for a backend without it."""
        raise self._missing("linear")

    def linear_backward(
        self,
        g: Storage,
        x: Storage,
        x_shape: Shape,
        w: Storage,
        w_shape: Shape,
        need_x: bool,
        need_w: bool,
        need_b: bool,
        compute: DType | None = None,
    ) -> tuple[Storage | None, Storage | None, Storage | None]:
        """API 1.10: the gradients of ``linear`` for a float32 ``g [rows, out]``:
        ``(dx, dw, db)`` with ``dx = gl @ w``, ``dw = gl.T @ x`` (float32 products of
        the bfloat16 roundings when ``compute`` is bfloat16 or the operands are
        bfloat16; ``gl`` is ``g`` rounded the same way) and ``db`` the column sum of
        the float32 ``g``, each None unless asked for. A kernel may sum ``db`` in its
        own fixed order and says its bound. The op layer composes it from ``astype``,
        ``matmul`` and ``reduce`` for a backend without it."""
        raise self._missing("linear_backward")

    # -- indexing -------------------------------------------------------------
    def index_select(
        self,
        x: Storage,
        shape: Shape,
        dtype: DType,
        axis: int,
        indices: Storage,
        count: int,
    ) -> Storage:
        """``out = x.take(indices, axis)`` with 1-D int64 ``indices`` of ``count`` entries."""
        raise self._missing("index_select")

    def index_add(
        self,
        base: Storage,
        shape: Shape,
        axis: int,
        indices: Storage,
        src: Storage,
        src_shape: Shape,
    ) -> Storage:
        """A new float32 tensor: ``base`` plus ``src`` slices added at ``indices`` along ``axis``
        (repeated indices accumulate, in index order)."""
        raise self._missing("index_add")

    def gather(
        self,
        x: Storage,
        shape: Shape,
        dtype: DType,
        axis: int,
        indices: Storage,
        index_shape: Shape,
    ) -> Storage:
        """``out[..i..] = x[.. indices[..i..] ..]`` along ``axis`` (torch.gather);
        ``indices`` matches ``x`` on every other axis."""
        raise self._missing("gather")

    def scatter_add(
        self,
        base: Storage,
        shape: Shape,
        axis: int,
        indices: Storage,
        index_shape: Shape,
        src: Storage,
    ) -> Storage:
        """A new float32 tensor: ``base`` with ``src`` added at ``indices`` along ``axis``
        (the adjoint of gather)."""
        raise self._missing("scatter_add")

    # -- normalization --------------------------------------------------------
    def softmax(self, x: Storage, shape: Shape, causal: bool, log: bool) -> Storage:
        """(Log-)softmax over the last axis. ``causal``: for ``[..., t, s]`` scores, query
        q sees keys ``0..=q + s - t``; the rest get exactly 0 (log: -inf)."""
        raise self._missing("softmax")

    # -- optimizer ------------------------------------------------------------
    def adam_update(
        self,
        params: Sequence[Storage],
        grads: Sequence[Storage],
        m: Sequence[Sequence[Storage]],
        v: Sequence[Sequence[Storage]],
        sizes: Sequence[int],
        page_size: int,
        lr: Sequence[float],
        beta1: Sequence[float],
        beta2: Sequence[float],
        eps: Sequence[float],
        weight_decay: Sequence[float],
        decoupled: bool,
        step: Sequence[int],
        grad_scale: float,
    ) -> int | None:
        """One Adam / AdamW step over every parameter, in place and all-or-nothing.

        ``params[i]`` and ``grads[i]`` are float32 storages of ``sizes[i]`` elements
        (read flat). ``m[i]`` and ``v[i]`` are the first and second moments of
        parameter i as lists of 1-D float32 pages: every page holds ``page_size``
        elements except the last, which holds the rest (an empty parameter has one
        empty page; a ``page_size`` of at least ``sizes[i]`` is a contiguous moment).
        ``lr``, ``beta1``, ``beta2``, ``eps``, ``weight_decay`` and ``step`` (counting
        from 1) hold one entry per parameter, so parameter groups share one call.
        ``decoupled`` selects AdamW's decay; ``grad_scale`` multiplies every gradient
        first (clipping). Scalars are rounded once to float32 and, element by element
        (torch.optim.Adam's order)::

            g  = grad * grad_scale           (+ weight_decay * p unless decoupled)
            p  = p * (1 - lr * weight_decay) (decoupled only)
            m' = m + (1 - beta1) * (g - m)
            v' = v * beta2 + (1 - beta2) * g * g
            p' = p + (-lr / (1 - beta1**step)) * m' / (sqrt(v') / sqrt(1 - beta2**step) + eps)

        Every candidate (p', m', v') is computed before anything is written. If all
        are finite, they replace ``params``, ``m`` and ``v`` in place and the result
        is None; otherwise nothing changes and the result is the index of the first
        parameter with a non-finite candidate. Arguments that disagree raise.
        Results do not depend on the page layout or the thread count.
        """
        raise self._missing("adam_update")

    def clipped_adam_update(
        self,
        params: Sequence[Storage],
        grads: Sequence[Storage],
        m: Sequence[Sequence[Storage]],
        v: Sequence[Sequence[Storage]],
        sizes: Sequence[int],
        page_size: int,
        lr: Sequence[float],
        beta1: Sequence[float],
        beta2: Sequence[float],
        eps: Sequence[float],
        weight_decay: Sequence[float],
        decoupled: bool,
        step: Sequence[int],
        max_grad_norm: float | None,
        values: Sequence[Storage],
    ) -> tuple[list[float], list[float], bool, int | None]:
        """API 1.8: a training step's gradient norm, clip scale and Adam update in one
        call, and one read of what the host needs (on a device, the step's only wait).

        ``sums[i]`` is gradient i's sum of squares over the flat gradient, accumulated
        in float64 (in an order fixed by its size) and rounded once to float32 (0.0
        for an empty one) and ``read[j]`` the value of ``values[j]`` (one-element float32
        storages, a step's loss). The update goes ahead only when every value is
        finite and every sum is a normal float32 or exactly zero (every element zero);
        then ``norm = sqrt(math.fsum(sums))`` (the exactly rounded sum), ``scale =
        max_grad_norm / norm`` when ``norm > max_grad_norm`` (else 1; None: no
        clipping), and the update is ``adam_update``'s with ``grad_scale = scale``.

        Returns ``(sums, read, applied, bad)``: ``applied`` when the parameters and
        moments were written; otherwise nothing changed and ``bad`` is the index of the
        first parameter with a non-finite candidate, or None when the update did not
        go ahead (a value not finite, or a sum the host must recompute: overflowed,
        underflowed or not finite)."""
        raise self._missing("clipped_adam_update")


def composed_capabilities(backend: Backend) -> frozenset[str]:
    """The COMPOSED capabilities that ``backend`` lacks as kernels and has every
    ingredient of: the op layer runs them from its other ops, on its device."""
    own = backend.capabilities()
    return frozenset(
        name
        for name, ingredients in COMPOSED.items()
        if name not in own and all(i in own for i in ingredients)
    )


@cache
def overridden_capabilities(cls: type[Backend]) -> frozenset[str]:
    """The CAPABILITIES methods that ``cls`` (a Backend subclass) defines itself or inherits
    from a class other than Backend."""
    return frozenset(
        name for name in CAPABILITIES if getattr(cls, name, None) is not getattr(Backend, name)
    )
