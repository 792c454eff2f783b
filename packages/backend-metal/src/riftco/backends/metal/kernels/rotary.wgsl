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

fn sincos(a: f32) -> vec2<f32> {
    let k = round(a * 0.63661977236758134);
    // pi/2 in three parts whose products with k (|k| < 2^13) are exact.
    var r = a - k * 1.5703125;
    r = r - k * 4.837512969970703125e-4;
    r = r - k * 7.549789948768648e-8;
    let r2 = r * r;
    let s = r + r * r2 * (-0.16666666666666666 + r2 * (0.008333333333333333
        + r2 * (-0.0001984126984126984 + r2 * 2.755731922398589e-6)));
    let c = 1.0 + r2 * (-0.5 + r2 * (0.041666666666666664 + r2 * (-0.001388888888888889
        + r2 * (2.48015873015873e-5 - r2 * 2.755731922398589e-7))));
    let q = i32(k) & 3;
    if (q == 0) { return vec2<f32>(s, c); }
    if (q == 1) { return vec2<f32>(c, -s); }
    if (q == 2) { return vec2<f32>(-s, -c); }
    return vec2<f32>(-c, s);
}

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
