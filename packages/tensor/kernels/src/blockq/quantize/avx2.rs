//! The input rows' 8-bit quantization (see [`super`]) eight lanes at a time:
//! the same scale, codes and sums as the portable loop, bit for bit.

use super::super::dot::round_to_half;
use super::QK;
use std::arch::x86_64::*;

/// Blocks of 32 of `x` into `q`, `scales` and (when not empty) `sums`.
///
/// # Safety
/// The CPU must have AVX2; `q` holds `x.len()` codes, `scales` `x.len() / 32`
/// and `sums` eight per block or none.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize(x: &[f32], q: &mut [i8], scales: &mut [f32], sums: &mut [i32]) {
    let blocks = x.len() / QK;
    assert!(q.len() == x.len() && scales.len() == blocks);
    assert!(sums.is_empty() || sums.len() == blocks * 8);
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (low, high) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
    // After the two packs, dword k holds elements 4 (2 (k % 4) + k / 4) ..
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for b in 0..blocks {
        let p = x.as_ptr().add(b * QK);
        let v: [__m256; 4] = std::array::from_fn(|j| _mm256_loadu_ps(p.add(8 * j)));
        // The largest magnitude (max is exact in any order), NaN when one is NaN.
        let mut nan = _mm256_setzero_ps();
        let mut top = _mm256_setzero_ps();
        for &vj in &v {
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(vj, vj));
            top = _mm256_max_ps(top, _mm256_and_ps(vj, magnitude));
        }
        let t4 = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
        let t2 = _mm_max_ps(t4, _mm_movehl_ps(t4, t4));
        let t1 = _mm_max_ss(t2, _mm_shuffle_ps(t2, t2, 1));
        let a = if _mm256_movemask_ps(nan) != 0 {
            f32::NAN
        } else {
            _mm_cvtss_f32(t1)
        };
        let inv = if a != 0.0 { 127.0 / a } else { 0.0 };
        *scales.get_unchecked_mut(b) = round_to_half(a / 127.0);
        let inv8 = _mm256_set1_ps(inv);
        // Round to nearest, ties to even; NaN to 0 as `as i8` does.
        let codes = v.map(|vj| {
            let y = _mm256_mul_ps(vj, inv8);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
            let r = _mm256_and_ps(t, _mm256_cmp_ps::<_CMP_ORD_Q>(y, y));
            // Saturated as `as i8` does (a subnormal scale makes `inv` infinite).
            _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, low), high))
        });
        let packed = _mm256_packs_epi16(
            _mm256_packs_epi32(codes[0], codes[1]),
            _mm256_packs_epi32(codes[2], codes[3]),
        );
        let qv = _mm256_permutevar8x32_epi32(packed, order);
        _mm256_storeu_si256(q.as_mut_ptr().add(b * QK) as *mut __m256i, qv);
        if !sums.is_empty() {
            let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv);
            let fours = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
            let eight = _mm256_slli_epi32(fours, 3);
            _mm256_storeu_si256(sums.as_mut_ptr().add(b * 8) as *mut __m256i, eight);
        }
    }
}
