//! One weight row of a block layout (see [`crate::blockq`]) dotted with one
//! input row, reading the blocks in place.
//!
//! Q8_0 and Q4_0 against an 8-bit input row: in block `b`, lane `j` (of eight)
//! is the exact integer dot product of elements `4j .. 4j + 4` of the weight
//! codes (Q4_0: `nibble - 8`) and the input codes; it is converted to float32
//! and fused-multiply-added with `d_b * s_b` (the weight's half scale as float32
//! times the input's scale) into accumulator lane `j` of set `b % 2`. F16:
//! element `i` below the last multiple of 32 goes to lane `i % 8` of set
//! `(i / 8) % 4` (fused multiply-adds), the rest to one more accumulator in
//! order. The sets are added lane by lane (F16: `(s0 + s1) + (s2 + s3)`), then
//! the eight lanes by halves (`v[j] + v[j + 4]`, then `+ [j + 2]`, then the
//! two), and F16's extra accumulator last. The AVX2 versions and the portable
//! ones perform the same operations in the same order, so every CPU gives the
//! same bits (NaN results are NaN, of unspecified sign and payload). The
//! functions that take several weight rows at once give each row exactly what
//! the one-row function gives it: they share the input's loads and scales and
//! convert the rows' half scales four at a time (the same products `d_b * s_b`).

use crate::blockq::QK;

/// An IEEE half (bits) as float32 (exact).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if mant == 0 {
            sign
        } else {
            // A subnormal half: mant * 2^-24, exact in float32.
            sign | (mant as f32 * (1.0 / 16_777_216.0)).to_bits()
        }
    } else if exp == 31 {
        sign | 0x7f80_0000 | (mant << 13)
    } else {
        sign | ((exp + 112) << 23) | (mant << 13)
    };
    f32::from_bits(bits)
}

#[inline(always)]
fn half_at(b: &[u8]) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
}

/// The eight lanes of `v` added by halves (the order `_mm256` reductions use).
#[inline(always)]
fn finish8(v: &[f32; 8]) -> f32 {
    let h4: [f32; 4] = std::array::from_fn(|j| v[j] + v[j + 4]);
    let h2 = [h4[0] + h4[2], h4[1] + h4[3]];
    h2[0] + h2[1]
}

#[inline(always)]
fn add8(a: &[f32; 8], b: &[f32; 8]) -> [f32; 8] {
    std::array::from_fn(|j| a[j] + b[j])
}

#[cfg(target_arch = "x86_64")]
fn fast() -> bool {
    use std::sync::OnceLock;
    static FLAG: OnceLock<bool> = OnceLock::new();
    *FLAG.get_or_init(|| crate::pool::has_avx2_fma() && std::is_x86_feature_detected!("f16c"))
}

/// Q8_0 row (`cols / 32` blocks of 34 bytes) with 8-bit input `q` and its block scales.
pub(crate) fn dot_q8_0(row: &[u8], q: &[i8], s: &[f32]) -> f32 {
    assert!(row.len() == s.len() * 34 && q.len() == s.len() * QK);
    #[cfg(target_arch = "x86_64")]
    if fast() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are checked above.
        return unsafe { avx2::dot_q8_0(row, q, s) };
    }
    dot_q8_0_portable(row, q, s)
}

/// Q4_0 row (`cols / 32` blocks of 18 bytes) with 8-bit input `q`, its block
/// scales, and eight times its sums per group of four.
pub(crate) fn dot_q4_0(row: &[u8], q: &[i8], s: &[f32], sums: &[i32]) -> f32 {
    assert!(row.len() == s.len() * 18 && q.len() == s.len() * QK && sums.len() == s.len() * 8);
    #[cfg(target_arch = "x86_64")]
    if fast() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are checked above.
        return unsafe { avx2::dot_q4_0(row, q, s, sums) };
    }
    dot_q4_0_portable(row, q, s, sums)
}

/// F16 row (`cols` halves) with float32 input `x`.
pub(crate) fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    assert!(row.len() == x.len() * 2);
    #[cfg(target_arch = "x86_64")]
    if fast() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are checked above.
        return unsafe { avx2::dot_f16(row, x) };
    }
    dot_f16_portable(row, x)
}

/// [`dot_q8_0`] of each of `R` weight rows with the same input (the same bits
/// per row, the input's loads and scales shared).
pub(crate) fn dot_rows_q8_0<const R: usize>(rows: [&[u8]; R], q: &[i8], s: &[f32]) -> [f32; R] {
    assert!(q.len() == s.len() * QK && rows.iter().all(|r| r.len() == s.len() * 34));
    #[cfg(target_arch = "x86_64")]
    if fast() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are checked above.
        return unsafe { avx2::dot_rows_q8_0(rows, q, s) };
    }
    rows.map(|row| dot_q8_0_portable(row, q, s))
}

/// [`dot_q4_0`] of each of `R` weight rows with the same input.
pub(crate) fn dot_rows_q4_0<const R: usize>(
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    assert!(q.len() == s.len() * QK && sums.len() == s.len() * 8);
    assert!(rows.iter().all(|r| r.len() == s.len() * 18));
    #[cfg(target_arch = "x86_64")]
    if fast() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are checked above.
        return unsafe { avx2::dot_rows_q4_0(rows, q, s, sums) };
    }
    rows.map(|row| dot_q4_0_portable(row, q, s, sums))
}

/// [`dot_f16`] of each of `R` weight rows with the same input.
pub(crate) fn dot_rows_f16<const R: usize>(rows: [&[u8]; R], x: &[f32]) -> [f32; R] {
    assert!(rows.iter().all(|r| r.len() == x.len() * 2));
    #[cfg(target_arch = "x86_64")]
    if fast() {
        // SAFETY: the CPU has AVX2, FMA and F16C; the lengths are checked above.
        return unsafe { avx2::dot_rows_f16(rows, x) };
    }
    rows.map(|row| dot_f16_portable(row, x))
}

fn dot_q8_0_portable(row: &[u8], q: &[i8], s: &[f32]) -> f32 {
    let mut sets = [[0.0f32; 8]; 2];
    for (b, (blk, xq)) in row.chunks_exact(34).zip(q.chunks_exact(QK)).enumerate() {
        let d = half_at(blk) * s[b];
        for (j, lane) in sets[b % 2].iter_mut().enumerate() {
            let p: i32 = (0..4)
                .map(|e| (blk[2 + 4 * j + e] as i8) as i32 * xq[4 * j + e] as i32)
                .sum();
            *lane = (p as f32).mul_add(d, *lane);
        }
    }
    finish8(&add8(&sets[0], &sets[1]))
}

fn dot_q4_0_portable(row: &[u8], q: &[i8], s: &[f32], sums: &[i32]) -> f32 {
    let mut sets = [[0.0f32; 8]; 2];
    for (b, (blk, xq)) in row.chunks_exact(18).zip(q.chunks_exact(QK)).enumerate() {
        let d = half_at(blk) * s[b];
        let nib = |e: usize| -> i32 {
            let byte = blk[2 + e % 16];
            (if e < 16 { byte & 15 } else { byte >> 4 }) as i32
        };
        for (j, lane) in sets[b % 2].iter_mut().enumerate() {
            let p: i32 = (0..4)
                .map(|e| nib(4 * j + e) * xq[4 * j + e] as i32)
                .sum::<i32>()
                - sums[b * 8 + j];
            *lane = (p as f32).mul_add(d, *lane);
        }
    }
    finish8(&add8(&sets[0], &sets[1]))
}

fn dot_f16_portable(row: &[u8], x: &[f32]) -> f32 {
    let mut sets = [[0.0f32; 8]; 4];
    let body = x.len() / 32 * 32;
    for (i, &v) in x[..body].iter().enumerate() {
        let w = half_at(&row[2 * i..]);
        let lane = &mut sets[(i / 8) % 4][i % 8];
        *lane = w.mul_add(v, *lane);
    }
    let mut rest = 0.0f32;
    for (i, &v) in x.iter().enumerate().skip(body) {
        rest = half_at(&row[2 * i..]).mul_add(v, rest);
    }
    let v = add8(&add8(&sets[0], &sets[1]), &add8(&sets[2], &sets[3]));
    finish8(&v) + rest
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::QK;
    use std::arch::x86_64::*;

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
    unsafe fn q4_block(
        row: &[u8],
        q: &[i8],
        s: &[f32],
        sums: &[i32],
        b: usize,
        acc: __m256,
    ) -> __m256 {
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
    unsafe fn scales<const R: usize>(
        rows: &[&[u8]; R],
        stride: usize,
        b: usize,
        sb: f32,
    ) -> [f32; R] {
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
        std::array::from_fn(|r| reduce(_mm256_add_ps(a0[r], a1[r])))
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
        std::array::from_fn(|r| reduce(_mm256_add_ps(a0[r], a1[r])))
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blockq::quantize_rows;

    #[test]
    fn halves_convert_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn the_fast_versions_match_the_portable_ones_bit_for_bit() {
        let cols = 32 * 7;
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 29 % 41) as f32 - 20.0) / 7.0)
            .collect();
        let a = quantize_rows(&x, true);
        let q8: Vec<u8> = (0..7)
            .flat_map(|b| {
                let mut blk = vec![0x00, 0x30 + b as u8];
                blk.extend((0..32).map(|j| ((b * 53 + j * 97) % 256) as u8));
                blk
            })
            .collect();
        let q4: Vec<u8> = (0..7)
            .flat_map(|b| {
                let mut blk = vec![0x66, 0x2c + b as u8];
                blk.extend((0..16).map(|j| ((b * 71 + j * 37) % 256) as u8));
                blk
            })
            .collect();
        let f16: Vec<u8> = (0..cols + 5)
            .flat_map(|i| (0x3000 + ((i * 977) % 0x1800) as u16).to_le_bytes())
            .collect();
        let y: Vec<f32> = (0..cols + 5).map(|i| (i % 9) as f32 - 4.0).collect();
        let got = [
            dot_q8_0(&q8, &a.q, &a.scales),
            dot_q4_0(&q4, &a.q, &a.scales, &a.sums),
            dot_f16(&f16, &y),
        ];
        let want = [
            dot_q8_0_portable(&q8, &a.q, &a.scales),
            dot_q4_0_portable(&q4, &a.q, &a.scales, &a.sums),
            dot_f16_portable(&f16, &y),
        ];
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.to_bits(), w.to_bits(), "{g} vs {w}");
        }
    }

    /// Patterned bytes (an LCG), with the block scales of Q8_0 / Q4_0 rows set
    /// from `scale(row, block)`.
    fn rows_of(
        stride: usize,
        blocks: usize,
        n: usize,
        scale: impl Fn(usize, usize) -> u16,
    ) -> Vec<Vec<u8>> {
        let mut g = 0x2545_f491_u64;
        (0..n)
            .map(|r| {
                let mut v: Vec<u8> = (0..stride * blocks)
                    .map(|_| {
                        g = g
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        (g >> 56) as u8
                    })
                    .collect();
                if stride != 2 {
                    for b in 0..blocks {
                        v[b * stride..b * stride + 2].copy_from_slice(&scale(r, b).to_le_bytes());
                    }
                } else {
                    // F16 elements: keep the exponents moderate, some NaN / inf.
                    for h in v.chunks_exact_mut(2) {
                        h[1] = if h[0] == 7 {
                            0x7c | (h[1] & 0x80)
                        } else {
                            h[1] & 0xbf
                        };
                    }
                }
                v
            })
            .collect()
    }

    /// Inputs of `cols` elements: plain, with a NaN, with an infinity, all zero.
    fn inputs(cols: usize) -> Vec<Vec<f32>> {
        let plain: Vec<f32> = (0..cols)
            .map(|i| ((i * 29 % 41) as f32 - 20.0) / 7.0 * if i % 5 == 0 { 100.0 } else { 1.0 })
            .collect();
        let mut nan = plain.clone();
        nan[cols / 2] = f32::NAN;
        let mut inf = plain.clone();
        inf[cols - 1] = f32::INFINITY;
        vec![plain, nan, inf, vec![0.0; cols]]
    }

    fn scale_pattern(r: usize, b: usize) -> u16 {
        match (r * 7 + b * 3) % 23 {
            0 => 0x7c00, // inf
            1 => 0xfe00, // NaN
            2 => 0x0000,
            3 => 0x0003, // subnormal
            v => (0x2000 + v as u16 * 0x155) | ((b as u16 & 1) << 15),
        }
    }

    /// The same bits, or both NaN (a NaN's sign and payload are not kept: the
    /// compiler may swap the operands of a product or a sum).
    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    fn check_rows<const R: usize>() {
        for blocks in [1usize, 2, 3, 7, 12, 48, 49] {
            let cols = blocks * QK;
            let q8 = rows_of(34, blocks, R, scale_pattern);
            let q4 = rows_of(18, blocks, R, |r, b| scale_pattern(r + 5, b));
            for x in inputs(cols) {
                let a = quantize_rows(&x, true);
                let (q, s, sums) = (&a.q[..], &a.scales[..], &a.sums[..]);
                let got8 = dot_rows_q8_0::<R>(std::array::from_fn(|r| &q8[r][..]), q, s);
                let got4 = dot_rows_q4_0::<R>(std::array::from_fn(|r| &q4[r][..]), q, s, sums);
                for r in 0..R {
                    let (w8, w4) = (dot_q8_0(&q8[r], q, s), dot_q4_0(&q4[r], q, s, sums));
                    assert!(same(got8[r], w8), "q8_0 {blocks} {r}");
                    assert!(same(got4[r], w4), "q4_0 {blocks} {r}");
                    let p8 = dot_q8_0_portable(&q8[r], q, s);
                    let p4 = dot_q4_0_portable(&q4[r], q, s, sums);
                    assert!(same(w8, p8), "q8_0 {blocks} {r}: {w8} vs {p8}");
                    assert!(same(w4, p4), "q4_0 {blocks} {r}: {w4} vs {p4}");
                }
            }
        }
        for cols in [1usize, 7, 32, 33, 95, 384, 1541] {
            let f16 = rows_of(2, cols, R, scale_pattern);
            for x in inputs(cols) {
                let got = dot_rows_f16::<R>(std::array::from_fn(|r| &f16[r][..]), &x);
                for r in 0..R {
                    let (want, p) = (dot_f16(&f16[r], &x), dot_f16_portable(&f16[r], &x));
                    assert!(same(got[r], want), "f16 {cols} {r}");
                    assert!(same(want, p), "f16 {cols} {r}: {want} vs {p}");
                }
            }
        }
    }

    #[test]
    fn several_rows_at_once_give_each_row_the_bits_of_one_at_a_time() {
        check_rows::<1>();
        check_rows::<2>();
        check_rows::<4>();
        check_rows::<8>();
    }
}
