//! The NF4 linear for a single input row (the decode step's shape): each output
//! is a dot product read straight from the packed codes, four bits a weight,
//! with no float32 tile in between.
//!
//! A weight element decodes to the same float32 as [`Nf4Weight::dequantize_into`]
//! gives (the block's codebook scaled once, then looked up). Row `r`'s dot
//! product runs over its flat elements in groups of eight that start on a code
//! byte and stay inside one block. Lane `j` of sixteen accumulators takes element
//! `j` of every even group, lane `8 + j` element `j` of every odd group (fused
//! multiply-adds); the other elements (an odd start, a block's or the row's
//! tail) go to one more accumulator in index order; the sixteen lanes are then
//! added in lane order, and that one last. The AVX2 version and the portable
//! one perform the same operations in the same order, so every CPU and every
//! thread count gives the same bits.

use crate::nf4::{Nf4Weight, CODEBOOK};
use crate::pool::{parallel, Shared};

/// Output rows per piece handed to the team.
const ROWS: usize = 16;

/// `out [rows] = dequant(w) @ x (+ bias)` for one input row `x [cols]`.
pub(crate) fn linear_vector(w: &Nf4Weight, x: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    let dst = Shared::new(out);
    let piece = |p: usize| {
        let first = p * ROWS;
        for r in first..(first + ROWS).min(n) {
            let mut y = row_dot(w, r * k, x);
            if let Some(b) = bias {
                y += b[r];
            }
            // SAFETY: row r of `out` (n elements) belongs to this piece alone.
            unsafe { *dst.at(r) = y };
        }
    };
    let pieces = n.div_ceil(ROWS);
    if parallel(n * k, 1 << 17) {
        crate::team::team().run(pieces, &piece);
    } else {
        (0..pieces).for_each(piece);
    }
}

/// The dot product of `x` with the weight's flat elements `start .. start + x.len()`.
pub(crate) fn row_dot(w: &Nf4Weight, start: usize, x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { row_dot_avx2(w, start, x) };
    }
    row_dot_portable(w, start, x)
}

/// The codebook scaled by block `b`'s scale, as `dequantize_into` builds it.
#[inline(always)]
fn scaled_codebook(w: &Nf4Weight, b: usize) -> [f32; 16] {
    let s = w.scale(b);
    std::array::from_fn(|c| CODEBOOK[c] * s)
}

#[inline(always)]
fn code(codes: &[u8], i: usize) -> usize {
    ((codes[i / 2] >> ((i % 2) * 4)) & 15) as usize
}

#[inline(always)]
fn finish(lanes: &[f32; 16], rest: f32) -> f32 {
    let mut sum = 0.0f32;
    for &l in lanes {
        sum += l;
    }
    sum + rest
}

// Both versions walk the row the same way: per block, a lone element before a
// code byte boundary, then groups of eight, then the block's (or row's) tail.

fn row_dot_portable(w: &Nf4Weight, start: usize, x: &[f32]) -> f32 {
    let (codes, end) = (w.codes, start + x.len());
    let mut lanes = [0.0f32; 16];
    let mut rest = 0.0f32;
    let mut group = 0usize;
    let mut i = start;
    while i < end {
        let b = i >> w.block.trailing_zeros(); // a power of two (checked)
        let stop = ((b + 1) << w.block.trailing_zeros()).min(end);
        let lut = scaled_codebook(w, b);
        if i % 2 == 1 {
            rest = lut[code(codes, i)].mul_add(x[i - start], rest);
            i += 1;
        }
        while i + 8 <= stop {
            let half = &mut lanes[(group % 2) * 8..(group % 2) * 8 + 8];
            for (j, lane) in half.iter_mut().enumerate() {
                *lane = lut[code(codes, i + j)].mul_add(x[i - start + j], *lane);
            }
            group += 1;
            i += 8;
        }
        while i < stop {
            rest = lut[code(codes, i)].mul_add(x[i - start], rest);
            i += 1;
        }
    }
    finish(&lanes, rest)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_dot_avx2(w: &Nf4Weight, start: usize, x: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let (codes, end) = (w.codes, start + x.len());
    let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    let fifteen = _mm256_set1_epi32(15);
    // `next` takes the next group, `other` the one after (swapped every group).
    let (mut next, mut other) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut rest = 0.0f32;
    let mut group = 0usize;
    let mut i = start;
    while i < end {
        let b = i >> w.block.trailing_zeros(); // a power of two (checked)
        let stop = ((b + 1) << w.block.trailing_zeros()).min(end);
        let scale = w.scale(b);
        if i % 2 == 1 {
            rest = (CODEBOOK[code(codes, i)] * scale).mul_add(x[i - start], rest);
            i += 1;
        }
        // The scaled codebook in two registers (the products `scaled_codebook` makes).
        let s8 = _mm256_set1_ps(scale);
        let lo = _mm256_mul_ps(_mm256_loadu_ps(CODEBOOK.as_ptr()), s8);
        let hi = _mm256_mul_ps(_mm256_loadu_ps(CODEBOOK.as_ptr().add(8)), s8);
        // The groups below read code bytes up to (stop - 1) / 2 and x up to stop - start.
        assert!(stop.div_ceil(2) <= codes.len() && stop - start <= x.len());
        if i + 32 <= stop {
            // Thirty-two weights a step: byte lookups (16-entry shuffles) of the
            // scaled codebook's four byte planes, reassembled into floats.
            let planes = byte_planes(lo, hi);
            let nibble = _mm_set1_epi8(15);
            while i + 32 <= stop {
                // SAFETY: i is even and i + 32 <= stop: bytes i / 2 .. i / 2 + 16 exist.
                let c = _mm_loadu_si128(codes.as_ptr().add(i / 2) as *const __m128i);
                let low = _mm_and_si128(c, nibble);
                let high = _mm_and_si128(_mm_srli_epi16(c, 4), nibble);
                // Element order: byte b's low nibble, then its high nibble.
                for idx in [_mm_unpacklo_epi8(low, high), _mm_unpackhi_epi8(low, high)] {
                    let p0 = _mm_shuffle_epi8(planes[0], idx);
                    let p1 = _mm_shuffle_epi8(planes[1], idx);
                    let p2 = _mm_shuffle_epi8(planes[2], idx);
                    let p3 = _mm_shuffle_epi8(planes[3], idx);
                    let (a, b) = (_mm_unpacklo_epi8(p0, p1), _mm_unpackhi_epi8(p0, p1));
                    let (c2, d) = (_mm_unpacklo_epi8(p2, p3), _mm_unpackhi_epi8(p2, p3));
                    let first =
                        _mm256_set_m128i(_mm_unpackhi_epi16(a, c2), _mm_unpacklo_epi16(a, c2));
                    let second =
                        _mm256_set_m128i(_mm_unpackhi_epi16(b, d), _mm_unpacklo_epi16(b, d));
                    for value in [first, second] {
                        // SAFETY: i + 8 - start <= x.len() (checked above).
                        let xv = _mm256_loadu_ps(x.as_ptr().add(i - start));
                        next = _mm256_fmadd_ps(_mm256_castsi256_ps(value), xv, next);
                        std::mem::swap(&mut next, &mut other);
                        group += 1;
                        i += 8;
                    }
                }
            }
        }
        while i + 8 <= stop {
            // Elements i .. i + 8 are the nibbles of the four bytes from i / 2,
            // low nibble first: lane j shifts the little-endian word by 4 j.
            // SAFETY: i is even and i + 8 <= stop, so bytes i / 2 .. i / 2 + 4 exist.
            let word = std::ptr::read_unaligned(codes.as_ptr().add(i / 2) as *const i32);
            let idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word), shifts), fifteen);
            // Codes 0-7 from `lo`, 8-15 from `hi` (bit 3, moved to the sign bit).
            let value = _mm256_blendv_ps(
                _mm256_permutevar8x32_ps(lo, idx),
                _mm256_permutevar8x32_ps(hi, idx),
                _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)),
            );
            // SAFETY: i + 8 - start <= x.len() (checked above).
            let xv = _mm256_loadu_ps(x.as_ptr().add(i - start));
            next = _mm256_fmadd_ps(value, xv, next);
            std::mem::swap(&mut next, &mut other);
            group += 1;
            i += 8;
        }
        while i < stop {
            rest = (CODEBOOK[code(codes, i)] * scale).mul_add(x[i - start], rest);
            i += 1;
        }
    }
    let mut lanes = [0.0f32; 16];
    let (even, odd) = if group % 2 == 0 {
        (next, other)
    } else {
        (other, next)
    };
    _mm256_storeu_ps(lanes.as_mut_ptr(), even);
    _mm256_storeu_ps(lanes.as_mut_ptr().add(8), odd);
    finish(&lanes, rest)
}

/// Byte `k` of each of the 16 floats `lo` (codes 0-7) and `hi` (codes 8-15), as
/// four 16-byte tables for `_mm_shuffle_epi8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn byte_planes(
    lo: std::arch::x86_64::__m256,
    hi: std::arch::x86_64::__m256,
) -> [std::arch::x86_64::__m128i; 4] {
    use std::arch::x86_64::*;
    // Within each group of four floats, gather byte 0 of each, then byte 1, ...
    let gather = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    let q = [
        _mm256_castsi256_si128(_mm256_castps_si256(lo)),
        _mm256_extracti128_si256(_mm256_castps_si256(lo), 1),
        _mm256_castsi256_si128(_mm256_castps_si256(hi)),
        _mm256_extracti128_si256(_mm256_castps_si256(hi), 1),
    ]
    .map(|v| _mm_shuffle_epi8(v, gather));
    // Transpose the 4 x 4 words: word k of q[r] is byte k of floats 4r .. 4r + 4.
    let t0 = _mm_unpacklo_epi32(q[0], q[1]);
    let t1 = _mm_unpacklo_epi32(q[2], q[3]);
    let t2 = _mm_unpackhi_epi32(q[0], q[1]);
    let t3 = _mm_unpackhi_epi32(q[2], q[3]);
    [
        _mm_unpacklo_epi64(t0, t1),
        _mm_unpackhi_epi64(t0, t1),
        _mm_unpacklo_epi64(t2, t3),
        _mm_unpackhi_epi64(t2, t3),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nf4::Scales;

    fn weight(rows: usize, cols: usize, block: usize) -> (Vec<u8>, Vec<f32>) {
        let n = rows * cols;
        let codes = (0..n.div_ceil(2)).map(|i| (i * 37 % 251) as u8).collect();
        let scales = (0..n.div_ceil(block))
            .map(|b| 0.5 + (b % 7) as f32 * 0.1)
            .collect();
        (codes, scales)
    }

    #[test]
    fn matches_the_dequantized_product_and_both_versions_agree() {
        // Odd column counts put row starts on a high nibble and tails inside blocks.
        for &(rows, cols, block) in &[(70, 384, 64), (33, 45, 32), (5, 1, 32), (17, 200, 128)] {
            let (codes, scales) = weight(rows, cols, block);
            let w = Nf4Weight {
                codes: &codes,
                scales: Scales::Plain(&scales),
                rows,
                cols,
                block,
            };
            let x: Vec<f32> = (0..cols)
                .map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0)
                .collect();
            let bias: Vec<f32> = (0..rows).map(|r| r as f32 * 0.01).collect();
            let mut dense = vec![0.0f32; rows * cols];
            w.dequantize_into(0, &mut dense);
            let mut out = vec![0.0f32; rows];
            linear_vector(&w, &x, Some(&bias), &mut out);
            for r in 0..rows {
                let expected: f64 = (0..cols)
                    .map(|c| dense[r * cols + c] as f64 * x[c] as f64)
                    .sum::<f64>()
                    + bias[r] as f64;
                assert!((out[r] as f64 - expected).abs() < 1e-4, "row {r}");
                let portable = row_dot_portable(&w, r * cols, &x) + bias[r];
                assert_eq!(out[r].to_bits(), portable.to_bits(), "row {r}");
            }
        }
    }
}
