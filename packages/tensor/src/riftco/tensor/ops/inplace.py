"""The in-place ops: the fused Adam update and key/value row writes.

They are the only ops that change a tensor's values after it was made (besides
``Tensor.assign_``). Each validates its arguments once, here, calls the backend's
capability and bumps the version of every tensor it wrote, so autograd notices a
graph that saved the old values; no other package touches storage or versions.
"""

from __future__ import annotations

from collections.abc import Sequence

from riftco.tensor.dtypes import DType
from riftco.tensor.errors import ShapeError
from riftco.tensor.ops._common import check_same_backend, require_dtype, require_tensor
from riftco.tensor.tensor import Tensor

F32, I64 = DType.float32, DType.int64


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
    n = len(params)
    lists = {"grads": grads, "m": m, "v": v, "lr": lr, "beta1": beta1, "beta2": beta2}
    lists.update(eps=eps, weight_decay=weight_decay, step=step)
    for name, values in lists.items():
        if len(values) != n:
            raise ShapeError(f"{op}: {n} parameters but {len(values)} entries in {name}")
    if n == 0:
        return None
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
    return dst


__all__ = ["adam_update_", "write_rows_"]
