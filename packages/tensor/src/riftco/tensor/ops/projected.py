"""Self-attention through its query, key and value projections as one op
(``Backend.projected_attention`` and ``projected_attention_backward``, API 1.13), so a
backend can write the three products into one stacked matrix and read the heads
straight out of it: no weight concatenated, no part narrowed out (copied), and the
stacked output gradient the backward's products read in place.

A backend without the kernels, and every call the kernels do not cover (rotary
positions, the ``materialized`` method, operands other than float32), gets the
composition, with the bits of what the model layer ran before (the weights and biases
concatenated, one ``linear``, q, k and v narrowed out): each part's own ``linear`` (or
``matmul`` and an add; a product's columns are summed alone, so the same bits without
the narrowing copies), each rounded to the compute dtype, rotary positions,
``attention_with_stats``; backward ``attention_backward``, the parts' gradients
concatenated for one input-gradient product with the concatenated weights, and the
weights' and biases' gradients as one product of that stacked gradient and one column
sum, each part's rows narrowed out (``linear_backward``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError
from riftco.tensor.ops._common import check_same_backend, require_dtype, require_tensor
from riftco.tensor.ops.fused import (
    attention_backward,
    attention_with_stats,
    rotary,
)
from riftco.tensor.ops.layout import concatenate, narrow
from riftco.tensor.ops.linalg import matmul
from riftco.tensor.ops.linear_layer import _compute, linear, linear_backward
from riftco.tensor.tensor import Tensor

F32 = DType.float32


@dataclass(frozen=True, eq=False)
class ProjectedState:
    """What :func:`projected_attention_backward` needs of a forward: the operands,
    the options, the attention's output and statistics, and either the composition's
    intermediates (``w``, ``q``, ``k``, ``v``) or what the backend's kernels keep
    (``saved``, its storages). Opaque to callers: hand it back as it is."""

    x: Tensor
    ws: tuple[Tensor, ...]
    bs: tuple[Tensor, ...] | None
    shape: tuple[int, int, int, int, int]  # batch, steps, heads, kv_heads, head_dim
    options: dict[str, Any]
    positions: Tensor | None
    theta: float
    out: Tensor
    stats: tuple[Tensor, ...]
    layer: bool
    saved: tuple[Any, ...] | None = None
    w: Tensor | None = None
    q: Tensor | None = None
    k: Tensor | None = None
    v: Tensor | None = None

    @property
    def sizes(self) -> tuple[int, int, int]:
        _, _, h, hkv, dh = self.shape
        return h * dh, hkv * dh, hkv * dh


def _linear_layer(x2: Tensor, w: Tensor, b: Tensor | None) -> bool:
    """Whether ``linear`` takes these operands (2-D, one float dtype, a float32 ``[out]``
    bias); otherwise the product and the add run apart."""
    return (
        x2.ndim == 2
        and w.ndim == 2
        and x2.dtype is w.dtype
        and x2.dtype in (F32, DType.bfloat16)
        and (b is None or (b.dtype is F32 and b.shape == (w.shape[0],)))
    )


def _check(
    x: Tensor,
    ws: Sequence[Tensor],
    bs: Sequence[Tensor] | None,
    heads: int,
    kv_heads: int,
    head_dim: int,
) -> None:
    op = "projected_attention"
    require_tensor(op, x)
    if len(ws) != 3 or (bs is not None and len(bs) != 3):
        raise ShapeError(
            f"{op}: expected three weights (query, key, value) and three biases or None, "
            f"found {len(ws)} and {'None' if bs is None else len(bs)}"
        )
    for t in (*ws, *(bs or ())):
        require_tensor(op, t)
    check_same_backend(op, x, *ws, *(bs or ()))
    if heads <= 0 or kv_heads <= 0 or head_dim <= 0 or heads % kv_heads:
        raise ShapeError(
            f"{op}: expected positive heads divisible by kv_heads and a positive head_dim, "
            f"found heads={heads}, kv_heads={kv_heads}, head_dim={head_dim}"
        )
    if x.ndim != 3:
        raise ShapeError(f"{op}: expected x [B, T, d_model], found {x.shape}")
    sizes = (heads * head_dim, kv_heads * head_dim, kv_heads * head_dim)
    for name, w, size in zip(("query", "key", "value"), ws, sizes):
        if w.shape != (size, x.shape[-1]):
            raise ShapeError(
                f"{op}: expected the {name} weight [{size}, {x.shape[-1]}], found {w.shape}"
            )
    for name, b, size in zip(("query", "key", "value"), bs or (), sizes):
        if b.shape != (size,):
            raise ShapeError(f"{op}: expected the {name} bias [{size}], found {b.shape}")


def _kernels(x: Tensor, ws: Sequence[Tensor], bs: Sequence[Tensor] | None, **kw: Any) -> bool:
    """Whether the backend's kernels take this call: float32 operands, flash, no
    rotary positions."""
    return (
        "projected_attention" in x.backend.capabilities()
        and kw["positions"] is None
        and kw["method"] == "flash"
        and x.dtype is F32
        and all(t.dtype is F32 for t in (*ws, *(bs or ())))
    )


def projected_attention_with_state(
    x: Tensor,
    ws: Sequence[Tensor],
    bs: Sequence[Tensor] | None,
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
    compute: DType | str | None = None,
) -> tuple[Tensor, ProjectedState]:
    """Self-attention of ``x [B, T, d_model]`` through its query, key and value
    projections (``ws`` ``[out, d_model]`` each, ``bs`` ``[out]`` float32 or None):
    ``[B, T, heads * head_dim]`` (float32), and the state its backward takes. The
    projections are one stacked product (``compute="bfloat16"``: its operands read
    as their bfloat16 roundings, the stacked result rounded once to bfloat16 before
    attention reads it); rotary positions on queries and keys when ``positions``
    (``[B, T]`` int64) is given; then :func:`attention_with_stats` with ``causal``,
    ``window``, ``method``, ``scale`` and ``compute``."""
    _check(x, ws, bs, heads, kv_heads, head_dim)
    low = _compute("projected_attention", compute)
    batch, steps = x.shape[0], x.shape[1]
    shape = (batch, steps, heads, kv_heads, head_dim)
    options = {"causal": causal, "window": window, "method": method, "scale": scale}
    x2 = x.reshape(-1, x.shape[-1])
    ws, bs = tuple(ws), None if bs is None else tuple(bs)
    if _kernels(x, ws, bs, positions=positions, method=method):
        backend = x.backend
        out, row_max, row_sum, saved = backend.projected_attention(
            x2._data,
            x2.shape,
            [w._data for w in ws],
            [w.shape for w in ws],
            None if bs is None else [b._data for b in bs],
            batch,
            heads,
            kv_heads,
            head_dim,
            _scale_for(head_dim, scale),
            bool(causal),
            int(window),
            low,
        )
        stats_shape = (batch, heads, steps)
        out_t = Tensor._wrap(out, (batch, steps, heads, head_dim), F32, backend)
        stats = tuple(Tensor._wrap(s, stats_shape, F32, backend) for s in (row_max, row_sum))
        kw = {**options, "compute": low}
        state = ProjectedState(
            x2, ws, bs, shape, kw, None, theta, out_t, stats, True, saved=tuple(saved)
        )
        return out_t.reshape(batch, steps, heads * head_dim), state
    kw = {**options, "compute": low}
    out, stats, w, layer, q, k, v = composed_forward(x2, ws, bs, shape, kw, positions, theta)
    state = ProjectedState(
        x2, ws, bs, shape, kw, positions, theta, out, stats, layer, w=w, q=q, k=k, v=v
    )
    return out.reshape(batch, steps, heads * head_dim), state


def composed_forward(
    x2: Tensor,
    ws: Sequence[Tensor],
    bs: Sequence[Tensor] | None,
    shape: tuple[int, int, int, int, int],
    kw: dict[str, Any],
    positions: Tensor | None,
    theta: float,
) -> tuple[Tensor, tuple[Tensor, ...], Tensor, bool, Tensor, Tensor, Tensor]:
    """The composition forward over ``x2 [B*T, d_model]``: attention's output
    ``[B, T, heads, head_dim]`` and statistics, the stacked weights, whether
    ``linear`` took them, and q, k, v as attention read them (what
    :func:`composed_backward` takes). ``kw``: attention's options and compute dtype.
    Backends whose kernels are this composition call it too (the cpu backend)."""
    w, layer, q, k, v = _composed_projections(x2, ws, bs, shape, kw["compute"], positions, theta)
    out, stats = attention_with_stats(q, k, v, **kw)
    return out, stats, w, layer, q, k, v


def _composed_projections(
    x2: Tensor,
    ws: Sequence[Tensor],
    bs: Sequence[Tensor] | None,
    shape: tuple[int, int, int, int, int],
    low: DType | None,
    positions: Tensor | None,
    theta: float,
) -> tuple[Tensor, bool, Tensor, Tensor, Tensor]:
    """The composition's stacked weights, whether ``linear`` took them, and q, k, v
    ``[B, T, heads, head_dim]`` as attention reads them.

    Each part is a product of its own: a product's columns are summed alone, so
    these are the bits of the stacked product's columns narrowed out, without the
    narrowing copies (and measured a little faster at `tiny`'s and `small`'s
    shapes). The stacked weights are for backward's input-gradient product."""
    batch, steps, _, _, head_dim = shape
    w = concatenate(list(ws), axis=0)
    biases = [None] * len(ws) if bs is None else list(bs)
    layer = all(_linear_layer(x2, wi, bi) for wi, bi in zip(ws, biases))
    parts = []
    for wi, bi in zip(ws, biases):
        if layer:
            y = linear(x2, wi, bi, compute=low)
        else:
            y = matmul(x2, wi, transpose_b=True, compute=low)
            y = y if bi is None else y + bi
        # Without rotary positions each part is rounded once, before attention reads it.
        if low is not None and positions is None:
            y = y.astype(low)
        parts.append(y.reshape(batch, steps, -1, head_dim))
    q, k, v = parts
    if positions is not None:
        q, k = rotary(q, positions, theta), rotary(k, positions, theta)
    if low is not None and positions is not None:
        q, k, v = q.astype(low), k.astype(low), v.astype(low)
    return w, layer, q, k, v


def projected_attention(
    x: Tensor, ws: Sequence[Tensor], bs: Sequence[Tensor] | None, **kw: Any
) -> Tensor:
    """:func:`projected_attention_with_state`'s output alone (inference)."""
    return projected_attention_with_state(x, ws, bs, **kw)[0]


def projected_attention_backward(
    g: Tensor, state: ProjectedState, need_x: bool = True
) -> tuple[Tensor | None, list[Tensor], list[Tensor] | None]:
    """The gradients of :func:`projected_attention_with_state` for a float32
    ``g [B, T, heads * head_dim]``: ``(dx [B, T, d_model] or None, [dwq, dwk, dwv],
    [dbq, dbk, dbv] or None)``, float32. ``dx`` is the stacked output gradient's
    product with the stacked weights (a backend may sum it as three products, one a
    part); each weight's and bias's gradient comes from its own part."""
    require_tensor("projected_attention_backward", g)
    require_dtype("projected_attention_backward", g, F32)
    batch, steps, heads, kv_heads, head_dim = state.shape
    if g.shape != (batch, steps, heads * head_dim):
        raise ShapeError(
            f"projected_attention_backward: expected g [{batch}, {steps}, {heads * head_dim}], "
            f"found {g.shape}"
        )
    x2, ws, bs, low = state.x, state.ws, state.bs, state.options["compute"]
    if state.saved is not None:
        backend = x2.backend
        dx, dws, dbs = backend.projected_attention_backward(
            g._data,
            x2._data,
            x2.shape,
            [w._data for w in ws],
            [w.shape for w in ws],
            bs is not None,
            state.saved,
            state.out._data,
            state.stats[0]._data,
            state.stats[1]._data,
            batch,
            heads,
            kv_heads,
            head_dim,
            _scale_for(head_dim, state.options["scale"]),
            bool(state.options["causal"]),
            int(state.options["window"]),
            bool(need_x),
            low,
        )
        wrap = Tensor._wrap
        return (
            None if dx is None else wrap(dx, (batch, steps, x2.shape[1]), F32, backend),
            [wrap(d, w.shape, F32, backend) for d, w in zip(dws, ws)],
            None if dbs is None else [wrap(d, b.shape, F32, backend) for d, b in zip(dbs, bs)],  # type: ignore[arg-type]
        )
    q, k, v = state.q, state.k, state.v
    assert q is not None and k is not None and v is not None and state.w is not None
    return composed_backward(
        g, x2, ws, bs is not None, state.shape, state.options, state.positions, state.theta,
        state.out, state.stats, state.w, state.layer, (q, k, v), need_x,
    )  # fmt: skip


def composed_backward(
    g: Tensor,
    x2: Tensor,
    ws: Sequence[Tensor],
    has_bias: bool,
    shape: tuple[int, int, int, int, int],
    kw: dict[str, Any],
    positions: Tensor | None,
    theta: float,
    out: Tensor,
    stats: tuple[Tensor, ...],
    w: Tensor,
    layer: bool,
    qkv: tuple[Tensor, Tensor, Tensor],
    need_x: bool,
) -> tuple[Tensor | None, list[Tensor], list[Tensor] | None]:
    """The composition backward of :func:`composed_forward`'s results."""
    batch, steps = shape[0], shape[1]
    low = kw["compute"]
    dq, dk, dv = attention_backward(g.reshape(*out.shape), *qkv, out, stats, **kw)
    if positions is not None:
        dq = rotary(dq, positions, theta, inverse=True)
        dk = rotary(dk, positions, theta, inverse=True)
    parts = [d.reshape(-1, size) for d, size in zip((dq, dk, dv), _sizes(shape))]
    dx = gy = None
    if need_x:
        gy = concatenate(parts, axis=1)
        dx = matmul(gy, w, compute=low).reshape(batch, steps, x2.shape[1])
    if layer and all(part.dtype is F32 for part in parts):
        # The stacked weights' gradient as one product (and the stacked bias's as one
        # column sum), each weight's and bias's the rows narrowed out of it: a
        # product's rows and a column sum's columns are summed alone, so these are
        # the bits of a product and a sum per part, in one call each instead of three.
        # linear_backward: a backend may take the bias gradient from the product.
        gy = concatenate(parts, axis=1) if gy is None else gy
        _, dw, db = linear_backward(gy, x2, w, False, True, has_bias, compute=low)
        starts = (0, parts[0].shape[1], parts[0].shape[1] + parts[1].shape[1])
        cuts = [(start, part.shape[1]) for start, part in zip(starts, parts)]
        weights = [narrow(dw, 0, start, size) for start, size in cuts]  # type: ignore[arg-type]
        biases = None if db is None else [narrow(db, 0, start, size) for start, size in cuts]
        return dx, weights, biases
    dws = [matmul(part, x2, transpose_a=True, compute=low) for part in parts]
    dbs = [part.sum(axis=0) for part in parts] if has_bias else None
    return dx, dws, dbs


def _sizes(shape: tuple[int, int, int, int, int]) -> tuple[int, int, int]:
    _, _, h, hkv, dh = shape
    return h * dh, hkv * dh, hkv * dh


def _scale_for(head_dim: int, scale: float | None) -> float:
    """Attention's scale (its default ``1 / sqrt(head_dim)``, as attention's own)."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


__all__ = [
    "ProjectedState",
    "composed_backward",
    "composed_forward",
    "projected_attention",
    "projected_attention_backward",
    "projected_attention_with_state",
]
