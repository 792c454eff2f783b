// Parameter gradients of a norm: per column c, in row order,
// dweight[c] = sum_r dy[r, c] * xhat[r, c] and dbias[c] = sum_r dy[r, c].
// P: rows, d, rms
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read> stats: array<f32>;
@group(0) @binding(4) var<storage, read_write> dw: array<f32>;
@group(0) @binding(5) var<storage, read_write> db: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let c = flat(gid, nwg);
    let rows = P[0];
    let d = P[1];
    if (c >= d) { return; }
    var aw = vec2<f32>(0.0, 0.0);
    var ab = vec2<f32>(0.0, 0.0);
    for (var r = 0u; r < rows; r = r + 1u) {
        var mean = 0.0;
        var rstd = stats[r];
        if (P[2] == 0u) { mean = stats[r]; rstd = stats[rows + r]; }
        let g = dy[r * d + c];
        aw = kahan(aw, g * ((x[r * d + c] - mean) * rstd));
        ab = kahan(ab, g);
    }
    dw[c] = aw.x - aw.y;
    db[c] = ab.x - ab.y;
}
