// Row normalization, one workgroup of 64 threads per row; sums are Kahan
// partials combined by a fixed tree.
// forward  P: rows, d, eps, rms, has_weight, has_bias
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> aux: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> s1: array<f32>;
@group(0) @binding(6) var<storage, read_write> s2: array<f32>;

var<workgroup> part: array<vec4<f32>, 64>;

// The tree sum of two Kahan accumulators (x, c) and (z, c') packed in a vec4.
fn tree(t: u32, v: vec4<f32>) -> vec2<f32> {
    part[t] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) {
            let a = part[t];
            let b = part[t + s];
            part[t] = vec4<f32>(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        }
        workgroupBarrier();
    }
    let r = part[0];
    workgroupBarrier();
    return vec2<f32>(r.x - r.y, r.z - r.w);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) t: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= P[0]) { return; }
    let d = P[1];
    let base = row * d;
    let rms = P[3] != 0u;
    var mean = 0.0;
    if (!rms) {
        var acc = vec2<f32>(0.0, 0.0);
        for (var j = t; j < d; j = j + 64u) { acc = kahan(acc, x[base + j]); }
        mean = tree(t, vec4<f32>(acc, 0.0, 0.0)).x / f32(d);
    }
    var sq = vec2<f32>(0.0, 0.0);
    for (var j = t; j < d; j = j + 64u) {
        let c = x[base + j] - mean;
        sq = kahan(sq, c * c);
    }
    let var_ = tree(t, vec4<f32>(sq, 0.0, 0.0)).x / f32(d);
    let rstd = 1.0 / sqrt(var_ + pf(2u));
    for (var j = t; j < d; j = j + 64u) {
        var v = (x[base + j] - mean) * rstd;
        if (P[4] != 0u) { v = v * w[j]; }
        if (P[5] != 0u) { v = v + aux[j]; }
        y[base + j] = v;
    }
    if (t == 0u) {
        if (rms) { s1[row] = rstd; } else { s1[row] = mean; s2[row] = rstd; }
    }
}

