// Softmax cross-entropy of logits [n, classes], one workgroup per row (targets
// checked first). P: rows, classes, ignore_index
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read_write> losses: array<f32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;

var<workgroup> part: array<vec2<f32>, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= P[0]) { return; }
    let c = P[1];
    let base = row * c;
    var m = -inf_f();
    for (var j = t; j < c; j = j + 64u) { m = max_nan(m, logits[base + j]); }
    part[t] = vec2<f32>(m, 0.0);
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) { part[t] = vec2<f32>(max_nan(part[t].x, part[t + s].x), 0.0); }
        workgroupBarrier();
    }
    let mx = part[0].x;
    workgroupBarrier();
    var acc = vec2<f32>(0.0, 0.0);
    for (var j = t; j < c; j = j + 64u) { acc = kahan(acc, exp_safe(logits[base + j] - mx)); }
    part[t] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) { part[t] = part[t] + part[t + s]; }
        workgroupBarrier();
    }
    if (t == 0u) {
        let l = mx + log(part[0].x - part[0].y);
        lse[row] = l;
        let tg = targets[row];
        if (tg == pi(2u)) { losses[row] = 0.0; } else { losses[row] = l - logits[base + u32(tg)]; }
    }
}
