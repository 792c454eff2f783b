//! The AVX2 version of the NF4 integer row products (see [`super`]): one block of
//! 32 a 256-bit register, `|C8|` times the input codes with the weight's sign
//! (`maddubs` + `madd`: pairs at most 2 x 127 x 127, no saturation), block `b`
//! into accumulator `b % 2`.

use std::arch::x86_64::*;

use super::{block_factors, Row, CODEBOOK_I8, QK};

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

/// `quantize_input`'s blocks of 32 (`x.len() / 32` of them), eight floats a step;
/// the same codes, scales and sums as the portable loop (the largest magnitude is
/// exact, the product `x * (127 / a)` the same float32, `vcvtps2dq` rounds to the
/// nearest integer, ties to even, as the portable loop's float32 addition does).
/// The caller checks the CPU.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize(x: &[f32], q: &mut [i8], scales: &mut [f32], sums: &mut [i32]) {
    let blocks = x.len() / QK;
    assert!(q.len() >= blocks * QK && scales.len() >= blocks && sums.len() >= blocks * 8);
    let magnitude = _mm256_set1_ps(f32::from_bits(0x7fff_ffff));
    // Natural order, then per 128-bit lane the even bytes and the odd ones, then the
    // lanes' evens together and their odds together.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let split = _mm256_setr_epi8(
        0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, //
        0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
    );
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    for (b, scale) in scales[..blocks].iter_mut().enumerate() {
        let p = x.as_ptr().add(b * QK);
        let mut v = [_mm256_setzero_ps(); 4];
        for (j, vj) in v.iter_mut().enumerate() {
            *vj = _mm256_loadu_ps(p.add(8 * j));
        }
        let mut m = _mm256_and_ps(v[0], magnitude);
        let mut nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v[0], v[0]);
        for &vj in &v[1..] {
            m = _mm256_max_ps(m, _mm256_and_ps(vj, magnitude));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(vj, vj));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let mut a = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2)));
        if _mm256_movemask_ps(nan) != 0 {
            a = f32::NAN;
        }
        *scale = a / 127.0;
        let out = q.as_mut_ptr().add(b * QK) as *mut __m256i;
        if !a.is_finite() {
            // Every product is NaN or zero: the portable loop's codes are all 0.
            _mm256_storeu_si256(out, _mm256_setzero_si256());
            _mm256_storeu_si256(
                sums.as_mut_ptr().add(b * 8) as *mut __m256i,
                _mm256_setzero_si256(),
            );
            continue;
        }
        let (up, inv) = block_factors(a);
        let (up, inv) = (_mm256_set1_ps(up), _mm256_set1_ps(inv));
        let mut c = [_mm256_setzero_si256(); 4];
        for (cj, &vj) in c.iter_mut().zip(&v) {
            *cj = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(vj, up), inv));
        }
        let packed = _mm256_packs_epi16(
            _mm256_packs_epi32(c[0], c[1]),
            _mm256_packs_epi32(c[2], c[3]),
        );
        let natural = _mm256_permutevar8x32_epi32(packed, order);
        let codes = _mm256_permute4x64_epi64::<0xd8>(_mm256_shuffle_epi8(natural, split));
        _mm256_storeu_si256(out, codes);
        let four = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, codes), ones16);
        _mm256_storeu_si256(
            sums.as_mut_ptr().add(b * 8) as *mut __m256i,
            _mm256_slli_epi32::<7>(four),
        );
    }
}

/// `decode_scale` of eight scale bytes at a time with one range: the same float32
/// steps (the clamp as `max(0, v)` then `min(MAX, v)`, which keep NaN and -0 as
/// `f32::clamp` does). The caller checks the CPU.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn decode_scales(
    codes: &[u8],
    range: f32,
    offset: f32,
    out: &mut [f32],
) -> usize {
    let n = codes.len().min(out.len()) / 8 * 8;
    let (r, o) = (_mm256_set1_ps(range), _mm256_set1_ps(offset));
    let (mid, div) = (_mm256_set1_ps(128.0), _mm256_set1_ps(127.0));
    let (zero, max) = (_mm256_setzero_ps(), _mm256_set1_ps(f32::MAX));
    let mut i = 0;
    while i < n {
        let c = _mm_loadl_epi64(codes.as_ptr().add(i) as *const __m128i);
        let q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c));
        let v = _mm256_add_ps(
            o,
            _mm256_div_ps(_mm256_mul_ps(r, _mm256_sub_ps(q, mid)), div),
        );
        let v = _mm256_min_ps(max, _mm256_max_ps(zero, v));
        _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
        i += 8;
    }
    n
}
