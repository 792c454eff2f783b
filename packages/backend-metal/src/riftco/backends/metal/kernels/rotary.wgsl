// Rotary embedding (split-half) of x [..., heads, head_dim] at int positions
// [...]: pair (i, i + half) turns by pos * inv_freq[i]. The angle is the float32
// product, as on the CPU; its sine and cosine are computed to float32 accuracy
// here (Cody-Waite reduction by pi/2, then polynomials), not by the device's
// sin/cos, whose accuracy Vulkan and Metal leave loose.
// P: pairs, heads, half, inverse
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<i32>;
@group(0) @binding(3) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

#include rotary_sincos

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = flat(gid, nwg);
    if (e >= P[0]) { return; }
    let half = P[2];
    let i = e % half;
    let head_row = e / half;
    let p = head_row / P[1];
    let angle = f32(positions[p]) * inv_freq[i];
    var sc = sincos(angle);
    if (P[3] != 0u) { sc.x = -sc.x; }
    let at = head_row * 2u * half + i;
    let x1 = x[at];
    let x2 = x[at + half];
    out[at] = x1 * sc.y - x2 * sc.x;
    out[at + half] = x2 * sc.y + x1 * sc.x;
}
