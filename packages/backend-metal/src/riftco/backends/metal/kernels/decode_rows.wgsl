// Whole-step decode: the rows of x [N, d] whose logits are asked for, gathered.
// P: M, d, rows_at
@group(0) @binding(1) var<storage, read> step: array<i32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    let d = P[1];
    if (e >= P[0] * d) { return; }
    let m = e / d;
    y[e] = x[u32(step[P[2] + m]) * d + e % d];
}
