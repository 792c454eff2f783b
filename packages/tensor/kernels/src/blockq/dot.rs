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
use crate::isa::Isa;

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

/// `x` rounded to the nearest IEEE half (ties to even), as bits: what F16C's
/// `vcvtps2ph` and ggml's `GGML_FP32_TO_FP16` give. Beyond the half range the
/// result is infinite; NaN stays NaN (a quiet NaN of `x`'s sign).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        return sign | 0x7e00;
    }
    if abs >= 0x477f_f000 {
        // 65520 and above (and infinity): past the largest half, 65504, by half a step.
        return sign | 0x7c00;
    }
    if abs < 0x3880_0000 {
        // Below 2^-14: a subnormal half, `m * 2^-24`; the scaling is exact, the
        // rounding to an integer is the only one (1024 is the smallest normal).
        let m = (f32::from_bits(abs) * 16_777_216.0).round_ties_even() as u16;
        return sign | m;
    }
    let exp = (abs >> 23) - 112;
    let mant = abs & 0x7f_ffff;
    let mut h = (exp << 10 | mant >> 13) as u16;
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        h += 1; // a carry into the exponent is the next binade's first half
    }
    sign | h
}

/// `x` rounded to a half and back (the value ggml stores as a block scale).
#[inline(always)]
pub fn round_to_half(x: f32) -> f32 {
    f16_to_f32(f32_to_f16(x))
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
    crate::pool::has_avx2_fma()
}

/// Whether the AVX-512 F16 products run (the same bits as the AVX2 ones).
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    crate::isa::current() >= crate::isa::Isa::Avx512
}

/// Q8_0 row (`cols / 32` blocks of 34 bytes) with 8-bit input `q` and its block scales.
pub(crate) fn dot_q8_0(row: &[u8], q: &[i8], s: &[f32]) -> f32 {
    assert!(row.len() == s.len() * 34 && q.len() == s.len() * QK);
    rows_q8_0_at(crate::isa::current(), [row], q, s)[0]
}

/// Q4_0 row (`cols / 32` blocks of 18 bytes) with 8-bit input `q`, its block
/// scales, and eight times its sums per group of four.
pub(crate) fn dot_q4_0(row: &[u8], q: &[i8], s: &[f32], sums: &[i32]) -> f32 {
    assert!(row.len() == s.len() * 18 && q.len() == s.len() * QK && sums.len() == s.len() * 8);
    rows_q4_0_at(crate::isa::current(), [row], q, s, sums)[0]
}

/// F16 row (`cols` halves) with float32 input `x`.
pub(crate) fn dot_f16(row: &[u8], x: &[f32]) -> f32 {
    assert!(row.len() == x.len() * 2);
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: the CPU has AVX-512 F, DQ, VL and AVX2, FMA, F16C; lengths checked above.
        return unsafe { avx512_f16::dot_f16(row, x) };
    }
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
    rows_q8_0_at(crate::isa::current(), rows, q, s)
}

/// [`dot_rows_q8_0`] on the path of level `isa` (at most the detected one).
pub(crate) fn rows_q8_0_at<const R: usize>(
    isa: Isa,
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
) -> [f32; R] {
    assert!(q.len() == s.len() * QK && rows.iter().all(|r| r.len() == s.len() * 34));
    assert!(isa <= crate::isa::detected());
    #[cfg(target_arch = "x86_64")]
    match (isa, R) {
        // SAFETY (each arm): the CPU has the level's features; the lengths are checked above.
        (Isa::Avx512Vnni, _) => return unsafe { avx512::dot_rows_q8_0_vnni(rows, q, s) },
        (Isa::Avx512, _) => return unsafe { avx512::dot_rows_q8_0_bw(rows, q, s) },
        (Isa::Avx2, 1) => return [unsafe { avx2::dot_q8_0(rows[0], q, s) }; R],
        (Isa::Avx2, _) => return unsafe { avx2::dot_rows_q8_0(rows, q, s) },
        (Isa::Portable, _) => {}
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
    rows_q4_0_at(crate::isa::current(), rows, q, s, sums)
}

/// [`dot_rows_q4_0`] on the path of level `isa` (at most the detected one).
pub(crate) fn rows_q4_0_at<const R: usize>(
    isa: Isa,
    rows: [&[u8]; R],
    q: &[i8],
    s: &[f32],
    sums: &[i32],
) -> [f32; R] {
    assert!(q.len() == s.len() * QK && sums.len() == s.len() * 8);
    assert!(rows.iter().all(|r| r.len() == s.len() * 18));
    assert!(isa <= crate::isa::detected());
    #[cfg(target_arch = "x86_64")]
    match (isa, R) {
        // SAFETY (each arm): the CPU has the level's features; the lengths are checked above.
        (Isa::Avx512Vnni, _) => return unsafe { avx512::dot_rows_q4_0_vnni(rows, q, s, sums) },
        (Isa::Avx512, _) => return unsafe { avx512::dot_rows_q4_0_bw(rows, q, s, sums) },
        (Isa::Avx2, 1) => return [unsafe { avx2::dot_q4_0(rows[0], q, s, sums) }; R],
        (Isa::Avx2, _) => return unsafe { avx2::dot_rows_q4_0(rows, q, s, sums) },
        (Isa::Portable, _) => {}
    }
    rows.map(|row| dot_q4_0_portable(row, q, s, sums))
}

/// [`dot_f16`] of each of `R` weight rows with the same input.
pub(crate) fn dot_rows_f16<const R: usize>(rows: [&[u8]; R], x: &[f32]) -> [f32; R] {
    assert!(rows.iter().all(|r| r.len() == x.len() * 2));
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: the CPU has AVX-512 F, DQ, VL and AVX2, FMA, F16C; lengths checked above.
        return unsafe { avx512_f16::dot_rows_f16(rows, x) };
    }
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
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_f16;
pub mod f16_tiles;

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
    fn floats_round_to_the_nearest_half_ties_to_even() {
        let h = |x: f32| f32_to_f16(x);
        assert_eq!(h(1.0), 0x3c00);
        assert_eq!(h(-2.0), 0xc000);
        assert_eq!(h(65504.0), 0x7bff);
        assert_eq!(h(65519.996), 0x7bff);
        assert_eq!(h(65520.0), 0x7c00);
        assert_eq!(h(f32::INFINITY), 0x7c00);
        assert_eq!(h(f32::NEG_INFINITY), 0xfc00);
        assert!(f16_to_f32(h(f32::NAN)).is_nan());
        assert_eq!(h(-0.0), 0x8000);
        assert_eq!(h(2f32.powi(-24)), 0x0001);
        assert_eq!(h(2f32.powi(-25)), 0x0000); // a tie: to the even 0
        assert_eq!(h(3.0 * 2f32.powi(-25)), 0x0002); // a tie: to the even 2
        assert_eq!(h(2f32.powi(-26)), 0x0000);
        assert_eq!(h(1e-30), 0x0000);
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to the even 1.
        assert_eq!(h(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(h(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(h(1.0 + 2f32.powi(-11) + 2f32.powi(-20)), 0x3c01);
        // The largest subnormal rounds up into the smallest normal.
        assert_eq!(h(2f32.powi(-14) - 2f32.powi(-26)), 0x0400);
        // Every half converts back to itself.
        for bits in 0..=0xffffu16 {
            let v = f16_to_f32(bits);
            if !v.is_nan() {
                assert_eq!(h(v), bits, "{bits:#06x}");
            }
        }
        // Against F16C where the CPU has it, over a sweep of float32 bit patterns.
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("f16c") {
            let mut bits = 0u32;
            while bits < u32::MAX - 4099 {
                let x = f32::from_bits(bits);
                // SAFETY: the CPU has F16C.
                let want = unsafe { f16c(x) };
                if !x.is_nan() {
                    assert_eq!(h(x), want, "{x:e}");
                }
                bits += 4099;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "f16c")]
    unsafe fn f16c(x: f32) -> u16 {
        use std::arch::x86_64::*;
        let v = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set1_ps(x));
        _mm_extract_epi16::<0>(v) as u16
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

    /// The levels this machine can run.
    fn levels() -> Vec<Isa> {
        Isa::ALL
            .into_iter()
            .filter(|&i| i <= crate::isa::detected())
            .collect()
    }

    fn check_levels<const R: usize>() {
        for blocks in [1usize, 2, 3, 5, 12, 48, 49] {
            let q8 = rows_of(34, blocks, R, scale_pattern);
            let q4 = rows_of(18, blocks, R, |r, b| scale_pattern(r + 3, b));
            for x in inputs(blocks * QK) {
                let a = quantize_rows(&x, true);
                let (q, s, sums) = (&a.q[..], &a.scales[..], &a.sums[..]);
                let rows8: [&[u8]; R] = std::array::from_fn(|r| &q8[r][..]);
                let rows4: [&[u8]; R] = std::array::from_fn(|r| &q4[r][..]);
                for isa in levels() {
                    let got8 = rows_q8_0_at(isa, rows8, q, s);
                    let got4 = rows_q4_0_at(isa, rows4, q, s, sums);
                    for r in 0..R {
                        let p8 = dot_q8_0_portable(&q8[r], q, s);
                        let p4 = dot_q4_0_portable(&q4[r], q, s, sums);
                        let one8 = rows_q8_0_at(isa, [&q8[r][..]], q, s)[0];
                        let one4 = rows_q4_0_at(isa, [&q4[r][..]], q, s, sums)[0];
                        let at = format!("{} {blocks} blocks, row {r} of {R}", isa.name());
                        assert!(same(got8[r], p8), "q8_0 {at}: {} vs {p8}", got8[r]);
                        assert!(same(got4[r], p4), "q4_0 {at}: {} vs {p4}", got4[r]);
                        assert!(same(one8, p8) && same(one4, p4), "one row, {at}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_vector_level_gives_the_portable_integer_products_bit_for_bit() {
        // Whatever the machine, at least the portable level runs; the rest are
        // the levels it has (see `crate::isa::detected`).
        check_levels::<1>();
        check_levels::<3>();
        check_levels::<4>();
        check_levels::<8>();
    }

    #[test]
    fn extreme_codes_stay_exact_at_every_level() {
        // Q8_0 codes of -128 and 127 against inputs of -127 and 127 (the largest
        // pair sums), Q4_0 nibbles 0 and 15: no 16-bit pair sum saturates.
        let blocks = 5;
        let x: Vec<f32> = (0..blocks * QK)
            .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        let a = quantize_rows(&x, true);
        let one = super::super::test_weights::half(1.0);
        let mut q8 = Vec::new();
        let mut q4 = Vec::new();
        for b in 0..blocks {
            q8.extend(one);
            q8.extend((0..32).map(|j| if (j + b) % 3 == 0 { 0x80u8 } else { 0x7f }));
            q4.extend(one);
            q4.extend((0..16).map(|j| if (j + b) % 2 == 0 { 0x0fu8 } else { 0xf0 }));
        }
        let (q, s, sums) = (&a.q[..], &a.scales[..], &a.sums[..]);
        for isa in levels() {
            let p8 = dot_q8_0_portable(&q8, q, s);
            let p4 = dot_q4_0_portable(&q4, q, s, sums);
            let name = isa.name();
            assert_eq!(rows_q8_0_at(isa, [&q8[..]; 2], q, s), [p8; 2], "{name}");
            let got4 = rows_q4_0_at(isa, [&q4[..]; 2], q, s, sums);
            assert_eq!(got4, [p4; 2], "{name}");
        }
    }

    /// The AVX-512 F16 products give the portable (and AVX2) bits, at every tail length.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx512_f16_products_give_the_portable_bits() {
        use crate::isa::{detected, Isa};
        if detected() < Isa::Avx512 {
            return;
        }
        for cols in [1usize, 31, 32, 33, 64, 100, 768, 1030] {
            let rows: Vec<Vec<u8>> = (0..3)
                .map(|r| {
                    (0..cols)
                        .flat_map(|i| {
                            (0x2c00 + ((i * 977 + r * 131) % 0x2000) as u16).to_le_bytes()
                        })
                        .collect()
                })
                .collect();
            let x: Vec<f32> = (0..cols)
                .map(|i| ((i * 29 % 41) as f32 - 20.0) / 7.0)
                .collect();
            let want: Vec<u32> = rows
                .iter()
                .map(|r| dot_f16_portable(r, &x).to_bits())
                .collect();
            let refs = [&rows[0][..], &rows[1][..], &rows[2][..]];
            // SAFETY: the CPU has AVX-512 (checked above); the lengths match.
            let (one, three, narrow) = unsafe {
                (
                    avx512_f16::dot_f16(refs[0], &x),
                    avx512_f16::dot_rows_f16(refs, &x),
                    avx2::dot_rows_f16(refs, &x),
                )
            };
            assert_eq!(one.to_bits(), want[0], "cols {cols}");
            assert_eq!(three.map(f32::to_bits).to_vec(), want, "cols {cols}");
            assert_eq!(narrow.map(f32::to_bits).to_vec(), want, "cols {cols}");
        }
    }
}
