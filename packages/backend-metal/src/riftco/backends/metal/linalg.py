"""Batched matmul with broadcast batch axes and transposed reads."""

from __future__ import annotations

from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import Runtime, Storage, groups_for, shape_size
from riftco.tensor.plugin import DType, broadcast_strides


def matmul(rt: Runtime, a: Storage, a_shape, b: Storage, b_shape, ta: bool, tb: bool) -> Storage:
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise GpuError(f"matmul: expected operands of rank >= 2, found {a_shape} and {b_shape}")
    ar, ac = int(a_shape[-2]), int(a_shape[-1])
    br, bc = int(b_shape[-2]), int(b_shape[-1])
    m, k = (ac, ar) if ta else (ar, ac)
    k2, n = (bc, br) if tb else (br, bc)
    if k != k2:
        raise GpuError(f"matmul: inner sizes differ ({a_shape} and {b_shape})")
    a_batch, b_batch = list(a_shape[:-2]), list(b_shape[:-2])
    nd = max(len(a_batch), len(b_batch))
    a_batch = [1] * (nd - len(a_batch)) + a_batch
    b_batch = [1] * (nd - len(b_batch)) + b_batch
    batch = [max(x, y) for x, y in zip(a_batch, b_batch, strict=True)]
    count = shape_size(batch)
    out = rt.empty(count * m * n, DType.float32)
    if count == 0 or m == 0 or n == 0:
        return out
    if count > 65535:
        raise GpuError(f"matmul: {count} batch entries exceed one dispatch (65535)")
    a_steps = [s * ar * ac for s in broadcast_strides(a_batch, batch)]
    b_steps = [s * br * bc for s in broadcast_strides(b_batch, batch)]
    a_m, a_k = (1, ac) if ta else (ac, 1)
    b_k, b_n = (1, bc) if tb else (bc, 1)
    params = [m, n, k, a_m, a_k, b_k, b_n, nd, *batch, *a_steps, *b_steps]
    if k == 0:
        rt.run(rt.kernel("fill"), [out], [out.count, 0], groups_for(out.count))
        return out
    if rt.matmul_path in ("blocked", "subgroup"):
        return _blocked(rt, a, b, out, m, n, k, count, nd, batch, a_batch, b_batch, params)
    if rt.matmul_path == "coop":
        return _coop(rt, a, b, out, m, n, k, count, nd, batch, a_batch, b_batch, params)
    rt.run(dense_matmul(rt), [a, b, out], params, matmul_groups(m, n, count))
    return out


#: Rows and vec4 columns of C per thread of matmul_blocked.wgsl (8 x 16 outputs).
BLOCK_ROWS, BLOCK_COLS = 8, 4


def _blocked_text(shuffle: bool = False) -> dict[str, str]:
    """matmul_blocked.wgsl's unrolled body, or matmul_subgroup.wgsl's (``shuffle``: row
    r of A from lane r of the subgroup)."""
    rows, cols = range(BLOCK_ROWS), range(BLOCK_COLS)
    setup = [] if shuffle else [f"    let ra{r} = a0 + min(r0 + {r}u, M - 1u) * k4;" for r in rows]
    setup += [f"    let cb{j} = b0 + min(j0 + {j}u, n4 - 1u);" for j in cols]
    setup += [f"    var acc{r}_{j} = vec4<f32>(0.0);" for r in rows for j in cols]
    step = [f"        let y{i}_{j} = b[cb{j} + kb + {i}u * n4];" for i in range(4) for j in cols]
    for r in rows:
        if shuffle:
            step.append(f"        let x{r} = subgroupShuffle(xa, {r}u);")
        else:
            step.append(f"        let x{r} = a[ra{r} + q];")
        step += [
            f"        acc{r}_{j} = acc{r}_{j} + x{r}.x * y0_{j} + x{r}.y * y1_{j}"
            f" + x{r}.z * y2_{j} + x{r}.w * y3_{j};"
            for j in cols
        ]
    store = [
        f"    if (r0 + {r}u < M && j0 + {j}u < n4) "
        f"{{ c[out0 + (r0 + {r}u) * n4 + j0 + {j}u] = acc{r}_{j}; }}"
        for r in rows
        for j in cols
    ]
    return {
        "ROWS": str(BLOCK_ROWS),
        "COLS": str(BLOCK_COLS),
        "SETUP": "\n".join(setup),
        "STEP": "\n".join(step),
        "STORE": "\n".join(store),
    }


def _packed(rt: Runtime, x: Storage, entries: int, rows: int, cols: int, r_step: int, c_step: int):
    """``x`` as ``entries`` row-major ``rows x cols`` matrices with the columns padded to
    a multiple of 4: ``x`` itself when it already is."""
    cp = -(-cols // 4) * 4
    if cp == cols and c_step == 1 and r_step == cols:
        return x
    out = rt.empty(entries * rows * cp, DType.float32)
    params = [out.count, rows, cols, cp, r_step, c_step, rows * cols]
    rt.run(rt.kernel("matmul_pack"), [x, out], params, groups_for(out.count))
    return out


def _blocked(rt, a, b, out, m, n, k, count, nd, batch, a_batch, b_batch, params):
    a_m, a_k, b_k, b_n = params[3:7]
    k4, n4 = -(-k // 4), -(-n // 4)
    a_entries, b_entries = shape_size(a_batch), shape_size(b_batch)
    ap = _packed(rt, a, a_entries, m, k, a_m, a_k)
    bp = _packed(rt, b, b_entries, k, n, b_k, b_n)
    if k4 * 4 != k:  # B's padded k rows must be zeros too: pack its rows past k as well
        bp = _pad_rows(rt, bp, b_entries, k, 4 * k4, 4 * n4)
    a_steps = [s * m * k4 for s in broadcast_strides(a_batch, batch)]
    b_steps = [s * 4 * k4 * n4 for s in broadcast_strides(b_batch, batch)]
    cp = out if n4 * 4 == n else rt.empty(count * m * 4 * n4, DType.float32)
    if rt.matmul_path == "subgroup":
        groups = (-(-n4 // (16 * BLOCK_COLS)), -(-m // BLOCK_ROWS), count)
        kernel = rt.kernel("matmul_subgroup", **_blocked_text(shuffle=True))
    else:
        groups = (-(-n4 // (8 * BLOCK_COLS)), -(-m // (8 * BLOCK_ROWS)), count)
        kernel = rt.kernel("matmul_blocked", **_blocked_text())
    if max(groups) > 65535:
        raise GpuError(f"matmul: {m} x {n} outputs ({count} batch entries) exceed one dispatch")
    rt.run(kernel, [ap, bp, cp], [m, n4, k4, nd, *batch, *a_steps, *b_steps], groups)
    if cp is not out:
        rt.run(
            rt.kernel("matmul_pack"),
            [cp, out],
            [out.count, count * m, n, n, 4 * n4, 1, 0],
            groups_for(out.count),
        )
    return out


def _pad_rows(rt: Runtime, x: Storage, entries: int, rows: int, rows_p: int, cols: int):
    """``entries`` matrices of ``rows x cols`` with zero rows appended up to ``rows_p``."""
    out = rt.empty(entries * rows_p * cols, DType.float32)
    # Viewed as one column per matrix entry: (entries, rows_p * cols) from (entries, rows * cols).
    params = [out.count, entries, rows * cols, rows_p * cols, rows * cols, 1, 0]
    rt.run(rt.kernel("matmul_pack"), [x, out], params, groups_for(out.count))
    return out


def _up(x: int, step: int) -> int:
    return -(-x // step) * step


def _coop_pack(rt, x, entries, rows, cols, rows_p, cols_p, r_step, c_step, half):
    """``x`` as ``entries`` row-major ``rows_p x cols_p`` matrices with zeros past ``rows``
    and ``cols``, as f16 pairs (``half``) or f32: ``x`` itself when it already is (f32)."""
    if not half and (rows_p, cols_p, r_step, c_step) == (rows, cols, cols, 1):
        return x
    elements = entries * rows_p * cols_p
    words = elements // 2 if half else elements
    out = rt.empty(words, DType.float32)  # f16 pairs are 32-bit words too
    params = [words, rows, cols, rows_p, cols_p, r_step, c_step, rows * cols]
    kernel = rt.kernel("matmul_pack_coop", "half" if half else "single")
    rt.run(kernel, [x, out], params, groups_for(words))
    return out


def _coop(rt, a, b, out, m, n, k, count, nd, batch, a_batch, b_batch, params):
    """matmul_coop.wgsl: operands packed to whole tiles (2 x 2 tiles of C a workgroup), the
    product unpacked when it was padded."""
    if rt.coop is None:
        raise GpuError("matmul: the coop path needs a device opened with cooperative matrices")
    t, inputs, width = rt.coop
    half = inputs == "f16"
    a_m, a_k, b_k, b_n = params[3:7]
    mp, np_, kp = _up(m, 2 * t), _up(n, 2 * t), _up(k, t)
    groups = (np_ // (2 * t), mp // (2 * t), count)
    if max(groups) > 65535:
        raise GpuError(f"matmul: {m} x {n} outputs ({count} batch entries) exceed one dispatch")
    a_entries, b_entries = shape_size(a_batch), shape_size(b_batch)
    ap = _coop_pack(rt, a, a_entries, m, k, mp, kp, a_m, a_k, half)
    bp = _coop_pack(rt, b, b_entries, k, n, kp, np_, b_k, b_n, half)
    a_steps = [s * mp * kp for s in broadcast_strides(a_batch, batch)]
    b_steps = [s * kp * np_ for s in broadcast_strides(b_batch, batch)]
    padded = (mp, np_) != (m, n)
    cp = rt.empty(count * mp * np_, DType.float32) if padded else out
    kernel = rt.kernel(
        "matmul_coop",
        ENABLE="enable f16;" if half else "",
        AB=inputs,
        T=str(t),
        T2=str(2 * t),
        WG=str(width),
    )
    rt.run(kernel, [ap, bp, cp], [mp, np_, kp, nd, *batch, *a_steps, *b_steps], groups)
    if padded:
        params = [out.count, m, n, m, n, np_, 1, mp * np_]
        rt.run(rt.kernel("matmul_pack_coop", "single"), [cp, out], params, groups_for(out.count))
    return out


#: Outputs of one matmul workgroup along each axis (matmul.wgsl's 64 x 64 block).
TILE = 64


def matmul_groups(m: int, n: int, count: int) -> tuple[int, int, int]:
    """Workgroups of matmul.wgsl covering ``count`` products of ``m x n`` outputs."""
    groups = (-(-n // TILE), -(-m // TILE), count)
    if max(groups) > 65535:
        raise GpuError(f"matmul: {m} x {n} outputs ({count} batch entries) exceed one dispatch")
    return groups


def matmul_kernel(rt: Runtime, *, bdecl: str, extra: str, loadb: str):
    """The workgroup-tiled matmul (dense on the ``tiled`` and ``f16`` paths, NF4 weights on
    every path): ``f32`` tiles, or ``f16`` tiles (inputs rounded to f16, products summed
    in f32) on the ``f16`` path."""
    half = rt.matmul_path == "f16"
    return rt.kernel(
        "matmul",
        ENABLE="enable f16;" if half else "",
        TILE_T="f16" if half else "f32",
        BDECL=bdecl,
        EXTRA=extra,
        LOADB=loadb,
    )


def dense_matmul(rt: Runtime):
    return matmul_kernel(
        rt,
        bdecl="@group(0) @binding(2) var<storage, read> b: array<f32>;",
        extra="",
        loadb="b[b0 + (k0 + r) * P[5] + (col0 + s) * P[6]]",
    )
