"""The fused kernels of riftco.tensor as differentiable functions.

While gradients are recorded and some operand (an input or a parameter) requires
them, each function records one ``custom_gradient`` node whose VJP is the fused
backward kernel. Otherwise it runs the forward kernel alone and returns a Tensor
for a Tensor input (as inference and incremental decoding use them) or a Variable
without a graph for a Variable input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import riftco.tensor as rt
from riftco.autograd import Variable, custom_gradient, custom_gradients, is_grad_enabled
from riftco.nn.precision import compute_dtype
from riftco.tensor import Tensor

Operand = Any  # a Variable or a Tensor


def _value(x: Any) -> Any:
    return x.value if isinstance(x, Variable) else x


def _variable(x: Any) -> Variable:
    return x if isinstance(x, Variable) else Variable(x)


def _needs(x: Any) -> bool:
    return isinstance(x, Variable) and x.requires_grad


def _record(*operands: Any) -> bool:
    """Whether to record a node: grad mode is on and some operand requires gradients."""
    return is_grad_enabled() and any(_needs(x) for x in operands)


def _plain(like: Any, y: Tensor) -> Any:
    """An unrecorded result, of the kind ``like`` is."""
    return y if isinstance(like, Tensor) else Variable(y)


def linear(x: Operand, weight: Any, bias: Any = None) -> Operand:
    """``x @ weight.T + bias`` over the last axis of ``x``; ``weight`` is ``[out, in]``.
    The leading axes are flattened, so the weight gradient is one matrix product.
    Under ``mixed_precision`` the products (forward and backward) multiply the
    operands' bfloat16 roundings and accumulate in float32 (``rt.matmul``'s compute
    dtype: no converted copies where the backend rounds as it reads). One
    ``rt.linear`` forward and one ``rt.linear_backward`` (backend API 1.10: a backend
    may fold the bias and the bias gradient into its products; elsewhere the same ops
    as before, the same bits)."""
    w, b = _value(weight), _value(bias)
    xv = _value(x)
    lead = xv.shape[:-1]
    x2 = xv.reshape(-1, xv.shape[-1]) if xv.ndim != 2 else xv
    low = compute_dtype()
    layer = _linear_layer(x2, w, b)
    if layer:
        y2 = rt.linear(x2, w, b, compute=low)
    else:
        y2 = rt.matmul(x2, w, transpose_b=True, compute=low)
        if b is not None:
            y2 = y2 + b
    y = y2.reshape(*lead, w.shape[0]) if xv.ndim != 2 else y2
    if not _record(x, weight, bias):
        return _plain(x, y)
    inputs = [_variable(x), _variable(weight)] + ([_variable(bias)] if bias is not None else [])
    need_x, need_w = _needs(x), _needs(weight)
    need_b = bias is not None and _needs(bias)
    shape = xv.shape

    def vjp(g: Tensor) -> list[Tensor | None]:
        g2 = g.reshape(-1, g.shape[-1]) if g.ndim != 2 else g
        if layer and g2.dtype is rt.float32:
            dx, dw, db = rt.linear_backward(g2, x2, w, need_x, need_w, need_b, compute=low)
            dx = dx.reshape(shape) if dx is not None else None
        else:
            dx = rt.matmul(g2, w, compute=low).reshape(shape) if need_x else None
            dw = rt.matmul(g2, x2, transpose_a=True, compute=low) if need_w else None
            db = g2.sum(axis=0) if need_b else None
        return [dx, dw] + ([db] if bias is not None else [])

    return custom_gradient(y, inputs, vjp)


def _linear_layer(x2: Tensor, w: Tensor, b: Tensor | None) -> bool:
    """Whether ``rt.linear`` takes these operands (2-D, one float dtype, a float32
    ``[out]`` bias); otherwise ``linear`` runs the product and the add itself."""
    return (
        x2.ndim == 2
        and w.ndim == 2
        and x2.dtype is w.dtype
        and x2.dtype in (rt.float32, rt.bfloat16)
        and (b is None or (b.dtype is rt.float32 and b.shape == (w.shape[0],)))
    )


def layer_norm(x: Operand, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Operand:
    """Layer normalization over the last axis (fused forward and backward)."""
    w, b = _value(weight), _value(bias)
    xv = _value(x)
    if not _record(x, weight, bias):
        return _plain(x, rt.layer_norm(xv, w, b, eps))
    y, mean, rstd = rt.layer_norm_with_stats(xv, w, b, eps)
    return _layer_norm_node(y, x, xv, weight, bias, mean, rstd)


def _layer_norm_node(
    y: Tensor, x: Operand, xv: Tensor, weight: Any, bias: Any, mean: Tensor, rstd: Tensor
) -> Operand:
    """The recorded layer norm ``y`` of ``x`` (value ``xv``) from its statistics."""
    w, b = _value(weight), _value(bias)
    params = [p for p in (weight, bias) if p is not None]

    def vjp(g: Tensor) -> list[Tensor | None]:
        dx, dw, db = rt.layer_norm_backward(g, xv, w, mean, rstd, with_bias=b is not None)
        return [dx, *[d for d in (dw, db) if d is not None]]

    return custom_gradient(y, [_variable(x), *map(_variable, params)], vjp)


def add_layer_norm(
    x: Operand, residual: Operand, weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> tuple[Operand, Operand]:
    """``(s, layer_norm(s))`` for the residual sum ``s = x + residual`` (float32, one
    shape), both from one pass forward where the backend has the kernel
    (``rt.add_layer_norm``). One node of two results: backward takes both their
    gradients at once (``rt.add_layer_norm_backward``: the norm's input gradient and
    the sum's own added in the same pass where the backend has the kernel), and
    hands the total to both operands -- the gradients of ``x + residual`` followed by
    :func:`layer_norm`, bit for bit."""
    xv, rv, w, b = _value(x), _value(residual), _value(weight), _value(bias)
    if not _record(x, residual, weight, bias):
        sv, yv = rt.add_layer_norm(xv, rv, w, b, eps)
        return _plain(x, sv), _plain(x, yv)
    sv, yv, mean, rstd = rt.add_layer_norm_with_stats(xv, rv, w, b, eps)
    params = [p for p in (weight, bias) if p is not None]

    def vjp(grads: list[Tensor | None]) -> list[Tensor | None]:
        gs, gy = grads
        if gy is None:
            return [gs, gs] + [None] * len(params)
        if gs is None:
            ds, dw, db = rt.layer_norm_backward(gy, sv, w, mean, rstd, with_bias=b is not None)
        else:
            ds, dw, db = rt.add_layer_norm_backward(
                gy, gs, sv, w, mean, rstd, with_bias=b is not None
            )
        return [ds, ds, *[d for d in (dw, db) if d is not None]]

    inputs = [_variable(x), _variable(residual), *map(_variable, params)]
    total, normed = custom_gradients([sv, yv], inputs, vjp)
    return total, normed


def rms_norm(x: Operand, weight: Any = None, eps: float = 1e-6) -> Operand:
    """RMS normalization over the last axis (fused forward and backward)."""
    w = _value(weight)
    xv = _value(x)
    if not _record(x, weight):
        return _plain(x, rt.rms_norm(xv, w, eps))
    y, rstd = rt.rms_norm_with_stats(xv, w, eps)

    def vjp(g: Tensor) -> list[Tensor | None]:
        dx, dw = rt.rms_norm_backward(g, xv, w, rstd)
        return [dx] if weight is None else [dx, dw]

    inputs = [_variable(x)] + ([_variable(weight)] if weight is not None else [])
    return custom_gradient(y, inputs, vjp)


def gelu(x: Operand, approximate: str = "none") -> Operand:
    """GELU, exact (``"none"``) or GPT-2's tanh form (``"tanh"``)."""
    xv = _value(x)
    y = rt.gelu(xv, approximate=approximate)
    if not _record(x):
        return _plain(x, y)
    op = "gelu" if approximate == "none" else "gelu_tanh"
    return custom_gradient(y, [x], lambda g: [rt.activation_backward(op, xv, g)])


def silu(x: Operand) -> Operand:
    xv = _value(x)
    y = rt.silu(xv)
    if not _record(x):
        return _plain(x, y)
    return custom_gradient(y, [x], lambda g: [rt.activation_backward("silu", xv, g)])


def swiglu(gate: Operand, up: Operand) -> Operand:
    """``silu(gate) * up``, as one node."""
    gv, uv = _value(gate), _value(up)
    s = rt.silu(gv)
    y = s * uv
    if not _record(gate, up):
        return _plain(gate, y)
    need_g, need_u = _needs(gate), _needs(up)

    def vjp(g: Tensor) -> list[Tensor | None]:
        dg = rt.activation_backward("silu", gv, g * uv) if need_g else None
        du = g * s if need_u else None
        return [dg, du]

    return custom_gradient(y, [_variable(gate), _variable(up)], vjp)


def rotary(x: Operand, positions: Tensor, theta: float = 10000.0) -> Operand:
    """Rotary position embedding of ``x [..., heads, head_dim]`` at ``positions``."""
    xv = _value(x)
    y = rt.rotary(xv, positions, theta)
    if not _record(x):
        return _plain(x, y)
    return custom_gradient(y, [x], lambda g: [rt.rotary(g, positions, theta, inverse=True)])


def _attention_options(
    causal: bool, window: int, method: str, scale: float | None, low: rt.DType | None
) -> dict[str, Any]:
    """riftco-tensor's attention keywords, forward and backward alike (the compute
    dtype captured when the node is recorded)."""
    return {"causal": causal, "window": window, "method": method, "scale": scale, "compute": low}


def attention(
    q: Operand,
    k: Operand,
    v: Operand,
    *,
    causal: bool = True,
    window: int = 0,
    method: str = "flash",
    scale: float | None = None,
) -> Operand:
    """Attention over ``q [B, T, H, Dh]`` and ``k``/``v`` ``[B, S, Hkv, Dh]``: ``flash``
    keeps per-row statistics and recomputes in backward, ``materialized`` keeps the
    probabilities. Under ``mixed_precision`` q, k and v are read in bfloat16, and a
    backend may multiply the probabilities and gradients as their bfloat16 roundings
    (riftco-tensor's ``compute``); scores, statistics, the output and the gradients
    stay float32."""
    qv, kv, vv = _value(q), _value(k), _value(v)
    low = compute_dtype()
    if low is not None:
        qv, kv, vv = qv.astype(low), kv.astype(low), vv.astype(low)
    kw = _attention_options(causal, window, method, scale, low)
    if not _record(q, k, v):
        return _plain(q, rt.attention(qv, kv, vv, **kw))
    out, stats = rt.attention_with_stats(qv, kv, vv, **kw)

    def vjp(g: Tensor) -> list[Tensor | None]:
        return list(rt.attention_backward(g, qv, kv, vv, out, stats, **kw))

    return custom_gradient(out, [_variable(q), _variable(k), _variable(v)], vjp)


def projected_attention(
    x: Operand,
    weights: Sequence[Any],
    biases: Sequence[Any] | None,
    *,
    heads: int,
    kv_heads: int,
    head_dim: int,
    positions: Tensor | None = None,
    theta: float = 10000.0,
    causal: bool = True,
    window: int = 0,
    method: str = "flash",
    scale: float | None = None,
) -> Operand:
    """Self-attention of ``x [B, T, d_model]`` through its query, key and value
    projections (``weights`` and ``biases`` in that order, ``[out, d_model]`` each) as
    one node (products and attention in bfloat16 under ``mixed_precision``):
    riftco-tensor's ``projected_attention`` -- the three projections one stacked
    product forward and two backward (a backend may write and read the stacked
    matrix in place: no weights concatenated, no parts copied out); rotary positions
    on queries and keys when ``positions`` is given; then attention. Returns
    ``[B, T, heads * head_dim]``, the input of the output projection."""
    xv = _value(x)
    ws = [_value(w) for w in weights]
    bs = None if biases is None else [_value(b) for b in biases]
    kw: dict[str, Any] = {
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "positions": positions,
        "theta": theta,
        "causal": causal,
        "window": window,
        "method": method,
        "scale": scale,
        "compute": compute_dtype(),
    }
    params = list(weights) + ([] if biases is None else list(biases))
    if not _record(x, *params):
        return _plain(x, rt.projected_attention(xv, ws, bs, **kw))
    result, state = rt.projected_attention_with_state(xv, ws, bs, **kw)
    need_x = _needs(x)

    def vjp(g: Tensor) -> list[Tensor | None]:
        dx, dws, dbs = rt.projected_attention_backward(g, state, need_x)
        return [dx, *dws, *(dbs or [])]

    return custom_gradient(result, [_variable(x), *map(_variable, params)], vjp)


def cross_entropy(
    logits: Operand, targets: Any, *, mask: Any = None, ignore_index: int = -100
) -> Operand:
    """Mean softmax cross-entropy over the positions kept: ``logits [..., V]`` against
    int64 ``targets [...]``; positions whose target is ``ignore_index`` or whose
    ``mask`` (bool, shaped like ``targets``) is False do not count. With no position
    kept the loss is 0 (and so are its gradients)."""
    lv = _value(logits)
    t = (
        targets
        if isinstance(targets, Tensor)
        else rt.tensor(np.asarray(targets), dtype=rt.int64, backend=lv.backend)
    )
    t = _value(t).reshape(-1)
    if mask is not None:
        m = (
            mask
            if isinstance(mask, Tensor)
            else rt.tensor(np.asarray(mask, dtype=bool), backend=lv.backend)
        )
        t = rt.where(
            _value(m).reshape(-1),
            t,
            rt.full(t.shape, ignore_index, dtype=rt.int64, backend=lv.backend),
        )
    l2 = lv.reshape(-1, lv.shape[-1])
    # The mean over the kept targets, their count on the device (no host read in a
    # training step; with none kept the loss is 0): one pass where the backend has the
    # kernel (riftco-tensor API 1.15), else the per-row losses, the count, the sum.
    loss, lse, scale = rt.softmax_cross_entropy_mean(l2, t, ignore_index)
    if not _record(logits):
        return _plain(logits, loss)

    def vjp(g: Tensor) -> list[Tensor | None]:
        d = rt.softmax_cross_entropy_mean_backward(g, l2, t, lse, scale, ignore_index)
        return [d.reshape(lv.shape)]

    return custom_gradient(loss, [logits], vjp)


def dropout(x: Operand, p: float, seed: int) -> Operand:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``;
    the mask is drawn by PCG64(``seed``)."""
    if p <= 0.0:
        return x
    xv = _value(x)
    keep = rt.uniform(xv.shape, seed=seed, backend=xv.backend) >= p
    mask = keep.astype(rt.float32) * (1.0 / (1.0 - p))
    return x * mask


def positions_for(batch: int, length: int, backend: Any, start: int = 0) -> Tensor:
    """int64 positions ``[batch, length]`` counting from ``start``."""
    row = np.arange(start, start + length, dtype=np.int64)
    return rt.from_numpy(
        np.ascontiguousarray(np.broadcast_to(row, (batch, length))), backend=backend
    )


def concat_positions(starts: Sequence[int], counts: Sequence[int], backend: Any) -> Tensor:
    """int64 positions of packed ragged sequences: ``start_j .. start_j + count_j``."""
    parts = [np.arange(s, s + n, dtype=np.int64) for s, n in zip(starts, counts)]
    flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return rt.from_numpy(flat, backend=backend)


__all__ = [
    "attention",
    "concat_positions",
    "cross_entropy",
    "dropout",
    "gelu",
    "layer_norm",
    "linear",
    "positions_for",
    "rms_norm",
    "rotary",
    "silu",
    "swiglu",
]
