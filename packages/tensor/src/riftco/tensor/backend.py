"""The backend interface: one method per capability, over opaque storage handles.

A backend is a Python object. Its storage handles are whatever it likes (a
numpy array for the CPU backend, a device buffer elsewhere); riftco.tensor
never looks inside them, it only passes them back to the backend that made
them, together with the shapes and dtypes it has already validated. Every
shape argument is a tuple of ints; every handle is C-contiguous row-major.

Adding a capability: add a method here (its default raises CapabilityMissing),
implement it in the CPU backend and the numpy reference backend
(riftco.testing.tensor), test it against a numpy formula, list it in
CAPABILITIES and bump the minor API version.

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

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import CapabilityMissing, DTypeError

#: (major, minor). Plugins declare the version they implement; a different
#: major makes them unavailable.
BACKEND_API_VERSION = (1, 7)

Storage = Any
Shape = tuple[int, ...]

#: Capability name -> the API minor version that introduced it.
CAPABILITIES: dict[str, int] = {
    name: 0
    for name in (
        "from_numpy to_numpy reshape assign astype copy_strided concat unary binary compare "
        "where reduce argmax matmul index_select index_add gather scatter_add softmax"
    ).split()
}
CAPABILITIES["adam_update"] = 1
CAPABILITIES.update(
    dict.fromkeys(
        "layer_norm layer_norm_backward rms_norm rms_norm_backward activation_backward "
        "cross_entropy cross_entropy_backward rotary attention attention_backward "
        "flash_attention flash_attention_backward attention_varlen write_rows".split(),
        2,
    )
)

CAPABILITIES["paged_attention"] = 3
CAPABILITIES.update(dict.fromkeys(("nf4_dequantize", "nf4_linear", "nf4_linear_backward"), 4))
CAPABILITIES.update(dict.fromkeys(("block_dequantize", "block_linear"), 6))
CAPABILITIES.update(dict.fromkeys(("decode_program", "decode_step"), 7))

#: What the op layer composes from a backend's own ops where the backend lacks the
#: kernel: capability -> the capabilities the composition calls. The composition runs on
#: the same device; it is listed apart from the backend's kernels (`composed_capabilities`).
COMPOSED: dict[str, tuple[str, ...]] = dict.fromkeys(
    ("block_dequantize", "block_linear"),
    (
        "from_numpy", "reshape", "astype", "copy_strided", "concat", "unary", "binary",
        "compare", "where", "reduce", "matmul", "index_select",
    ),
)  # fmt: skip

#: The dtypes every backend's storage holds (API 1.0). ``Backend.dtypes`` may add
#: ``bfloat16`` (API 1.5).
BASE_DTYPES: frozenset[DType] = frozenset((DType.float32, DType.int64, DType.bool, DType.uint8))

#: API 1.0's general op layer (storage, layout, elementwise, reductions, matmul, indexing,
#: softmax), which every model path uses; the later capabilities are fused kernels.
BASE_CAPABILITIES: tuple[str, ...] = tuple(
    name for name, minor in CAPABILITIES.items() if minor == 0
)


def require_dtype_support(op: str, backend: Backend, dtype: DType) -> None:
    """Raise DTypeError unless ``backend`` holds ``dtype`` tensors."""
    if dtype not in backend.dtypes:
        held = ", ".join(d.value for d in DType if d in backend.dtypes)
        raise DTypeError(
            f"{op}: backend {backend.name!r} does not hold {dtype.value} tensors (it holds {held})"
        )


class Backend:
    """Base class of every backend. Subclasses override the capabilities they have."""

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

    # -- fused neural-network kernels ------------------------------------------
    # Rows are the leading axes flattened; the last axis is normalized. Statistics
    # come back as float32 storages shaped like the rows (``shape[:-1]``).
    def layer_norm(
        self, x: Storage, shape: Shape, weight: Storage | None, bias: Storage | None, eps: float
    ) -> tuple[Storage, Storage, Storage]:
        """``y = (x - mean) / sqrt(var + eps) * weight + bias`` over the last axis (biased
        variance; ``weight``/``bias`` ``[d]`` or None). Returns ``(y, mean, rstd)``."""
        raise self._missing("layer_norm")

    def layer_norm_backward(
        self,
        dy: Storage,
        x: Storage,
        shape: Shape,
        weight: Storage | None,
        mean: Storage,
        rstd: Storage,
        with_bias: bool,
    ) -> tuple[Storage, Storage | None, Storage | None]:
        """``(dx, dweight, dbias)`` of :meth:`layer_norm`; ``dweight`` is None without a
        weight, ``dbias`` None unless ``with_bias``. Parameter gradients sum over rows."""
        raise self._missing("layer_norm_backward")

    def rms_norm(
        self, x: Storage, shape: Shape, weight: Storage | None, eps: float
    ) -> tuple[Storage, Storage]:
        """``y = x / sqrt(mean(x^2) + eps) * weight`` over the last axis. Returns ``(y, rstd)``."""
        raise self._missing("rms_norm")

    def rms_norm_backward(
        self, dy: Storage, x: Storage, shape: Shape, weight: Storage | None, rstd: Storage
    ) -> tuple[Storage, Storage | None]:
        """``(dx, dweight)`` of :meth:`rms_norm` (``dweight`` None without a weight)."""
        raise self._missing("rms_norm_backward")

    def activation_backward(self, op: str, x: Storage, dy: Storage, shape: Shape) -> Storage:
        """``dx = dy * op'(x)`` for ``op`` in gelu gelu_tanh silu (float32)."""
        raise self._missing("activation_backward")

    def cross_entropy(
        self, logits: Storage, shape: Shape, targets: Storage, ignore_index: int
    ) -> tuple[Storage, Storage]:
        """Softmax cross-entropy of ``logits [n, classes]`` against int64 ``targets [n]``.

        Returns ``(losses [n], lse [n])``: ``lse`` the log-sum-exp of each row and
        ``losses = lse - logits[row, target]``, 0 where ``target == ignore_index``.
        A target outside ``[0, classes)`` that is not ``ignore_index`` raises."""
        raise self._missing("cross_entropy")

    def cross_entropy_backward(
        self,
        logits: Storage,
        shape: Shape,
        targets: Storage,
        lse: Storage,
        grad: Storage,
        ignore_index: int,
    ) -> Storage:
        """``dlogits = (exp(logits - lse) - onehot(targets)) * grad[:, None]``, 0 on ignored
        rows; the probabilities are recomputed from the logits."""
        raise self._missing("cross_entropy_backward")

    def rotary(
        self, x: Storage, shape: Shape, positions: Storage, theta: float, inverse: bool
    ) -> Storage:
        """Rotary embedding of ``x [..., heads, head_dim]`` (split-half form) at int64
        ``positions`` shaped ``shape[:-2]``: pair ``(i, i + head_dim/2)`` turns by
        ``pos * theta**(-2i/head_dim)`` (by its negative when ``inverse``, the adjoint)."""
        raise self._missing("rotary")

    # Attention: ``q [B, T, H, Dh]``, ``k``/``v`` ``[B, S, Hkv, Dh]``; query head h reads
    # key/value head ``h // (H // Hkv)``. With ``causal`` query i sits at position
    # ``S - T + i`` and sees keys up to it; ``window`` w > 0 (causal only) also hides
    # keys w or more positions back. Hidden keys get probability exactly 0.
    # API 1.5, where ``dtypes`` has bfloat16: q, k and v of attention, flash_attention
    # and their backward may all be bfloat16 (the other operands stay float32). Scores,
    # softmax statistics and sums are float32, and so are every output and gradient;
    # a device may round the probabilities to bfloat16 before multiplying by v.
    def attention(
        self,
        q: Storage,
        k: Storage,
        v: Storage,
        q_shape: Shape,
        kv_shape: Shape,
        scale: float,
        causal: bool,
        window: int,
    ) -> tuple[Storage, Storage]:
        """Materialized attention: ``(out [B, T, H, Dh], probs [B, H, T, S])`` with
        ``probs = softmax(scale * q k^T)`` under the mask."""
        raise self._missing("attention")

    def attention_backward(
        self,
        dout: Storage,
        q: Storage,
        k: Storage,
        v: Storage,
        probs: Storage,
        q_shape: Shape,
        kv_shape: Shape,
        scale: float,
        causal: bool,
        window: int,
    ) -> tuple[Storage, Storage, Storage]:
        """``(dq, dk, dv)`` of :meth:`attention` from its saved probabilities."""
        raise self._missing("attention_backward")

    def flash_attention(
        self,
        q: Storage,
        k: Storage,
        v: Storage,
        q_shape: Shape,
        kv_shape: Shape,
        scale: float,
        causal: bool,
        window: int,
    ) -> tuple[Storage, Storage, Storage]:
        """Exact attention in tiles with an online softmax: ``(out, row_max, row_sum)``,
        the statistics ``[B, H, T]`` being each row's score maximum and
        ``sum(exp(score - max))``. Memory is linear in the sequence length."""
        raise self._missing("flash_attention")

    def flash_attention_backward(
        self,
        dout: Storage,
        q: Storage,
        k: Storage,
        v: Storage,
        out: Storage,
        row_max: Storage,
        row_sum: Storage,
        q_shape: Shape,
        kv_shape: Shape,
        scale: float,
        causal: bool,
        window: int,
    ) -> tuple[Storage, Storage, Storage]:
        """``(dq, dk, dv)`` of :meth:`flash_attention`, recomputing probabilities per tile."""
        raise self._missing("flash_attention_backward")

    def attention_varlen(
        self,
        q: Storage,
        k: Storage,
        v: Storage,
        q_shape: Shape,
        kv_shape: Shape,
        q_starts: Sequence[int],
        q_counts: Sequence[int],
        kv_starts: Sequence[int],
        kv_lengths: Sequence[int],
        scale: float,
        window: int,
    ) -> Storage:
        """Causal attention of packed ragged sequences (incremental decoding):
        ``q [N, H, Dh]``, ``k``/``v`` ``[M, Hkv, Dh]``. Sequence j owns query rows
        ``q_starts[j] : +q_counts[j]`` (covering every row once) and key rows
        ``kv_starts[j] : +kv_lengths[j]``; its queries are its last ``q_counts[j]``
        positions. Returns ``out [N, H, Dh]``."""
        raise self._missing("attention_varlen")

    def write_rows(
        self, dst: Storage, shape: Shape, dtype: DType, rows: Storage, src: Storage
    ) -> None:
        """Overwrite rows ``rows[i]`` (axis 0) of ``dst`` in place with ``src[i]``
        (key/value-cache writes). ``rows`` is int64 ``[n]``, distinct and in range;
        ``src`` is ``[n, *shape[1:]]`` of ``dtype``. Nothing is written if any row is
        out of range."""
        raise self._missing("write_rows")

    def paged_attention(
        self,
        q: Storage,
        q_shape: Shape,
        k_pages: Storage,
        v_pages: Storage,
        pages_shape: Shape,
        page_table: Storage,
        table_shape: Shape,
        q_starts: Sequence[int],
        q_counts: Sequence[int],
        kv_lengths: Sequence[int],
        scale: float,
        window: int,
    ) -> Storage:
        """Causal attention of packed ragged sequences over a paged key/value cache:
        ``q [N, H, Dh]``; ``k_pages``/``v_pages`` ``[P, page_size, Hkv, Dh]``;
        ``page_table`` int64 ``[S, max_pages]``. Sequence j owns query rows
        ``q_starts[j] : +q_counts[j]`` (covering every row once); its key and value at
        position ``p < kv_lengths[j]`` are row ``p % page_size`` of page
        ``page_table[j, p // page_size]`` (later entries are ignored), and its queries
        are its last ``q_counts[j]`` positions. ``window`` > 0 hides keys ``window`` or
        more positions back. Returns ``out [N, H, Dh]``; a sequence's rows do not
        depend on the other sequences."""
        raise self._missing("paged_attention")

    # -- quantized weights (NF4) ------------------------------------------------
    # A packed NF4 weight ``w_shape`` = [rows, cols] (n elements, flat row-major) is
    # ``codes`` uint8 [ceil(n / 2)] (element 2j in the low nibble of byte j, 2j + 1
    # in the high one) and per-block scales ``absmax`` [ceil(n / block_size)]. With
    # double quantization ``absmax`` is uint8, ``group_range`` float32
    # [ceil(blocks / 256)] and block b's scale is, in float32 from left to right,
    # ``clamp(offset + (group_range[b // 256] * (absmax[b] - 128)) / 127, 0, FLT_MAX)``;
    # without it ``absmax`` is float32 and ``group_range`` None. Element i is
    # ``NF4[code_i] * scale[i // block_size]`` in float32 (riftco.tensor.ops.quantized
    # documents the format). Kernels must not materialize the whole float32 weight.
    def nf4_dequantize(
        self,
        codes: Storage,
        absmax: Storage,
        group_range: Storage | None,
        offset: float,
        w_shape: Shape,
        block_size: int,
    ) -> Storage:
        """The float32 weight ``[rows, cols]`` of a packed NF4 weight."""
        raise self._missing("nf4_dequantize")

    def nf4_linear(
        self,
        x: Storage,
        x_shape: Shape,
        codes: Storage,
        absmax: Storage,
        group_range: Storage | None,
        offset: float,
        w_shape: Shape,
        block_size: int,
        bias: Storage | None,
    ) -> Storage:
        """``x [..., cols] @ dequant(W)^T (+ bias [rows])`` -> ``[..., rows]``, the weight
        dequantized tile by tile inside the kernel."""
        raise self._missing("nf4_linear")

    def nf4_linear_backward(
        self,
        dy: Storage,
        dy_shape: Shape,
        codes: Storage,
        absmax: Storage,
        group_range: Storage | None,
        offset: float,
        w_shape: Shape,
        block_size: int,
    ) -> Storage:
        """``dy [..., rows] @ dequant(W)`` -> ``[..., cols]``: the input gradient of
        :meth:`nf4_linear` (the packed weight gets none)."""
        raise self._missing("nf4_linear_backward")

    # -- weights in llama.cpp's block layouts (inference) -----------------------------
    # ``data`` is uint8, the rows of a ``w_shape`` = [rows, cols] weight one after
    # another, each as a GGUF tensor row of ``format``: ``q8_0`` (blocks of 32: a half
    # scale d and 32 int8 q, x = d q), ``q4_0`` (a half d and 16 bytes of nibbles, low
    # nibbles elements 0..15, high 16..31, x = d (q - 8)) or ``f16``
    # (riftco.tensor.ops.blockquant documents the layouts and the arithmetic).
    def block_dequantize(self, data: Storage, format: str, w_shape: Shape) -> Storage:
        """The float32 weight ``[rows, cols]`` of a block-layout weight."""
        raise self._missing("block_dequantize")

    def block_linear(
        self,
        x: Storage,
        x_shape: Shape,
        data: Storage,
        format: str,
        w_shape: Shape,
        bias: Storage | None,
    ) -> Storage:
        """``x [..., cols] @ W^T (+ bias [rows])`` -> ``[..., rows]`` without a float32
        copy of the weight (Q8_0 / Q4_0 may quantize ``x`` to 8 bits per block of 32)."""
        raise self._missing("block_linear")

    # -- whole-step decoding (API 1.7) --------------------------------------------------
    # riftco.tensor.ops.decode documents the step; its DecodeSpec and DecodeBatch name
    # storage handles of this backend, already checked against each other's shapes. A
    # native kernel only: a backend without one leaves decoding to riftco-nn's op-by-op
    # forward (nothing here composes it).
    def decode_program(self, spec: Any) -> Any:
        """Compile a ``DecodeSpec`` into an opaque program for :meth:`decode_step`; it may
        read the weight storages in place (it must keep them alive)."""
        raise self._missing("decode_program")

    def decode_step(self, program: Any, batch: Any) -> Storage:
        """Run one ``DecodeBatch`` through ``program``: write each new token's keys and
        values at its cache row, return the logits ``[len(logit_rows), vocab]``. Each
        row's logits must not depend on the other rows of the batch or the thread count
        (a backend without that guarantee should not implement this)."""
        raise self._missing("decode_step")


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
