// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w (layer norm);
// dx = rstd * (g - xhat * mean(g * xhat)) (RMS norm), one workgroup per row.
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> dx: array<f32>;

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
    let rms = P[2] != 0u;
    var mean = 0.0;
    var rstd = stats[row];
    if (!rms) { mean = stats[row]; rstd = stats[P[0] + row]; }
    var ag = vec2<f32>(0.0, 0.0);
    var agx = vec2<f32>(0.0, 0.0);
    for (var j = t; j < d; j = j + 64u) {
        var g = dy[base + j];
        if (P[3] != 0u) { g = g * w[j]; }
        let xhat = (x[base + j] - mean) * rstd;
        ag = kahan(ag, g);
        agx = kahan(agx, g * xhat);
    }
    let sums = tree(t, vec4<f32>(ag, agx));
    let mg = sums.x / f32(d);
    let mgx = sums.y / f32(d);
    for (var j = t; j < d; j = j + 64u) {
        var g = dy[base + j];
        if (P[3] != 0u) { g = g * w[j]; }
        let xhat = (x[base + j] - mean) * rstd;
        if (rms) { dx[base + j] = rstd * (g - xhat * mgx); }
        else { dx[base + j] = rstd * (g - mg - xhat * mgx); }
    }
}
