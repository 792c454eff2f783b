// (Log-)softmax of each row, one workgroup per row; with causal, row r of a
// [.., t, s] block sees columns 0..=(r % t) + s - t and the rest get 0 (-inf).
// P: rows, cols, causal, log, t
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

var<workgroup> part: array<vec2<f32>, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= P[0]) { return; }
    let cols = P[1];
    let base = row * cols;
    var visible = cols;
    if (P[2] != 0u) {
        let q = i32(row % P[4]) + i32(cols) - i32(P[4]);
        visible = u32(clamp(q + 1, 0, i32(cols)));
    }
    var m = -inf_f();
    for (var j = t; j < visible; j = j + 64u) { m = max_nan(m, x[base + j]); }
    part[t] = vec2<f32>(m, 0.0);
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) { part[t] = vec2<f32>(max_nan(part[t].x, part[t + s].x), 0.0); }
        workgroupBarrier();
    }
    let mx = part[0].x;
    workgroupBarrier();
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = t; j < visible; j = j + 64u) { acc = kahan(acc, exp_safe(x[base + j] - mx)); }
    part[t] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) {
            let a = part[t];
            let b = part[t + s];
            part[t] = vec2<f32>(a.x + b.x, a.y + b.y);
        }
        workgroupBarrier();
    }
    let total = part[0].x - part[0].y;
    let lse = log(total);
    for (var j = t; j < cols; j = j + 64u) {
        if (j >= visible) {
            if (P[3] != 0u) { out[base + j] = -inf_f(); } else { out[base + j] = 0.0; }
        } else if (P[3] != 0u) {
            out[base + j] = x[base + j] - mx - lse;
        } else {
            out[base + j] = exp_safe(x[base + j] - mx) / total;
        }
    }
}
