// Shared by every kernel: the parameter block and float helpers.
// Non-finite values are recognised from their bits, never from comparisons a
// compiler may assume false.
@group(0) @binding(0) var<storage, read> P: array<u32>;

fn pf(i: u32) -> f32 { return bitcast<f32>(P[i]); }
fn pi(i: u32) -> i32 { return bitcast<i32>(P[i]); }
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_finite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }
// NaN and infinities built at run time (a constant would be folded and refused).
fn nan_f() -> f32 { return bitcast<f32>(0x7fc00000u | (P[0] & 0u)); }
fn inf_f() -> f32 { return bitcast<f32>(0x7f800000u | (P[0] & 0u)); }
// The linear index of a thread of a 256-wide workgroup in a (x, y) grid.
fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }

fn max_nan(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) { return nan_f(); }
    return max(a, b);
}
fn min_nan(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) { return nan_f(); }
    return min(a, b);
}
fn exp_safe(x: f32) -> f32 {
    if (x > 88.72283) { return inf_f(); }
    if (x < -103.97208) { return 0.0; }
    return exp(x);
}
fn log_safe(x: f32) -> f32 {
    if (is_nan(x) || x < 0.0) { return nan_f(); }
    if (x == 0.0) { return -inf_f(); }
    if (!is_finite(x)) { return x; }
    return log(x);
}
fn tanh_safe(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let c = clamp(x, -12.0, 12.0);
    // tanh = (e^2x - 1) / (e^2x + 1) for moderate x; the series near 0 keeps precision.
    if (abs(c) < 0.0004) { return c - c * c * c / 3.0; }
    let e = exp(2.0 * c);
    return (e - 1.0) / (e + 1.0);
}
fn sigmoid_f(x: f32) -> f32 {
    if (x >= 0.0) { return 1.0 / (1.0 + exp_safe(-x)); }
    let e = exp_safe(x);
    return e / (1.0 + e);
}
// erfc with a relative error below 1.2e-7 everywhere (Numerical Recipes' erfcc),
// so that the exact GELU keeps its precision in the negative tail.
fn erfc_f(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * exp_safe(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277)))))))));
    if (x >= 0.0) { return r; }
    return 2.0 - r;
}
fn gelu_f(x: f32) -> f32 { return 0.5 * x * erfc_f(-x * 0.70710678118654752); }
fn gelu_tanh_f(x: f32) -> f32 {
    let inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh_safe(inner));
}
// Kahan summation step: (sum, compensation).
fn kahan(acc: vec2<f32>, v: f32) -> vec2<f32> {
    let y = v - acc.y;
    let t = acc.x + y;
    return vec2<f32>(t, (t - acc.x) - y);
}
