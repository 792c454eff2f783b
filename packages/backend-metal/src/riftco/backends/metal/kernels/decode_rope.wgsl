// Whole-step decode: rotary positions (split half) of the query and key heads of
// each row of qkv [N, stride] in place, at the row's position.
// P: pairs (N * (H + Hkv) * half), heads (H + Hkv), half, stride, positions_at
#include rotary_sincos
@group(0) @binding(1) var<storage, read> step: array<i32>;
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(3) var<storage, read_write> qkv: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    if (e >= P[0]) { return; }
    let half = P[2];
    let i = e % half;
    let hr = e / half;
    let n = hr / P[1];
    let head = hr % P[1];
    let angle = f32(step[P[4] + n]) * inv_freq[i];
    let sc = sincos(angle);
    let at = n * P[3] + head * 2u * half + i;
    let x1 = qkv[at];
    let x2 = qkv[at + half];
    qkv[at] = x1 * sc.y - x2 * sc.x;
    qkv[at + half] = x2 * sc.y + x1 * sc.x;
}
