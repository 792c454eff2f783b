"""The in-place ops: the fused Adam update and key/value row writes.

They are the only ops that change a tensor's values after it was made (besides
``Tensor.assign_``). Each validates its arguments once, here, calls the backend's
capability and bumps the version of every tensor it wrote, so autograd notices a
graph that saved the old values; no other package touches storage or versions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError
from riftco.tensor.ops._common import check_same_backend, require_dtype, require_tensor
from riftco.tensor.ops.layout import astype
from riftco.tensor.tensor import WRITES, Tensor

F32, I64 = DType.float32, DType.int64


def _check_adam(
    op: str,
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    m: Sequence[Sequence[Tensor]],
    v: Sequence[Sequence[Tensor]],
    lr: Sequence[float],
    beta1: Sequence[float],
    beta2: Sequence[float],
    eps: Sequence[float],
    weight_decay: Sequence[float],
    step: Sequence[int],
    page_size: int | None,
) -> tuple[list[int], int, list[Tensor]]:
    """The checks of an Adam update; its sizes, page size and every moment page."""
    n = len(params)
    lists = {"grads": grads, "m": m, "v": v, "lr": lr, "beta1": beta1, "beta2": beta2}
    lists.update(eps=eps, weight_decay=weight_decay, step=step)
    for name, values in lists.items():
        if len(values) != n:
            raise ShapeError(f"{op}: {n} parameters but {len(values)} entries in {name}")
    if n == 0:
        return [], 1, []
    fast = _adam_fast_path(params, grads, m, v, step, page_size)
    if fast is not None:
        return fast
    for p, g in zip(params, grads):
        require_tensor(op, p)
        require_tensor(op, g)
        require_dtype(op, p, F32)
        require_dtype(op, g, F32)
        if g.shape != p.shape:
            raise ShapeError(f"{op}: a parameter {p.shape} has a gradient {g.shape}")
    sizes = [p.size for p in params]
    if page_size is None:
        page_size = max(1, *sizes)
    elif not isinstance(page_size, int) or page_size < 1:
        raise ShapeError(f"{op}: page_size must be a positive int, found {page_size!r}")
    pages: list[Tensor] = []
    for i, size in enumerate(sizes):
        expected = [min(page_size, size - b) for b in range(0, size, page_size)] or [0]
        for name, moment in (("m", m[i]), ("v", v[i])):
            for t in moment:
                require_tensor(op, t)
                require_dtype(op, t, F32)
            found = [t.shape for t in moment]
            if found != [(k,) for k in expected]:
                raise ShapeError(
                    f"{op}: parameter {i} of {size} elements needs {name} pages of "
                    f"{expected} elements, found shapes {found}"
                )
            pages.extend(moment)
    for i, s in enumerate(step):
        if not isinstance(s, int) or isinstance(s, bool) or s < 1:
            raise ShapeError(f"{op}: step of parameter {i} must be an int >= 1, found {s!r}")
    check_same_backend(op, *params, *grads, *pages)
    return sizes, page_size, pages


def _adam_fast_path(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    m: Sequence[Sequence[Tensor]],
    v: Sequence[Sequence[Tensor]],
    step: Sequence[int],
    page_size: int | None,
) -> tuple[list[int], int, list[Tensor]] | None:
    """:func:`_check_adam`'s result when every operand is as a trainer passes them
    (float32 tensors on one backend, one moment page per parameter, int steps);
    None sends anything else through the checks that name what is wrong."""
    if page_size is not None:
        return None
    backend = params[0].backend if type(params[0]) is Tensor else None
    sizes: list[int] = []
    pages: list[Tensor] = []
    for p, g, mi, vi, s in zip(params, grads, m, v, step):
        if (
            type(p) is not Tensor
            or type(g) is not Tensor
            or p.dtype is not F32
            or g.dtype is not F32
            or g.shape != p.shape
            or len(mi) != 1
            or len(vi) != 1
            or type(s) is not int
            or s < 1
        ):
            return None
        size = math.prod(p.shape)
        (a,), (b,) = mi, vi
        if (
            type(a) is not Tensor
            or type(b) is not Tensor
            or a.dtype is not F32
            or b.dtype is not F32
        ):
            return None
        if a.shape != (size,) or b.shape != (size,):
            return None
        for t in (p, g, a, b):
            if t.backend is not backend:
                return None
        sizes.append(size)
        pages += (a, b)
    return sizes, max(1, *sizes), pages


def adam_update_(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    m: Sequence[Sequence[Tensor]],
    v: Sequence[Sequence[Tensor]],
    *,
    lr: Sequence[float],
    beta1: Sequence[float],
    beta2: Sequence[float],
    eps: Sequence[float],
    weight_decay: Sequence[float],
    step: Sequence[int],
    decoupled: bool,
    grad_scale: float = 1.0,
    page_size: int | None = None,
) -> int | None:
    """One Adam / AdamW step over every parameter, in place and all-or-nothing.

    ``params[i]`` and ``grads[i]`` are float32 tensors of one shape; ``m[i]`` and
    ``v[i]`` are parameter i's first and second moments as lists of 1-D float32
    pages of ``page_size`` elements (the last holds the rest; ``None``: one page
    per parameter). The hyperparameter lists hold one entry per parameter and
    ``step`` counts from 1; ``grad_scale`` multiplies every gradient first
    (clipping). The formula is the ``adam_update`` capability's (see
    ``Backend.adam_update``). When every candidate value is finite, parameters and
    moments are overwritten, their versions bumped, and the result is None;
    otherwise nothing changes and the result is the index of the first parameter
    whose update is not finite.
    """
    op = "adam_update_"
    sizes, page_size, pages = _check_adam(
        op, params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step, page_size
    )
    if not params:
        return None
    backend = params[0].backend
    bad = backend.adam_update(
        [p._data for p in params],
        [g._data for g in grads],
        [[t._data for t in pages_i] for pages_i in m],
        [[t._data for t in pages_i] for pages_i in v],
        sizes,
        page_size,
        lr=[float(x) for x in lr],
        beta1=[float(x) for x in beta1],
        beta2=[float(x) for x in beta2],
        eps=[float(x) for x in eps],
        weight_decay=[float(x) for x in weight_decay],
        decoupled=bool(decoupled),
        step=list(step),
        grad_scale=float(grad_scale),
    )
    if bad is None:
        for t in (*params, *pages):
            t.version += 1
        WRITES[0] += 1
    return bad


def write_rows_(dst: Tensor, rows: Tensor, src: Tensor, *, check: bool = True) -> Tensor:
    """Overwrite rows ``rows[i]`` of ``dst`` (along axis 0) with ``src[i]``, in place,
    and bump ``dst``'s version; for key/value caches. ``rows`` is 1-D int64 (distinct).

    ``check=False`` skips the shape, dtype and backend checks, for a per-layer loop
    whose caller made the operands itself; the backend still refuses rows out of
    range, and the version is still bumped.
    """
    if check:
        for t in (dst, rows, src):
            require_tensor("write_rows_", t)
        check_same_backend("write_rows_", dst, rows, src)
        require_dtype("write_rows_", rows, I64)
        if src.dtype is not dst.dtype:
            require_dtype("write_rows_", src, dst.dtype)
        if dst.ndim == 0 or rows.ndim != 1 or src.shape != rows.shape + dst.shape[1:]:
            raise ShapeError(
                f"write_rows_: rows {rows.shape} and src {src.shape} do not fit dst {dst.shape}"
            )
    dst.backend.write_rows(dst._data, dst.shape, dst.dtype, rows._data, src._data)
    dst.version += 1
    WRITES[0] += 1
    return dst


#: The smallest normal float32: a float32 sum of squares below it may have lost digits.
TINY_F32 = 1.1754943508222875e-38


def clip_ready(
    sums: Sequence[float], values: Sequence[float], all_zero: Callable[[int], bool]
) -> bool:
    """Whether a clipped step goes ahead (``Backend.clipped_adam_update``): every
    value finite and every sum of squares normal, or zero with ``all_zero(i)``."""
    if not all(math.isfinite(x) for x in values):
        return False
    return all(TINY_F32 <= s < math.inf or (s == 0.0 and all_zero(i)) for i, s in enumerate(sums))


def clip_factor(sums: Sequence[float], max_grad_norm: float | None) -> float:
    """The clip scale of the norm ``sqrt(fsum(sums))``: ``max_grad_norm / norm`` when
    the norm exceeds it, else 1 (also when it is None)."""
    norm = math.sqrt(math.fsum(sums))
    if max_grad_norm is None or not norm > max_grad_norm:
        return 1.0
    return max_grad_norm / norm


class ClippedStep(NamedTuple):
    """What ``clipped_adam_update_`` read and did (``Backend.clipped_adam_update``)."""

    #: Each gradient's float32 sum of squares.
    sums: list[float]
    #: The host values of ``values``.
    values: list[float]
    #: Whether parameters and moments were written.
    applied: bool
    #: The first parameter with a non-finite candidate (nothing written), else None.
    bad: int | None


def clipped_adam_update_(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    m: Sequence[Sequence[Tensor]],
    v: Sequence[Sequence[Tensor]],
    *,
    lr: Sequence[float],
    beta1: Sequence[float],
    beta2: Sequence[float],
    eps: Sequence[float],
    weight_decay: Sequence[float],
    step: Sequence[int],
    decoupled: bool,
    max_grad_norm: float | None,
    values: Sequence[Tensor] = (),
    page_size: int | None = None,
) -> ClippedStep:
    """Global-norm clipping and the Adam / AdamW update in one call, all-or-nothing,
    with one read of the gradients' sums of squares and of ``values`` (one-element
    tensors, a step's loss) together (``Backend.clipped_adam_update``, API 1.8).

    The update goes ahead only when every value is finite and every gradient's sum of
    squares is a normal float32 or exactly zero; it is then ``adam_update_`` with
    ``grad_scale`` the clip scale of ``norm = sqrt(math.fsum(sums))``. Otherwise, or
    when a candidate is not finite, nothing changes (``applied`` False). Versions are
    bumped when it was applied.
    """
    op = "clipped_adam_update_"
    sizes, page_size, pages = _check_adam(
        op, params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step, page_size
    )
    if max_grad_norm is not None and not (
        isinstance(max_grad_norm, (int, float))
        and not isinstance(max_grad_norm, bool)
        and math.isfinite(max_grad_norm)
        and max_grad_norm > 0
    ):
        raise ShapeError(f"{op}: max_grad_norm must be positive and finite or None")
    values = list(values)
    for x in values:
        require_tensor(op, x)
        if x.size != 1:
            raise ShapeError(f"{op}: values must have one element, found {x.shape}")
    if not params and not values:
        return ClippedStep([], [], True, None)
    check_same_backend(op, *params, *values)
    backend = (params[0] if params else values[0]).backend
    boxed = [astype(x, F32).reshape(1) for x in values]
    sums, read, applied, bad = backend.clipped_adam_update(
        [p._data for p in params],
        [g._data for g in grads],
        [[t._data for t in pages_i] for pages_i in m],
        [[t._data for t in pages_i] for pages_i in v],
        sizes,
        page_size,
        lr=[float(x) for x in lr],
        beta1=[float(x) for x in beta1],
        beta2=[float(x) for x in beta2],
        eps=[float(x) for x in eps],
        weight_decay=[float(x) for x in weight_decay],
        decoupled=bool(decoupled),
        step=list(step),
        max_grad_norm=None if max_grad_norm is None else float(max_grad_norm),
        values=[x._data for x in boxed],
    )
    if applied:
        for t in (*params, *pages):
            t.version += 1
        WRITES[0] += 1
    return ClippedStep(list(sums), list(read), bool(applied), bad)


__all__ = ["ClippedStep", "adam_update_", "clipped_adam_update_", "write_rows_"]
