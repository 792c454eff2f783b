//! The AVX-512 versions of the F16 row products, with the bits of the AVX2 ones:
//! of each 32 elements, the first 16 (sets 0 and 1 of [`super`]'s order) go to
//! one 512-bit accumulator and the next 16 (sets 2 and 3) to another, so every
//! element keeps its lane and chain; the halves of each register are then added
//! (`s0 + s1`, `s2 + s3`), and the rest is the AVX2 reduction.

// The AVX-512 intrinsics are stable from Rust 1.89 (the crate's MSRV is older).

use std::arch::x86_64::*;

#[inline(always)]
pub(super) unsafe fn half(p: *const u8) -> f32 {
    let h = std::ptr::read_unaligned(p as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// `finish8` of the lanes of `v`: halves, then pairs, then the two.
#[inline(always)]
unsafe fn reduce(v: __m256) -> f32 {
    let h4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)))
}

/// `(s0 + s1) + (s2 + s3)` from the two accumulators, reduced.
#[inline(always)]
pub(super) unsafe fn finish(a: __m512, b: __m512) -> f32 {
    let lo = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps::<1>(a));
    let hi = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps::<1>(b));
    reduce(_mm256_add_ps(lo, hi))
}

/// Sixteen halves at `p` as float32.
#[inline(always)]
pub(super) unsafe fn load16(p: *const u8) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

/// Elements ahead at which each weight row is prefetched.
const AHEAD: usize = 1024;

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq,avx512vl")]
pub(super) unsafe fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    dot_rows_f16([row], x)[0]
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq,avx512vl")]
pub(super) unsafe fn dot_rows_f16<const R: usize>(rows: [&[u8]; R], x: &[f32]) -> [f32; R] {
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let body = x.len() / 32 * 32;
    let xp = x.as_ptr();
    let mut i = 0;
    while i < body {
        let xv = [_mm512_loadu_ps(xp.add(i)), _mm512_loadu_ps(xp.add(i + 16))];
        for (a, row) in acc.iter_mut().zip(&rows) {
            let p = row.as_ptr().add(2 * i);
            // A hint only: a prefetch past the allocation does not fault.
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(2 * AHEAD) as *const i8);
            a[0] = _mm512_fmadd_ps(load16(p), xv[0], a[0]);
            a[1] = _mm512_fmadd_ps(load16(p.add(32)), xv[1], a[1]);
        }
        i += 32;
    }
    std::array::from_fn(|r| {
        let mut rest = 0.0f32;
        for (e, &v) in x.iter().enumerate().skip(body) {
            rest = half(rows[r].as_ptr().add(2 * e)).mul_add(v, rest);
        }
        finish(acc[r][0], acc[r][1]) + rest
    })
}
