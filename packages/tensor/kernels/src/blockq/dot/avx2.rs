//! The AVX2, FMA and F16C versions of the block-layout row products (see
//! [`super`]): the same operations in the same order as the portable ones.

use std::arch::x86_64::*;

use crate::blockq::QK;

#[inline(always)]
unsafe fn half(p: *const u8) -> f32 {
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

#[inline(always)]
unsafe fn q8_block(row: &[u8], q: &[i8], s: &[f32], b: usize, acc: __m256) -> __m256 {
    let blk = row.as_ptr().add(b * 34);
    let w = _mm256_loadu_si256(blk.add(2) as *const __m256i);
    let x = _mm256_loadu_si256(q.as_ptr().add(b * QK) as *const __m256i);
    // |w| (as unsigned bytes: -128 reads 128) times x with w's sign.
    let aw = _mm256_sign_epi8(w, w);
    let sx = _mm256_sign_epi8(x, w);
    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
    let d = _mm256_set1_ps(half(blk) * *s.get_unchecked(b));
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc)
}

#[inline(always)]
unsafe fn q4_block(row: &[u8], q: &[i8], s: &[f32], sums: &[i32], b: usize, acc: __m256) -> __m256 {
    let blk = row.as_ptr().add(b * 18);
    let raw = _mm_loadu_si128(blk.add(2) as *const __m128i);
    let nibble = _mm_set1_epi8(15);
    let lo = _mm_and_si128(raw, nibble);
    let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), nibble);
    // Elements 0..15 (low nibbles) then 16..31 (high nibbles).
    let w = _mm256_set_m128i(hi, lo);
    let x = _mm256_loadu_si256(q.as_ptr().add(b * QK) as *const __m256i);
    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
    let off = _mm256_loadu_si256(sums.as_ptr().add(b * 8) as *const __m256i);
    let p = _mm256_sub_epi32(p, off);
    let d = _mm256_set1_ps(half(blk) * *s.get_unchecked(b));
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc)
}

// Blocks alternate between two accumulators (block b into set b % 2).

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_q8_0(row: &[u8], q: &[i8], s: &[f32]) -> f32 {
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut b = 0;
    while b + 2 <= s.len() {
        a0 = q8_block(row, q, s, b, a0);
        a1 = q8_block(row, q, s, b + 1, a1);
        b += 2;
    }
    if b < s.len() {
        a0 = q8_block(row, q, s, b, a0);
    }
    reduce(_mm256_add_ps(a0, a1))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_q4_0(row: &[u8], q: &[i8], s: &[f32], sums: &[i32]) -> f32 {
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut b = 0;
    while b + 2 <= s.len() {
        a0 = q4_block(row, q, s, sums, b, a0);
        a1 = q4_block(row, q, s, sums, b + 1, a1);
        b += 2;
    }
    if b < s.len() {
        a0 = q4_block(row, q, s, sums, b, a0);
    }
    reduce(_mm256_add_ps(a0, a1))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let body = x.len() / 32 * 32;
    let (w, xp) = (row.as_ptr(), x.as_ptr());
    let mut i = 0;
    while i < body {
        for (r, a) in acc.iter_mut().enumerate() {
            let e = i + 8 * r;
            let wv = _mm256_cvtph_ps(_mm_loadu_si128(w.add(2 * e) as *const __m128i));
            *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp.add(e)), *a);
        }
        i += 32;
    }
    let mut rest = 0.0f32;
    for (e, &v) in x.iter().enumerate().skip(body) {
        rest = half(w.add(2 * e)).mul_add(v, rest);
    }
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    reduce(v) + rest
}

/// `d_r * sb` for block `b` of each row (`stride` bytes a block): the
/// halves converted and multiplied four at a time (the same products).
#[inline(always)]
unsafe fn scales<const R: usize>(rows: &[&[u8]; R], stride: usize, b: usize, sb: f32) -> [f32; R] {
    let mut d = [0.0f32; R];
    let sb4 = _mm_set1_ps(sb);
    let mut r = 0;
    while r < R {
        let mut h = _mm_setzero_si128();
        for (j, row) in rows[r..R.min(r + 4)].iter().enumerate() {
            let v = std::ptr::read_unaligned(row.as_ptr().add(b * stride) as *const u16);
            h = match j {
                0 => _mm_insert_epi16(h, v as i32, 0),
                1 => _mm_insert_epi16(h, v as i32, 1),
                2 => _mm_insert_epi16(h, v as i32, 2),
                _ => _mm_insert_epi16(h, v as i32, 3),
            };
        }
        let p = _mm_mul_ps(_mm_cvtph_ps(h), sb4);
        let mut four = [0.0f32; 4];
        _mm_storeu_ps(four.as_mut_ptr(), p);
        let take = (R - r).min(4);
        d[r..r + take].copy_from_slice(&four[..take]);
        r += 4;
    }
    d
}

/// Block `b` of each row into `acc` (a set per row), the input loaded once.
#[inline(always)]
unsafe fn q8_blocks<const R: usize>(
    rows: &[&[u8]; R],
    q: &[i8],
    s: &[f32],
    b: usize,
    acc: &mut [__m256; R],
) {
    let x = _mm256_loadu_si256(q.as_ptr().add(b * QK) as *const __m256i);
    let d = scales(rows, 34, b, *s.get_unchecked(b));
    let ones = _mm256_set1_epi16(1);
    for r in 0..R {
        let blk = rows[r].as_ptr().add(b * 34);
        let w = _mm256_loadu_si256(blk.add(2) as *const __m256i);
        let aw = _mm256_sign_epi8(w, w);
        let sx = _mm256_sign_epi8(x, w);
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d[r]), acc[r]);
    }
}

#[inline(always)]
unsafe fn q4_blocks<const R: usize>(
    rows: &[&[u8]; R],
    q: &[i8],
    s: &[f32],
    sums: &[i32],
    b: usize,
    acc: &mut [__m256; R],
) {
    let x = _mm256_loadu_si256(q.as_ptr().add(b * QK) as *const __m256i);
    let off = _mm256_loadu_si256(sums.as_ptr().add(b * 8) as *const __m256i);
    let d = scales(rows, 18, b, *s.get_unchecked(b));
    let ones = _mm256_set1_epi16(1);
    let nibble = _mm256_set1_epi8(15);
    // Low nibbles in the low half (elements 0..15), high ones in the high half.
    let shift = _mm256_setr_epi64x(0, 0, 4, 4);
    for r in 0..R {
        let blk = rows[r].as_ptr().add(b * 18);
        let raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(blk.add(2) as *const __m128i));
        let w = _mm256_and_si256(_mm256_srlv_epi64(raw, shift), nibble);
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
        let p = _mm256_sub_epi32(p, off);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d[r]), acc[r]);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_rows_q8_0<const R: usize>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
) -> [f32; R] {
    let (mut a0, mut a1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
    let mut b = 0;
    while b + 2 <= s.len() {
        q8_blocks(&rows, q, s, b, &mut a0);
        q8_blocks(&rows, q, s, b + 1, &mut a1);
        b += 2;
    }
    if b < s.len() {
        q8_blocks(&rows, q, s, b, &mut a0);
    }
    // A loop, not a closure: a closure would not inherit the target features.
    let mut out = [0.0f32; R];
    for r in 0..R {
        out[r] = reduce(_mm256_add_ps(a0[r], a1[r]));
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_rows_q4_0<const R: usize>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    let (mut a0, mut a1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
    let mut b = 0;
    while b + 2 <= s.len() {
        q4_blocks(&rows, q, s, sums, b, &mut a0);
        q4_blocks(&rows, q, s, sums, b + 1, &mut a1);
        b += 2;
    }
    if b < s.len() {
        q4_blocks(&rows, q, s, sums, b, &mut a0);
    }
    // A loop, not a closure: a closure would not inherit the target features.
    let mut out = [0.0f32; R];
    for r in 0..R {
        out[r] = reduce(_mm256_add_ps(a0[r], a1[r]));
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_rows_f16<const R: usize>(rows: [&[u8]; R], x: &[f32]) -> [f32; R] {
    let mut acc = [[_mm256_setzero_ps(); 4]; R];
    let body = x.len() / 32 * 32;
    let xp = x.as_ptr();
    let mut i = 0;
    while i < body {
        for set in 0..4 {
            let e = i + 8 * set;
            let xv = _mm256_loadu_ps(xp.add(e));
            for (a, row) in acc.iter_mut().zip(&rows) {
                let p = row.as_ptr().add(2 * e) as *const __m128i;
                let wv = _mm256_cvtph_ps(_mm_loadu_si128(p));
                a[set] = _mm256_fmadd_ps(wv, xv, a[set]);
            }
        }
        i += 32;
    }
    std::array::from_fn(|r| {
        let mut rest = 0.0f32;
        for (e, &v) in x.iter().enumerate().skip(body) {
            rest = half(rows[r].as_ptr().add(2 * e)).mul_add(v, rest);
        }
        let a = &acc[r];
        let v = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
        reduce(v) + rest
    })
}
