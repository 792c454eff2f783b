"""Fused neural-network ops: normalization, activation gradients, softmax
cross-entropy, rotary embedding and attention (materialized and Flash).

Each forward op that autograd differentiates has a ``*_with_stats`` form that
also returns what its backward op needs, so a caller keeps nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError
from riftco.tensor.ops._common import check_same_backend, require_dtype, require_tensor
from riftco.tensor.ops.elementwise import maximum, ne
from riftco.tensor.ops.linear_layer import _compute
from riftco.tensor.tensor import Tensor

F32, I64, BF16 = DType.float32, DType.int64, DType.bfloat16

ACTIVATIONS = ("gelu", "gelu_tanh", "silu")
ATTENTION_METHODS = ("flash", "materialized")


def _wrap(data, shape, like: Tensor, dtype: DType = F32) -> Tensor:
    return Tensor._wrap(data, tuple(shape), dtype, like.backend)


def _floats(op: str, *tensors: Tensor | None) -> list[Tensor]:
    present = [t for t in tensors if t is not None]
    backend = getattr(present[0], "backend", None) if present else None
    if all(type(t) is Tensor and t.dtype is F32 and t.backend is backend for t in present):
        return present  # the common case; anything else is named below
    present = [require_tensor(op, t) for t in present]
    check_same_backend(op, *present)
    for t in present:
        require_dtype(op, t, F32)
    return present


def _param(op: str, what: str, p: Tensor | None, d: int) -> object:
    if p is None:
        return None
    if p.shape != (d,):
        raise ShapeError(f"{op}: {what} must be [{d}], found {p.shape}")
    return p._data


def _rows(op: str, x: Tensor) -> tuple[int, ...]:
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ShapeError(f"{op}: expected [..., d] with d > 0, found {x.shape}")
    return x.shape[:-1]


def _same(op: str, name: str, t: Tensor, shape: tuple[int, ...]) -> None:
    if t.shape != tuple(shape):
        raise ShapeError(f"{op}: {name} must have shape {tuple(shape)}, found {t.shape}")


# -- normalization --------------------------------------------------------------
def layer_norm_with_stats(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> tuple[Tensor, Tensor, Tensor]:
    """``(y, mean, rstd)``: layer norm over the last axis and its per-row statistics."""
    _floats("layer_norm", x, weight, bias)
    rows, d = _rows("layer_norm", x), x.shape[-1]
    w, b = _param("layer_norm", "weight", weight, d), _param("layer_norm", "bias", bias, d)
    y, mean, rstd = x.backend.layer_norm(x._data, x.shape, w, b, float(eps))
    return _wrap(y, x.shape, x), _wrap(mean, rows, x), _wrap(rstd, rows, x)


def layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis."""
    return layer_norm_with_stats(x, weight, bias, eps)[0]


def add_layer_norm_with_stats(
    x: Tensor,
    residual: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(s, y, mean, rstd)``: ``s = x + residual`` (float32, one shape) and the layer
    norm of ``s`` with its statistics, in one pass where the backend has the kernel
    (``add_layer_norm``, API 1.11); otherwise ``x + residual`` then
    :func:`layer_norm_with_stats`. The same bits either way."""
    _floats("add_layer_norm", x, residual, weight, bias)
    _same("add_layer_norm", "residual", residual, x.shape)
    if "add_layer_norm" not in x.backend.capabilities():
        s = x + residual
        return (s, *layer_norm_with_stats(s, weight, bias, eps))
    rows, d = _rows("add_layer_norm", x), x.shape[-1]
    w, b = _param("add_layer_norm", "weight", weight, d), _param("add_layer_norm", "bias", bias, d)
    s, y, mean, rstd = x.backend.add_layer_norm(x._data, residual._data, x.shape, w, b, float(eps))
    return _wrap(s, x.shape, x), _wrap(y, x.shape, x), _wrap(mean, rows, x), _wrap(rstd, rows, x)


def add_layer_norm(
    x: Tensor,
    residual: Tensor,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor]:
    """``(x + residual, layer_norm(x + residual, weight, bias, eps))`` in one pass
    (see :func:`add_layer_norm_with_stats`)."""
    s, y, _, _ = add_layer_norm_with_stats(x, residual, weight, bias, eps)
    return s, y


def _norm_backward_operands(
    op: str,
    name: str,
    grad: Tensor,
    x: Tensor,
    weight: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
) -> tuple[int, Any]:
    """A layer norm backward's operands checked: the width and the weight's storage."""
    _floats(op, grad, x, weight, mean, rstd)
    rows, d = _rows(op, x), x.shape[-1]
    _same(op, name, grad, x.shape)
    _same(op, "mean", mean, rows)
    _same(op, "rstd", rstd, rows)
    return d, _param(op, "weight", weight, d)


def layer_norm_backward(
    grad: Tensor,
    x: Tensor,
    weight: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    with_bias: bool = True,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(dx, dweight, dbias)`` of :func:`layer_norm` from its statistics."""
    d, w = _norm_backward_operands("layer_norm_backward", "grad", grad, x, weight, mean, rstd)
    dx, dw, db = x.backend.layer_norm_backward(
        grad._data, x._data, x.shape, w, mean._data, rstd._data, bool(with_bias)
    )
    return (
        _wrap(dx, x.shape, x),
        None if dw is None else _wrap(dw, (d,), x),
        None if db is None else _wrap(db, (d,), x),
    )


def add_layer_norm_backward(
    grad_y: Tensor,
    grad_s: Tensor,
    s: Tensor,
    weight: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    with_bias: bool = True,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """The gradients of :func:`add_layer_norm`'s two results ``(s, y)`` together:
    ``(ds, dweight, dbias)`` with ``ds = grad_s + dx`` (``x``'s and ``residual``'s
    gradient alike) and ``(dx, dweight, dbias)`` :func:`layer_norm_backward` of
    ``grad_y`` at ``s``: one pass where the backend has the kernel
    (``add_layer_norm_backward``, API 1.14), else ``layer_norm_backward`` then the
    float32 add. The same bits either way."""
    _floats("add_layer_norm_backward", grad_s)
    _same("add_layer_norm_backward", "grad_s", grad_s, s.shape)
    if "add_layer_norm_backward" not in s.backend.capabilities():
        dx, dw, db = layer_norm_backward(grad_y, s, weight, mean, rstd, with_bias)
        return grad_s + dx, dw, db
    d, w = _norm_backward_operands(
        "add_layer_norm_backward", "grad_y", grad_y, s, weight, mean, rstd
    )
    ds, dw, db = s.backend.add_layer_norm_backward(
        grad_y._data, grad_s._data, s._data, s.shape, w, mean._data, rstd._data, bool(with_bias)
    )
    return (
        _wrap(ds, s.shape, s),
        None if dw is None else _wrap(dw, (d,), s),
        None if db is None else _wrap(db, (d,), s),
    )


def rms_norm_with_stats(
    x: Tensor, weight: Tensor | None = None, eps: float = 1e-6
) -> tuple[Tensor, Tensor]:
    """``(y, rstd)``: RMS norm over the last axis and its per-row reciprocal RMS."""
    _floats("rms_norm", x, weight)
    rows, d = _rows("rms_norm", x), x.shape[-1]
    y, rstd = x.backend.rms_norm(
        x._data, x.shape, _param("rms_norm", "weight", weight, d), float(eps)
    )
    return _wrap(y, x.shape, x), _wrap(rstd, rows, x)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis."""
    return rms_norm_with_stats(x, weight, eps)[0]


def rms_norm_backward(
    grad: Tensor, x: Tensor, weight: Tensor | None, rstd: Tensor
) -> tuple[Tensor, Tensor | None]:
    """``(dx, dweight)`` of :func:`rms_norm` from its statistics."""
    _floats("rms_norm_backward", grad, x, weight, rstd)
    rows, d = _rows("rms_norm_backward", x), x.shape[-1]
    _same("rms_norm_backward", "grad", grad, x.shape)
    _same("rms_norm_backward", "rstd", rstd, rows)
    w = _param("rms_norm_backward", "weight", weight, d)
    dx, dw = x.backend.rms_norm_backward(grad._data, x._data, x.shape, w, rstd._data)
    return _wrap(dx, x.shape, x), None if dw is None else _wrap(dw, (d,), x)


# -- activations ----------------------------------------------------------------
def activation_backward(op: str, x: Tensor, grad: Tensor) -> Tensor:
    """``grad * op'(x)`` for ``op`` in gelu, gelu_tanh, silu."""
    if op not in ACTIVATIONS:
        raise ValueError(f"activation_backward: op must be one of {ACTIVATIONS}, found {op!r}")
    _floats("activation_backward", x, grad)
    _same("activation_backward", "grad", grad, x.shape)
    return _wrap(x.backend.activation_backward(op, x._data, grad._data, x.shape), x.shape, x)


# -- loss -----------------------------------------------------------------------
def _check_logits(op: str, logits: Tensor, targets: Tensor) -> None:
    _floats(op, logits)
    require_tensor(op, targets)
    check_same_backend(op, logits, targets)
    require_dtype(op, targets, I64)
    if logits.ndim != 2 or targets.shape != logits.shape[:1] or logits.shape[1] == 0:
        raise ShapeError(
            f"{op}: expected logits [n, classes] and targets [n], "
            f"found {logits.shape} and {targets.shape}"
        )


def softmax_cross_entropy(
    logits: Tensor, targets: Tensor, ignore_index: int = -100
) -> tuple[Tensor, Tensor]:
    """``(losses [n], lse [n])`` of softmax cross-entropy per row: ``lse - logits[target]``,
    0 where the target is ``ignore_index``; ``lse`` is what the backward op needs."""
    _check_logits("softmax_cross_entropy", logits, targets)
    losses, lse = logits.backend.cross_entropy(
        logits._data, logits.shape, targets._data, int(ignore_index)
    )
    n = logits.shape[:1]
    return _wrap(losses, n, logits), _wrap(lse, n, logits)


def softmax_cross_entropy_backward(
    grad: Tensor, logits: Tensor, targets: Tensor, lse: Tensor, ignore_index: int = -100
) -> Tensor:
    """``(softmax(logits) - onehot(targets)) * grad[:, None]`` (0 on ignored rows),
    recomputing the probabilities from the logits and ``lse``."""
    _check_logits("softmax_cross_entropy_backward", logits, targets)
    _floats("softmax_cross_entropy_backward", grad, lse, logits)
    _same("softmax_cross_entropy_backward", "grad", grad, logits.shape[:1])
    _same("softmax_cross_entropy_backward", "lse", lse, logits.shape[:1])
    data = logits.backend.cross_entropy_backward(
        logits._data, logits.shape, targets._data, lse._data, grad._data, int(ignore_index)
    )
    return _wrap(data, logits.shape, logits)


def composed_cross_entropy_mean(
    logits: Tensor, targets: Tensor, ignore_index: int
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`softmax_cross_entropy_mean` as the ops it stands for (what the op layer
    runs where a backend lacks the kernel, and the CPU backend's own kernel)."""
    losses, lse = softmax_cross_entropy(logits, targets, ignore_index)
    kept = ne(targets, ignore_index).astype(F32).sum()
    scale = 1.0 / maximum(kept, 1.0)
    return losses.sum() * scale, lse, scale


def composed_cross_entropy_mean_backward(
    grad: Tensor, logits: Tensor, targets: Tensor, lse: Tensor, scale: Tensor, ignore_index: int
) -> Tensor:
    """:func:`softmax_cross_entropy_mean_backward` as the ops it stands for."""
    rows = (grad * scale).broadcast_to(targets.shape)  # a copy of its own: no views
    return softmax_cross_entropy_backward(rows, logits, targets, lse, ignore_index)


def softmax_cross_entropy_mean(
    logits: Tensor, targets: Tensor, ignore_index: int = -100
) -> tuple[Tensor, Tensor, Tensor]:
    """``(loss [], lse [n], scale [])``: the mean of :func:`softmax_cross_entropy`'s
    losses over the rows whose target is not ``ignore_index`` (0 with none kept), the
    rows' log-sum-exp, and ``scale = 1 / max(kept, 1)``, which the backward takes. One
    pass where the backend has the kernel (``cross_entropy_mean``, API 1.15), else the
    per-row losses, the kept count, its reciprocal, the sum and the product."""
    _check_logits("softmax_cross_entropy_mean", logits, targets)
    n = logits.shape[:1]
    if "cross_entropy_mean" not in logits.backend.capabilities():
        return composed_cross_entropy_mean(logits, targets, ignore_index)
    loss, lse, scale = logits.backend.cross_entropy_mean(
        logits._data, logits.shape, targets._data, int(ignore_index)
    )
    return _wrap(loss, (), logits), _wrap(lse, n, logits), _wrap(scale, (), logits)


def softmax_cross_entropy_mean_backward(
    grad: Tensor,
    logits: Tensor,
    targets: Tensor,
    lse: Tensor,
    scale: Tensor,
    ignore_index: int = -100,
) -> Tensor:
    """The gradient of :func:`softmax_cross_entropy_mean`'s loss for ``grad []``:
    :func:`softmax_cross_entropy_backward` with every row's gradient ``grad * scale``;
    one pass where the backend has the kernel (``cross_entropy_mean_backward``), else
    the product, its broadcast and that op. The same bits either way."""
    _check_logits("softmax_cross_entropy_mean_backward", logits, targets)
    _floats("softmax_cross_entropy_mean_backward", grad, scale, lse, logits)
    _same("softmax_cross_entropy_mean_backward", "grad", grad, ())
    _same("softmax_cross_entropy_mean_backward", "scale", scale, ())
    _same("softmax_cross_entropy_mean_backward", "lse", lse, logits.shape[:1])
    if "cross_entropy_mean_backward" not in logits.backend.capabilities():
        return composed_cross_entropy_mean_backward(grad, logits, targets, lse, scale, ignore_index)
    data = logits.backend.cross_entropy_mean_backward(
        logits._data, logits.shape, targets._data, lse._data, grad._data, scale._data,
        int(ignore_index),
    )  # fmt: skip
    return _wrap(data, logits.shape, logits)


# -- positions ------------------------------------------------------------------
def rotary(x: Tensor, positions: Tensor, theta: float = 10000.0, inverse: bool = False) -> Tensor:
    """Rotary embedding (split-half form) of ``x [..., heads, head_dim]`` at int64
    ``positions`` shaped like ``x.shape[:-2]``; ``inverse`` turns back (the adjoint)."""
    _floats("rotary", x)
    require_tensor("rotary", positions)
    check_same_backend("rotary", x, positions)
    require_dtype("rotary", positions, I64)
    if x.ndim < 2 or x.shape[-1] % 2 or positions.shape != x.shape[:-2]:
        raise ShapeError(
            f"rotary: expected x [..., heads, even head_dim] and positions "
            f"x.shape[:-2], found {x.shape} and {positions.shape}"
        )
    data = x.backend.rotary(x._data, x.shape, positions._data, float(theta), bool(inverse))
    return _wrap(data, x.shape, x)


# -- attention ------------------------------------------------------------------
def _check_attention(
    op: str, q: Tensor, k: Tensor, v: Tensor, causal: bool, window: int, dense: bool = True
) -> None:
    if dense and isinstance(q, Tensor) and q.dtype is BF16:
        # Mixed precision: bfloat16 operands, float32 scores, statistics and results.
        for t in (k, v):
            require_dtype(op, require_tensor(op, t), BF16)
        check_same_backend(op, q, k, v)
    else:
        _floats(op, q, k, v)
    rank = 4 if dense else 3
    ok = (
        q.ndim == rank
        and k.shape == v.shape
        and k.ndim == rank
        and q.shape[-1] == k.shape[-1]
        and q.shape[-1] > 0
        and k.shape[-2] > 0
        and q.shape[-2] % k.shape[-2] == 0
        and (not dense or q.shape[0] == k.shape[0])
    )
    layout = "[B, T, H, Dh] and [B, S, Hkv, Dh]" if dense else "[N, H, Dh] and [M, Hkv, Dh]"
    if not ok:
        raise ShapeError(
            f"{op}: expected q, k/v as {layout} with H a multiple of Hkv, found "
            f"{q.shape}, {k.shape} and {v.shape}"
        )
    if dense and causal and q.shape[1] > k.shape[1]:
        raise ShapeError(
            f"{op}: causal attention with more queries ({q.shape[1]}) than keys ({k.shape[1]})"
        )
    if window < 0 or (window and not causal):
        raise ValueError(
            f"{op}: window must be 0 (none) or positive with causal masking, found {window}"
        )


def _attention_compute(
    op: str, q: Tensor, compute: DType | str | None, method: str, capability: str
) -> DType | None:
    """The compute dtype ``op`` hands the backend: bfloat16 when asked for with
    bfloat16 ``q`` and ``flash`` on a backend with ``capability``, else None (the
    float32 products: the dtype is a permission)."""
    low = _compute(op, compute)
    if low is None or q.dtype is not BF16 or method != "flash":
        return None
    return low if capability in q.backend.capabilities() else None


def _scale(q: Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def attention_with_stats(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float | None = None,
    causal: bool = True,
    window: int = 0,
    method: str = "flash",
    compute: DType | str | None = None,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """``(out [B, T, H, Dh], stats)`` of ``softmax(scale q k^T) v`` over ``q [B, T, H, Dh]``
    and ``k``/``v`` ``[B, S, Hkv, Dh]`` (grouped heads). ``stats`` is ``(probs,)``
    ``[B, H, T, S]`` for ``materialized`` and ``(row_max, row_sum)`` ``[B, H, T]`` for
    ``flash``. Query i sits at position ``S - T + i``; hidden keys get probability 0.

    ``compute="bfloat16"`` with bfloat16 ``q``, ``k``, ``v`` and ``flash``: a backend
    with ``flash_attention_compute`` (API 1.12) may multiply the probabilities by ``v``
    as their bfloat16 roundings (within ``2**-8 * max|v|`` of the float32 products);
    elsewhere the float32 products, as without it."""
    if method not in ATTENTION_METHODS:
        raise ValueError(f"attention: method must be one of {ATTENTION_METHODS}, found {method!r}")
    _check_attention("attention", q, k, v, causal, window)
    low = _attention_compute("attention", q, compute, method, "flash_attention_compute")
    b, t, h, _ = q.shape
    s = k.shape[1]
    args = (
        q._data,
        k._data,
        v._data,
        q.shape,
        k.shape,
        _scale(q, scale),
        bool(causal),
        int(window),
    )
    if method == "flash":
        if low is not None:
            out, row_max, row_sum = q.backend.flash_attention_compute(*args, low)
        else:
            out, row_max, row_sum = q.backend.flash_attention(*args)
        return _wrap(out, q.shape, q), (_wrap(row_max, (b, h, t), q), _wrap(row_sum, (b, h, t), q))
    out, probs = q.backend.attention(*args)
    return _wrap(out, q.shape, q), (_wrap(probs, (b, h, t, s), q),)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float | None = None,
    causal: bool = True,
    window: int = 0,
    method: str = "flash",
    compute: DType | str | None = None,
) -> Tensor:
    """Scaled dot-product attention; see :func:`attention_with_stats`."""
    out, _ = attention_with_stats(
        q, k, v, scale=scale, causal=causal, window=window, method=method, compute=compute
    )
    return out


def attention_backward(
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    stats: Sequence[Tensor],
    *,
    scale: float | None = None,
    causal: bool = True,
    window: int = 0,
    method: str = "flash",
    compute: DType | str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(dq, dk, dv)`` of :func:`attention` from its output and statistics.
    ``compute="bfloat16"`` (bfloat16 ``q``, ``k``, ``v``; ``flash``): a backend with
    ``flash_attention_backward_compute`` (API 1.12) may multiply the output gradient,
    the probabilities and the scores' gradient as their bfloat16 roundings, as torch's
    bfloat16 attention backward does; elsewhere the float32 products."""
    if method not in ATTENTION_METHODS:
        raise ValueError(
            f"attention_backward: method must be one of {ATTENTION_METHODS}, found {method!r}"
        )
    _check_attention("attention_backward", q, k, v, causal, window)
    low = _attention_compute(
        "attention_backward", q, compute, method, "flash_attention_backward_compute"
    )
    _floats("attention_backward", grad, out, *stats)
    _same("attention_backward", "grad", grad, q.shape)
    b, t, h, _ = q.shape
    s = k.shape[1]
    sc, be = _scale(q, scale), q.backend
    if method == "flash":
        if len(stats) != 2:
            raise ValueError("attention_backward: flash statistics are (row_max, row_sum)")
        _same("attention_backward", "row_max", stats[0], (b, h, t))
        _same("attention_backward", "row_sum", stats[1], (b, h, t))
        _same("attention_backward", "out", out, q.shape)
        args = (
            grad._data,
            q._data,
            k._data,
            v._data,
            out._data,
            stats[0]._data,
            stats[1]._data,
            q.shape,
            k.shape,
            sc,
            bool(causal),
            int(window),
        )
        if low is not None:
            dq, dk, dv = be.flash_attention_backward_compute(*args, low)
        else:
            dq, dk, dv = be.flash_attention_backward(*args)
    else:
        if len(stats) != 1:
            raise ValueError("attention_backward: materialized statistics are (probs,)")
        _same("attention_backward", "probs", stats[0], (b, h, t, s))
        dq, dk, dv = be.attention_backward(
            grad._data,
            q._data,
            k._data,
            v._data,
            stats[0]._data,
            q.shape,
            k.shape,
            sc,
            bool(causal),
            int(window),
        )
    return _wrap(dq, q.shape, q), _wrap(dk, k.shape, q), _wrap(dv, v.shape, q)


def attention_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_starts: Sequence[int],
    q_counts: Sequence[int],
    kv_starts: Sequence[int],
    kv_lengths: Sequence[int],
    *,
    scale: float | None = None,
    window: int = 0,
) -> Tensor:
    """Causal attention of packed ragged sequences, for incremental decoding.

    ``q [N, H, Dh]`` holds every sequence's new queries; ``k``/``v`` ``[M, Hkv, Dh]`` a
    key/value buffer. Sequence j owns query rows ``q_starts[j]`` to
    ``q_starts[j] + q_counts[j]`` (the segments cover every row once) and key rows
    ``kv_starts[j]`` to ``kv_starts[j] + kv_lengths[j]``; its queries are its last
    ``q_counts[j]`` positions. Returns ``[N, H, Dh]``."""
    _check_attention("attention_varlen", q, k, v, True, window, dense=False)
    lists = [list(map(int, x)) for x in (q_starts, q_counts, kv_starts, kv_lengths)]
    if len({len(x) for x in lists}) != 1:
        raise ShapeError(f"attention_varlen: segment lists of lengths {[len(x) for x in lists]}")
    for j, (qs, qn, ks, kn) in enumerate(zip(*lists)):
        if min(qs, qn, ks, kn) < 0 or qn > kn or qs + qn > q.shape[0] or ks + kn > k.shape[0]:
            raise ShapeError(
                f"attention_varlen: segment {j} (queries {qs}+{qn}, keys {ks}+{kn}) "
                f"does not fit q {q.shape} and k {k.shape}"
            )
    data = q.backend.attention_varlen(
        q._data,
        k._data,
        v._data,
        q.shape,
        k.shape,
        lists[0],
        lists[1],
        lists[2],
        lists[3],
        _scale(q, scale),
        int(window),
    )
    return _wrap(data, q.shape, q)


__all__ = [
    "ACTIVATIONS",
    "ATTENTION_METHODS",
    "activation_backward",
    "add_layer_norm",
    "add_layer_norm_backward",
    "add_layer_norm_with_stats",
    "attention",
    "attention_backward",
    "attention_varlen",
    "attention_with_stats",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_with_stats",
    "rms_norm",
    "rms_norm_backward",
    "rms_norm_with_stats",
    "rotary",
    "softmax_cross_entropy",
    "softmax_cross_entropy_backward",
    "softmax_cross_entropy_mean",
    "softmax_cross_entropy_mean_backward",
]
