// Whole-step decode: y[n, r] (+)= x[n, :] . W[r, :] + bias[r] for the rows
// x[n] at x_at + n * x_stride, into y[n * y_stride + y_at + r]; a thread per
// output, k summed in order. P: N, rows, cols, x_stride, x_at, y_stride, y_at,
// has_bias, accumulate
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = gid.x + gid.z * nwg.x * 64u;
    let n = gid.y;
    if (r >= P[1] || n >= P[0]) { return; }
    let k = P[2];
    let xo = P[4] + n * P[3];
    let wo = r * k;
    var s = 0.0;
    for (var j = 0u; j < k; j = j + 1u) { s = s + x[xo + j] * w[wo + j]; }
    if (P[7] != 0u) { s = s + bias[r]; }
    let at = n * P[5] + P[6] + r;
    if (P[8] != 0u) { y[at] = y[at] + s; } else { y[at] = s; }
}
