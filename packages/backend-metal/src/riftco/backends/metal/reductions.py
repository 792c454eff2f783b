"""Reductions over one axis (fixed-order trees) and row softmax."""

from __future__ import annotations

from riftco.backends.metal.errors import GpuError
from riftco.backends.metal.runtime import Runtime, Storage, groups_for, split_axis
from riftco.tensor.plugin import DType

#: The kernels' op codes, by name: riftco.tensor's reductions and ``argmax``.
CODES = {"sum": 0, "mean": 1, "max": 2, "min": 3, "sum_squares": 4, "argmax": 5}

_FLOAT = """
    if (!live) { return; }
    var acc = vec2<f32>(0.0, 0.0);
    var best = 0.0;
    var at = 0xffffffffu;
    if (op == 2u) { best = -inf_f(); }
    if (op == 3u) { best = inf_f(); }
    if (op == 5u && n > 0u) { best = x[base]; at = 0u; }
    for (var j = t; j < n; j = j + 64u) {
        let v = x[base + j * inner];
        if (op == 0u || op == 1u) { acc = kahan(acc, v); }
        else if (op == 4u) { acc = kahan(acc, v * v); }
        else if (op == 2u) { best = max_nan(best, v); }
        else if (op == 3u) { best = min_nan(best, v); }
        else if (better(v, j, best, at)) { best = v; at = j; }
    }
    if (op <= 1u || op == 4u) { part[t] = acc; } else { part[t] = vec2<f32>(best, 0.0); }
    where_[t] = at;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) {
            let a = part[t];
            let b = part[t + s];
            if (op <= 1u || op == 4u) {
                let sum = a.x + b.x;
                let bb = sum - a.x;
                let err = (a.x - (sum - bb)) + (b.x - bb);
                part[t] = vec2<f32>(sum, (a.y + b.y) - err);
            } else if (op == 2u) {
                part[t] = vec2<f32>(max_nan(a.x, b.x), 0.0);
            } else if (op == 3u) {
                part[t] = vec2<f32>(min_nan(a.x, b.x), 0.0);
            } else if (where_[t + s] != 0xffffffffu
                       && (where_[t] == 0xffffffffu || better(b.x, where_[t + s], a.x, where_[t]))) {
                part[t] = b;
                where_[t] = where_[t + s];
            }
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        let r = part[0];
        if (op == 5u) { out[row] = {{TO}}(where_[0]); }
        else if (op == 1u) { out[row] = {{TO}}((r.x - r.y) / f32(n)); }
        else if (op == 0u || op == 4u) { out[row] = {{TO}}(r.x - r.y); }
        else { out[row] = {{TO}}(r.x); }
    }
"""

_INT = """
    if (!live) { return; }
    var acc = 0;
    if (op == 2u) { acc = -2147483647 - 1; }
    if (op == 3u) { acc = 2147483647; }
    var best = 0;
    var at = 0xffffffffu;
    if (op == 5u && n > 0u) { best = x[base]; at = 0u; }
    for (var j = t; j < n; j = j + 64u) {
        let v = x[base + j * inner];
        if (op == 0u) { acc = acc + v; }
        else if (op == 2u) { acc = max(acc, v); }
        else if (op == 3u) { acc = min(acc, v); }
        else if (v > best || (v == best && j < at)) { best = v; at = j; }
    }
    if (op == 5u) { ipart[t] = best; } else { ipart[t] = acc; }
    where_[t] = at;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) {
            let a = ipart[t];
            let b = ipart[t + s];
            if (op == 0u) { ipart[t] = a + b; }
            else if (op == 2u) { ipart[t] = max(a, b); }
            else if (op == 3u) { ipart[t] = min(a, b); }
            else if (where_[t + s] != 0xffffffffu
                     && (where_[t] == 0xffffffffu || b > a || (b == a && where_[t + s] < where_[t]))) {
                ipart[t] = b;
                where_[t] = where_[t + s];
            }
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        if (op == 5u) { out[row] = i32(where_[0]); } else { out[row] = ipart[0]; }
    }
"""


def reduce(rt: Runtime, op: str, x: Storage, shape, dtype: DType, axis: int) -> Storage:
    code = CODES.get(op)
    if code is None or (dtype is DType.int64 and op not in ("sum", "max", "min", "argmax")):
        raise GpuError(f"reduce: {op!r} is not defined for {dtype.value}")
    if dtype not in (DType.float32, DType.int64):
        raise GpuError(f"reduce: {dtype.value} tensors cannot be reduced")
    outer, n, inner = split_axis(shape, axis)
    outputs = outer * inner
    out_dtype = DType.int64 if op == "argmax" else dtype
    out = rt.empty(outputs, out_dtype)
    if dtype is DType.float32:
        to = "i32" if op == "argmax" else "f32"
        kernel = rt.kernel("reduce", T="f32", TO=to, BODY=_FLOAT.replace("{{TO}}", to))
    else:
        kernel = rt.kernel("reduce", T="i32", TO="i32", BODY=_INT)
    rt.run(kernel, [x, out], [outputs, n, inner, code], groups_for(outputs, 1))
    return out


def softmax(rt: Runtime, x: Storage, shape, causal: bool, log: bool) -> Storage:
    cols = int(shape[-1]) if shape else 1
    rows = x.count // cols if cols else 0
    t = int(shape[-2]) if len(shape) >= 2 else 1
    out = rt.empty(x.count, DType.float32)
    params = [rows, cols, int(causal), int(log), t]
    rt.run(rt.kernel("softmax"), [x, out], params, groups_for(rows, 1))
    return out
