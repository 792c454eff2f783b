//! The input rows' 8-bit quantization for the Q8_0 and Q4_0 products, ggml's
//! `quantize_row_q8_0` as llama.cpp runs it on x86-64 (see [`super`]): the
//! portable loop, and an AVX2 version with the same bits.

#[cfg(target_arch = "x86_64")]
mod avx2;

use super::dot::round_to_half;
use super::QK;

/// Input rows quantized to 8 bits per block of 32 (see the module docs): `q`
/// `[m, cols]`, the scales `[m, cols / 32]` (halves, held as the float32 of
/// their value), and for Q4_0 eight times
/// the sum of each group of four `q` (`[m, cols / 32 * 8]`), which the Q4_0 dot
/// product subtracts for the weight's offset of 8.
#[derive(Default)]
pub(crate) struct QuantizedRows {
    pub q: Vec<i8>,
    pub scales: Vec<f32>,
    pub sums: Vec<i32>,
}

/// The largest magnitude of `x`, NaN when `x` has one.
#[inline(always)]
fn absmax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |a, &v| {
        if v.is_nan() || a.is_nan() {
            f32::NAN
        } else {
            a.max(v.abs())
        }
    })
}

#[cfg(test)]
pub(crate) fn quantize_rows(x: &[f32], with_sums: bool) -> QuantizedRows {
    quantize_rows_with(x, with_sums, true)
}

/// [`quantize_rows`] into `into`'s buffers (resized, so a loop of inputs of one size
/// allocates once).
pub(crate) fn quantize_rows_into(x: &[f32], with_sums: bool, into: &mut QuantizedRows) {
    fill(x, with_sums, true, into);
}

/// [`quantize_rows`], `vector`: with the AVX2 version where the CPU has it.
pub(super) fn quantize_rows_with(x: &[f32], with_sums: bool, vector: bool) -> QuantizedRows {
    let mut rows = QuantizedRows::default();
    fill(x, with_sums, vector, &mut rows);
    rows
}

fn fill(x: &[f32], with_sums: bool, vector: bool, into: &mut QuantizedRows) {
    let blocks = x.len() / QK;
    let QuantizedRows { q, scales, sums } = into;
    q.resize(x.len(), 0);
    scales.resize(blocks, 0.0);
    sums.resize(if with_sums { blocks * 8 } else { 0 }, 0);
    #[cfg(target_arch = "x86_64")]
    if vector && crate::pool::has_avx2_fma() {
        // SAFETY: the CPU has AVX2; the buffers have the lengths it needs.
        unsafe { avx2::quantize(x, q, scales, sums) };
        return;
    }
    quantize_portable(x, q, scales, sums);
}

fn quantize_portable(x: &[f32], q: &mut [i8], scales: &mut [f32], sums: &mut [i32]) {
    for (b, (xb, qb)) in x.chunks_exact(QK).zip(q.chunks_exact_mut(QK)).enumerate() {
        let a = absmax(xb);
        let inv = if a != 0.0 { 127.0 / a } else { 0.0 };
        for (o, &v) in qb.iter_mut().zip(xb) {
            // A non-finite scale leaves q at 0 and makes the block's products NaN.
            *o = (v * inv).round_ties_even() as i8;
        }
        scales[b] = round_to_half(a / 127.0);
        if !sums.is_empty() {
            for (j, g) in qb.chunks_exact(4).enumerate() {
                sums[b * 8 + j] = 8 * g.iter().map(|&v| v as i32).sum::<i32>();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_quantization_matches_the_portable_one() {
        let mut x: Vec<f32> = (0..32 * 40)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * [1.0, 0.01, 3e-39, 1e30][i / 320])
            .collect();
        // Ties (a block whose largest magnitude is 127 has the scale 1).
        for (j, v) in x[..32].iter_mut().enumerate() {
            *v = if j == 0 {
                127.0
            } else {
                (j as f32 - 16.0) + 0.5
            };
        }
        x[40] = -0.0;
        x[70] = f32::NAN;
        x[100] = f32::INFINITY;
        x[130] = f32::NEG_INFINITY;
        x[160..192].fill(0.0);
        x[200] = f32::MIN_POSITIVE;
        x.extend([1.0, 2.0, 3.0]); // a tail that is not a block
        for with_sums in [false, true] {
            let fast = quantize_rows(&x, with_sums);
            let blocks = x.len() / QK;
            let mut q = vec![0i8; x.len()];
            let mut scales = vec![0.0f32; blocks];
            let mut sums = vec![0i32; if with_sums { blocks * 8 } else { 0 }];
            quantize_portable(&x, &mut q, &mut scales, &mut sums);
            assert_eq!(fast.q, q);
            assert_eq!(fast.sums, sums);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast.scales), bits(&scales));
            // Ties to even: -14.5, -13.5, -12.5 and 0.5.
            assert_eq!([q[1], q[2], q[3], q[16]], [-14, -14, -12, 0]);
            assert_eq!(scales[0], 1.0);
        }
    }

    #[test]
    fn the_scale_is_a_half_and_the_codes_use_the_float32_inverse() {
        // max |x| = 100: d = 100 / 127 rounds to the half 0.78759765625, while the
        // codes come from 127 / 100 in float32, as in ggml's quantize_row_q8_0.
        let mut x = vec![0.0f32; 32];
        x[0] = 100.0;
        x[1] = -37.3;
        x[2] = 0.2;
        let r = quantize_rows(&x, false);
        assert_eq!(r.scales[0], 0.787_597_66);
        assert_eq!(r.scales[0], round_to_half(100.0 / 127.0));
        assert_ne!(r.scales[0], 100.0 / 127.0);
        let inv = 127.0f32 / 100.0;
        assert_eq!(r.q[..3], [127, (-37.3f32 * inv).round() as i8, 0]);
        // Past the half range the scale is infinite (the products are not finite).
        let big: Vec<f32> = (0..32).map(|i| i as f32 * 1e6).collect();
        assert!(quantize_rows(&big, false).scales[0].is_infinite());
        // A block too small for a normal half keeps a subnormal or zero scale.
        let tiny: Vec<f32> = (0..32).map(|i| i as f32 * 1e-9).collect();
        let t = quantize_rows(&tiny, false);
        assert_eq!(t.scales[0], round_to_half(31e-9 / 127.0));
        assert_eq!(t.q[31], 127);
    }
}
