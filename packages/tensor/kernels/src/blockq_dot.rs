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
//! same bits.

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
}
