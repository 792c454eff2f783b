//! The NF4 one-row kernel as it was before the several-row kernels (a fixed
//! baseline for the benchmark).
use riftco_kernels::nf4::{decode_scale, Nf4Weight, Scales, CODEBOOK, SCALE_GROUP};

/// `Nf4Weight::scale`, inlined here as it is inside the crate.
#[inline(always)]
fn scale(w: &Nf4Weight, b: usize) -> f32 {
    match w.scales {
        Scales::Plain(s) => s[b],
        Scales::Double {
            codes,
            ranges,
            offset,
        } => decode_scale(codes[b], ranges[b / SCALE_GROUP], offset),
    }
}

/// The dot product of `x` with the weight's flat elements `start .. start + x.len()`.
pub fn row_dot(w: &Nf4Weight, start: usize, x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if riftco_kernels::pool::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { row_dot_avx2(w, start, x) };
    }
    row_dot_portable(w, start, x)
}

/// The codebook scaled by block `b`'s scale, as `dequantize_into` builds it.
#[inline(always)]
fn scaled_codebook(w: &Nf4Weight, b: usize) -> [f32; 16] {
    let s = scale(w, b);
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
        let scale = scale(w, b);
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
