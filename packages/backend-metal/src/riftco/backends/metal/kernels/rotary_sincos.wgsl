// Sine and cosine of a float32 angle to float32 accuracy (Cody-Waite reduction by
// pi/2, then polynomials), shared by the rotary kernels.
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
