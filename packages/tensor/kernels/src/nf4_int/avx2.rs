//! The AVX2 version of the NF4 integer row products (see [`super`]): one block of
//! 32 a 256-bit register, `|C8|` times the input codes with the weight's sign
//! (`maddubs` + `madd`: pairs at most 2 x 127 x 127, no saturation), block `b`
//! into accumulator `b % 2`.

use std::arch::x86_64::*;

use super::{Row, CODEBOOK_I8, QK};

/// `finish8` of the lanes of `v`: halves, then pairs, then the two.
#[inline(always)]
unsafe fn reduce(v: __m256) -> f32 {
    let h4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)))
}

/// Block `b` of each row into `acc` (a set per row), the input loaded once.
#[inline(always)]
unsafe fn blocks<const R: usize>(
    rows: &[Row; R],
    shift: u32,
    q: &[i8],
    s: &[f32],
    b: usize,
    table: __m256i,
    acc: &mut [__m256; R],
) {
    let x = _mm256_loadu_si256(q.as_ptr().add(b * QK) as *const __m256i);
    let sb = *s.get_unchecked(b);
    let ones = _mm256_set1_epi16(1);
    let nibble = _mm_set1_epi8(15);
    for r in 0..R {
        let raw = _mm_loadu_si128(rows[r].codes.as_ptr().add(b * QK / 2) as *const __m128i);
        // Positions 0..15: the low nibbles; 16..31: the high ones.
        let lo = _mm_and_si128(raw, nibble);
        let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), nibble);
        let w = _mm256_shuffle_epi8(table, _mm256_set_m128i(hi, lo));
        let aw = _mm256_sign_epi8(w, w);
        let sx = _mm256_sign_epi8(x, w);
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
        let d = _mm256_set1_ps(rows[r].scale_unchecked(shift, b) * sb);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[r]);
    }
}

/// The rows against the input. The caller checks the CPU and the lengths.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dots<const R: usize>(
    rows: [Row; R],
    shift: u32,
    q: &[i8],
    s: &[f32],
) -> [f32; R] {
    let t = _mm_loadu_si128(CODEBOOK_I8.as_ptr() as *const __m128i);
    let table = _mm256_set_m128i(t, t);
    let (mut a0, mut a1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
    let mut b = 0;
    while b + 2 <= s.len() {
        blocks(&rows, shift, q, s, b, table, &mut a0);
        blocks(&rows, shift, q, s, b + 1, table, &mut a1);
        b += 2;
    }
    if b < s.len() {
        blocks(&rows, shift, q, s, b, table, &mut a0);
    }
    // A loop, not a closure: a closure would not inherit the target features.
    let mut out = [0.0f32; R];
    for r in 0..R {
        out[r] = reduce(_mm256_add_ps(a0[r], a1[r])) / 127.0;
    }
    out
}
