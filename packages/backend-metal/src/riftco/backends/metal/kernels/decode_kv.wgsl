// Whole-step decode: each row's keys and values (qkv [N, stride] at q_width and
// q_width + kv_width) written at its cache row. P: N, kv_width, stride, q_width, rows_at
@group(0) @binding(1) var<storage, read> step: array<i32>;
@group(0) @binding(2) var<storage, read> qkv: array<f32>;
@group(0) @binding(3) var<storage, read_write> keys: array<f32>;
@group(0) @binding(4) var<storage, read_write> values: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    let w = P[1];
    if (e >= P[0] * w) { return; }
    let n = e / w;
    let j = e % w;
    let row = u32(step[P[4] + n]);
    let src = n * P[2] + P[3] + j;
    keys[row * w + j] = qkv[src];
    values[row * w + j] = qkv[src + w];
}
