"""The fused kernels of the backend interface (API 1.1 onward): normalization,
activation and loss gradients, rotary positions, attention (materialized, Flash,
ragged and paged), key/value row writes, NF4 and llama.cpp block-layout weights and
whole-step decoding. ``riftco.tensor.backend.Backend`` is the whole interface; this
base class holds these methods so each file reads as one family. Every default raises
``CapabilityMissing``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import CapabilityMissing

Storage = Any
Shape = tuple[int, ...]


class FusedKernels:
    """Methods of `riftco.tensor.backend.Backend` for the fused kernels (see the module
    docstring); a backend subclasses ``Backend``, never this class alone."""

    #: The error for a capability this backend lacks (defined by ``Backend``).
    _missing: Callable[[str], CapabilityMissing]

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

    def add_layer_norm(
        self,
        x: Storage,
        r: Storage,
        shape: Shape,
        weight: Storage | None,
        bias: Storage | None,
        eps: float,
    ) -> tuple[Storage, Storage, Storage, Storage]:
        """API 1.11: a residual add and the layer norm of its sum in one pass, float32
        ``x`` and ``r`` of one shape: ``(s, y, mean, rstd)`` with ``s = x + r`` and
        ``(y, mean, rstd)`` :meth:`layer_norm` of ``s`` -- the bits of ``binary("add")``
        then ``layer_norm``. The op layer composes it from those two for a backend
        without it."""
        raise self._missing("add_layer_norm")

    def add_layer_norm_backward(
        self,
        dy: Storage,
        ds: Storage,
        x: Storage,
        shape: Shape,
        weight: Storage | None,
        mean: Storage,
        rstd: Storage,
        with_bias: bool,
    ) -> tuple[Storage, Storage | None, Storage | None]:
        """API 1.14: the gradients of :meth:`add_layer_norm`'s ``(s, y)`` together,
        ``x`` being ``s``: ``(ds + dx, dweight, dbias)`` with ``(dx, dweight, dbias)``
        :meth:`layer_norm_backward` of ``dy`` (float32 ``ds`` of ``x``'s shape, added
        once) -- the bits of that method then ``binary("add")``. The op layer composes
        it from those two for a backend without it."""
        raise self._missing("add_layer_norm_backward")

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

    def cross_entropy_mean(
        self, logits: Storage, shape: Shape, targets: Storage, ignore_index: int
    ) -> tuple[Storage, Storage, Storage]:
        """API 1.15: the mean of :meth:`cross_entropy`'s losses over the rows whose
        target is not ``ignore_index``. Returns ``(loss [], lse [n], scale [])`` with
        ``scale = 1 / max(kept, 1)`` (``kept`` the count of such rows, as float32; the
        reciprocal taken as ``binary("div")`` takes it) and ``loss = sum(losses) * scale``
        (the float32 sum as ``reduce("sum")`` rounds it, then ``binary("mul")``), so 0
        when no row is kept. Equal to those ops' results up to the order of the sum's
        float64 additions. The op layer composes it from them without it."""
        raise self._missing("cross_entropy_mean")

    def cross_entropy_mean_backward(
        self,
        logits: Storage,
        shape: Shape,
        targets: Storage,
        lse: Storage,
        grad: Storage,
        scale: Storage,
        ignore_index: int,
    ) -> Storage:
        """API 1.15: the gradient of :meth:`cross_entropy_mean`'s loss for an upstream
        ``grad []``: :meth:`cross_entropy_backward` with every row's gradient
        ``grad * scale`` (one float32 product, as ``binary("mul")`` gives it) -- those
        ops' bits."""
        raise self._missing("cross_entropy_mean_backward")

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

    def flash_attention_compute(
        self,
        q: Storage,
        k: Storage,
        v: Storage,
        q_shape: Shape,
        kv_shape: Shape,
        scale: float,
        causal: bool,
        window: int,
        compute: DType,
    ) -> tuple[Storage, Storage, Storage]:
        """API 1.12: :meth:`flash_attention` of bfloat16 ``q``, ``k`` and ``v`` whose
        products may multiply their float32 operands (the probabilities) as their
        ``compute`` (bfloat16) roundings, float32 sums and results, as
        ``matmul_compute`` does: a permission, not a second contract -- the result is
        within ``2**-8 * max|v|`` of :meth:`flash_attention`'s per element. The op layer
        runs :meth:`flash_attention` for a backend without it."""
        raise self._missing("flash_attention_compute")

    def flash_attention_backward_compute(
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
        compute: DType,
    ) -> tuple[Storage, Storage, Storage]:
        """API 1.12: :meth:`flash_attention_backward` whose products may multiply their
        float32 operands (the output gradient, the probabilities, the scores'
        gradient) as their ``compute`` roundings, float32 sums and gradients: each
        gradient within a few bfloat16 roundings of :meth:`flash_attention_backward`'s
        (what torch's bfloat16 SDPA backward multiplies). The op layer runs
        :meth:`flash_attention_backward` for a backend without it."""
        raise self._missing("flash_attention_backward_compute")

    def projected_attention(
        self,
        x: Storage,
        x_shape: Shape,
        ws: Sequence[Storage],
        w_shapes: Sequence[Shape],
        bs: Sequence[Storage] | None,
        batch: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        scale: float,
        causal: bool,
        window: int,
        compute: DType | None,
    ) -> tuple[Storage, Storage, Storage, tuple[Storage, ...]]:
        """API 1.13: flash self-attention of float32 ``x [B*T, d_model]`` through its
        query, key and value projections (float32 ``ws``, ``[out_i, d_model]``; float32
        ``bs`` or None): ``(out [B, T, heads, head_dim], row_max, row_sum, saved)``.
        The projections are the stacked product ``x [w_q; w_k; w_v]^T + [b_q; b_k;
        b_v]`` (``compute``: its operands read as their bfloat16 roundings, and the
        result rounded once before attention reads its query, key and value columns);
        ``out`` and the statistics ``[B, heads, T]`` are :meth:`flash_attention`'s
        (:meth:`flash_attention_compute`'s with ``compute``). ``saved``: whatever of
        the backend's storages its backward needs, handed back unchanged. The op layer
        composes it (``ops/projected.py``) for a backend without it and for rotary
        positions, the materialized method and other dtypes."""
        raise self._missing("projected_attention")

    def projected_attention_backward(
        self,
        dout: Storage,
        x: Storage,
        x_shape: Shape,
        ws: Sequence[Storage],
        w_shapes: Sequence[Shape],
        has_bias: bool,
        saved: tuple[Storage, ...],
        out: Storage,
        row_max: Storage,
        row_sum: Storage,
        batch: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        scale: float,
        causal: bool,
        window: int,
        need_x: bool,
        compute: DType | None,
    ) -> tuple[Storage | None, list[Storage], list[Storage] | None]:
        """API 1.13: the gradients of :meth:`projected_attention` for float32 ``dout
        [B, T, heads * head_dim]``: ``(dx [B*T, d_model] or None, [dw_i], [db_i] or
        None)``, float32, from the forward's ``saved``: the flash backward, then
        ``dx`` the stacked gradient times the stacked weights (a backend may sum it
        as one product a part), ``dw_i`` the part's gradient (transposed) times ``x``
        and ``db_i`` its column sum (each product's operands read as their
        ``compute`` roundings when given)."""
        raise self._missing("projected_attention_backward")

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
