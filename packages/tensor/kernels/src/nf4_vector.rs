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
//! thread count gives the same bits. Rows made of whole blocks are read 32
//! weights a step (byte lookups of the codebook, times the block's scale: the
//! same float32 as the scaled codebook), several rows at a time in the linear;
//! each row still gets exactly the bits of the one-row walk.

use crate::nf4::{Nf4Weight, CODEBOOK};
use crate::pool::{parallel, Shared};

/// Output rows per piece handed to the team.
const ROWS: usize = 16;

/// Weight rows dotted with the input at once: four with AVX-512 (32 registers),
/// one otherwise.
const AT_ONCE: usize = 4;

fn at_once() -> usize {
    if crate::isa::current() >= crate::isa::Isa::Avx512 {
        AT_ONCE
    } else {
        1
    }
}

/// `out [rows] = dequant(w) @ x (+ bias)` for one input row `x [cols]`.
pub(crate) fn linear_vector(w: &Nf4Weight, x: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    let dst = Shared::new(out);
    let at_once = at_once();
    let piece = |p: usize| {
        let first = p * ROWS;
        let last = (first + ROWS).min(n);
        let mut r = first;
        while r < last {
            let take = if at_once == AT_ONCE && r + AT_ONCE <= last {
                AT_ONCE
            } else {
                1
            };
            let y: [f32; AT_ONCE] = if take == AT_ONCE {
                row_dots(w, std::array::from_fn(|j| (r + j) * k), x)
            } else {
                [row_dot(w, r * k, x); AT_ONCE]
            };
            for (j, &v) in y[..take].iter().enumerate() {
                let v = match bias {
                    Some(b) => v + b[r + j],
                    None => v,
                };
                // SAFETY: row r + j of `out` (n elements) belongs to this piece alone.
                unsafe { *dst.at(r + j) = v };
            }
            r += take;
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
    if crate::isa::current() >= crate::isa::Isa::Avx512 && whole_blocks(w, start, x.len()) {
        // SAFETY: the CPU has AVX-512 F and FMA; the row holds whole blocks.
        return unsafe { avx512::whole_blocks::<1>(w, [start], x)[0] };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() {
        if whole_blocks(w, start, x.len()) {
            // SAFETY: the CPU has AVX2 and FMA; the row holds whole blocks.
            return unsafe { avx2::whole_blocks::<1>(w, [start], x)[0] };
        }
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { avx2::row_dot(w, start, x) };
    }
    row_dot_portable(w, start, x)
}

/// [`row_dot`] for `R` rows starting at `starts` (each the same bits), the
/// input's loads shared when every row holds whole blocks.
pub(crate) fn row_dots<const R: usize>(w: &Nf4Weight, starts: [usize; R], x: &[f32]) -> [f32; R] {
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() && starts.iter().all(|&s| whole_blocks(w, s, x.len())) {
        if crate::isa::current() >= crate::isa::Isa::Avx512 {
            // SAFETY: the CPU has AVX-512 F and FMA; every row holds whole blocks.
            return unsafe { avx512::whole_blocks(w, starts, x) };
        }
        // SAFETY: the CPU has AVX2 and FMA; every row holds whole blocks.
        return unsafe { avx2::whole_blocks(w, starts, x) };
    }
    starts.map(|s| row_dot(w, s, x))
}

/// Whether elements `start .. start + len` are whole blocks of the weight.
#[inline(always)]
fn whole_blocks(w: &Nf4Weight, start: usize, len: usize) -> bool {
    let b = w.block - 1; // a power of two (checked)
    start & b == 0 && len & b == 0 && start + len <= w.len()
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
mod avx2 {
    use super::{code, finish};
    use crate::nf4::{Nf4Weight, CODEBOOK};
    use std::arch::x86_64::*;

    /// The scaled codebook in two registers (codes 0-7, 8-15): the products
    /// `scaled_codebook` makes.
    #[inline(always)]
    unsafe fn tables(scale: f32) -> (__m256, __m256) {
        let s8 = _mm256_set1_ps(scale);
        let lo = _mm256_mul_ps(_mm256_loadu_ps(CODEBOOK.as_ptr()), s8);
        let hi = _mm256_mul_ps(_mm256_loadu_ps(CODEBOOK.as_ptr().add(8)), s8);
        (lo, hi)
    }

    /// The eight weights whose codes are the nibbles of the four bytes at `p`,
    /// low nibble first: lane j shifts the little-endian word by 4 j, takes its
    /// low three bits from `lo` and `hi` and picks by bit 3 (moved to the sign).
    #[inline(always)]
    unsafe fn group(p: *const u8, lo: __m256, hi: __m256) -> __m256 {
        let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        let word = std::ptr::read_unaligned(p as *const i32);
        let idx = _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts);
        _mm256_blendv_ps(
            _mm256_permutevar8x32_ps(lo, idx),
            _mm256_permutevar8x32_ps(hi, idx),
            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)),
        )
    }

    /// The sixteen lanes (even groups, odd groups) and the rest, added.
    #[inline(always)]
    unsafe fn total(even: __m256, odd: __m256, rest: f32) -> f32 {
        let mut lanes = [0.0f32; 16];
        _mm256_storeu_ps(lanes.as_mut_ptr(), even);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), odd);
        finish(&lanes, rest)
    }

    /// Byte `k` of each of the sixteen codebook floats, in both halves.
    #[inline(always)]
    unsafe fn codebook_planes() -> [__m256i; 4] {
        let mut bytes = [[0u8; 32]; 4];
        for (c, v) in CODEBOOK.iter().enumerate() {
            for (k, &byte) in v.to_le_bytes().iter().enumerate() {
                bytes[k][c] = byte;
                bytes[k][16 + c] = byte;
            }
        }
        bytes.map(|b| _mm256_loadu_si256(b.as_ptr() as *const __m256i))
    }

    /// The codebook values of the 32 codes in the 16 bytes at `p` (elements
    /// `8 g .. 8 g + 8` in register g, in order), looked up by bytes.
    #[inline(always)]
    unsafe fn codebook_values(p: *const u8, planes: &[__m256i; 4]) -> [__m256; 4] {
        // Element e's code is byte e / 2's low (even e) or high (odd e) nibble.
        // The low half takes elements 0-3, 8-11, 16-19, 24-27, the high half
        // 4-7, 12-15, 20-23, 28-31 (so that the byte transposition below puts
        // each run of eight in order): byte c as a 16-bit word, then the low
        // byte of (c | c << 4) & 0x0f0f is its low nibble, the high byte its high.
        const Z: i8 = -128; // a zero byte
        let pick = _mm256_setr_epi8(
            0, Z, 1, Z, 4, Z, 5, Z, 8, Z, 9, Z, 12, Z, 13, Z, //
            2, Z, 3, Z, 6, Z, 7, Z, 10, Z, 11, Z, 14, Z, 15, Z,
        );
        let c = _mm256_loadu2_m128i(p as *const __m128i, p as *const __m128i);
        let word = _mm256_shuffle_epi8(c, pick);
        let idx = _mm256_and_si256(
            _mm256_or_si256(word, _mm256_slli_epi16(word, 4)),
            _mm256_set1_epi8(15),
        );
        let b = planes.map(|t| _mm256_shuffle_epi8(t, idx));
        let (lo01, hi01) = (
            _mm256_unpacklo_epi8(b[0], b[1]),
            _mm256_unpackhi_epi8(b[0], b[1]),
        );
        let (lo23, hi23) = (
            _mm256_unpacklo_epi8(b[2], b[3]),
            _mm256_unpackhi_epi8(b[2], b[3]),
        );
        [
            _mm256_unpacklo_epi16(lo01, lo23),
            _mm256_unpackhi_epi16(lo01, lo23),
            _mm256_unpacklo_epi16(hi01, hi23),
            _mm256_unpackhi_epi16(hi01, hi23),
        ]
        .map(|v| _mm256_castsi256_ps(v))
    }

    /// Rows of whole blocks (`starts` and `x.len()` multiples of the block, so
    /// every group is whole and a block holds a multiple of 32 elements), `R`
    /// at a time sharing the input's loads. A weight is its codebook value
    /// times the block's scale: the float32 `scaled_codebook` holds.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn whole_blocks<const R: usize>(
        w: &Nf4Weight,
        starts: [usize; R],
        x: &[f32],
    ) -> [f32; R] {
        let (block, codes) = (w.block, w.codes.as_ptr());
        let shift = block.trailing_zeros();
        for &s in &starts {
            // Bytes s / 2 .. (s + x.len()) / 2 are read (s is even).
            assert!(
                s % block == 0
                    && x.len().is_multiple_of(block)
                    && (s + x.len()) / 2 <= w.codes.len()
            );
        }
        let planes = codebook_planes();
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let mut base = 0;
        while base < x.len() {
            let mut scale = [_mm256_setzero_ps(); R];
            for (v, &start) in scale.iter_mut().zip(&starts) {
                *v = _mm256_set1_ps(w.scale((start + base) >> shift));
            }
            let mut i = base;
            while i < base + block {
                for r in 0..R {
                    let v = codebook_values(codes.add((starts[r] + i) / 2), &planes);
                    for (g, &v) in v.iter().enumerate() {
                        let wv = _mm256_mul_ps(v, scale[r]);
                        let xv = _mm256_loadu_ps(x.as_ptr().add(i + 8 * g));
                        acc[r][g % 2] = _mm256_fmadd_ps(wv, xv, acc[r][g % 2]);
                    }
                }
                i += 32;
            }
            base += block;
        }
        // A loop, not a closure: a closure would not inherit the target features.
        let mut out = [0.0f32; R];
        for (o, a) in out.iter_mut().zip(&acc) {
            *o = total(a[0], a[1], 0.0);
        }
        out
    }

    /// Any row: the walk of `row_dot_portable`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn row_dot(w: &Nf4Weight, start: usize, x: &[f32]) -> f32 {
        let (codes, end) = (w.codes, start + x.len());
        // `next` takes the next group, `other` the one after (swapped every group).
        let (mut next, mut other) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut rest = 0.0f32;
        let mut group_count = 0usize;
        let mut i = start;
        while i < end {
            let b = i >> w.block.trailing_zeros(); // a power of two (checked)
            let stop = ((b + 1) << w.block.trailing_zeros()).min(end);
            let scale = w.scale(b);
            if i % 2 == 1 {
                rest = (CODEBOOK[code(codes, i)] * scale).mul_add(x[i - start], rest);
                i += 1;
            }
            let (lo, hi) = tables(scale);
            // The groups below read code bytes up to (stop - 1) / 2 and x up to stop - start.
            assert!(stop.div_ceil(2) <= codes.len() && stop - start <= x.len());
            while i + 8 <= stop {
                // SAFETY: i is even and i + 8 <= stop, so bytes i / 2 .. i / 2 + 4
                // exist, and i + 8 - start <= x.len().
                let value = group(codes.as_ptr().add(i / 2), lo, hi);
                let xv = _mm256_loadu_ps(x.as_ptr().add(i - start));
                next = _mm256_fmadd_ps(value, xv, next);
                std::mem::swap(&mut next, &mut other);
                group_count += 1;
                i += 8;
            }
            while i < stop {
                rest = (CODEBOOK[code(codes, i)] * scale).mul_add(x[i - start], rest);
                i += 1;
            }
        }
        if group_count.is_multiple_of(2) {
            total(next, other, rest)
        } else {
            total(other, next, rest)
        }
    }
}

/// Rows of whole blocks with AVX-512 F: sixteen consecutive weights a register,
/// the group pair `2 t, 2 t + 1` in lanes 0-7 and 8-15, so one accumulator holds
/// the even and the odd groups' lanes exactly as the two AVX2 ones do. A weight
/// is one lane of the block's scaled codebook (sixteen floats, one register:
/// `vpermps` by the code), the float32 `scaled_codebook` holds; the same fused
/// multiply-adds in the same order, so the bits are those of the other versions.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    // The AVX-512 intrinsics are stable from Rust 1.89 (the workspace's MSRV is older).

    use super::finish;
    use crate::nf4::{Nf4Weight, CODEBOOK};
    use std::arch::x86_64::*;

    /// The sum of the sixteen lanes in lane order, as `finish` adds them.
    #[inline(always)]
    unsafe fn total(acc: __m512) -> f32 {
        let mut lanes = [0.0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), acc);
        finish(&lanes, 0.0)
    }

    /// See the module docs: `starts` and `x.len()` multiples of the block, so a
    /// block holds a multiple of 32 elements and every read is inside the codes.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn whole_blocks<const R: usize>(
        w: &Nf4Weight,
        starts: [usize; R],
        x: &[f32],
    ) -> [f32; R] {
        let (block, codes) = (w.block, w.codes.as_ptr());
        let shift = block.trailing_zeros();
        for &s in &starts {
            // Bytes s / 2 .. (s + x.len()) / 2 are read (s is even).
            assert!(
                s % block == 0
                    && x.len().is_multiple_of(block)
                    && (s + x.len()) / 2 <= w.codes.len()
            );
        }
        let codebook = _mm512_loadu_ps(CODEBOOK.as_ptr());
        // Lane e of a run of sixteen takes code byte e / 2 (a 32-bit word of the
        // 16 bytes loaded) shifted to nibble e % 2 of its byte; `vpermps` reads
        // the low four bits.
        let words_lo = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        let words_hi = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        let nibbles = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        let mut acc = [_mm512_setzero_ps(); R];
        let mut base = 0;
        while base < x.len() {
            // Loops, not closures: a closure would not inherit the target features.
            let mut table = [codebook; R];
            for (t, &start) in table.iter_mut().zip(&starts) {
                *t = _mm512_mul_ps(codebook, _mm512_set1_ps(w.scale((start + base) >> shift)));
            }
            let mut i = base;
            while i < base + block {
                let x0 = _mm512_loadu_ps(x.as_ptr().add(i));
                let x1 = _mm512_loadu_ps(x.as_ptr().add(i + 16));
                for r in 0..R {
                    let c = _mm512_castsi128_si512(_mm_loadu_si128(
                        codes.add((starts[r] + i) / 2) as *const __m128i
                    ));
                    let i0 = _mm512_srlv_epi32(_mm512_permutexvar_epi32(words_lo, c), nibbles);
                    let i1 = _mm512_srlv_epi32(_mm512_permutexvar_epi32(words_hi, c), nibbles);
                    let w0 = _mm512_permutexvar_ps(i0, table[r]);
                    let w1 = _mm512_permutexvar_ps(i1, table[r]);
                    acc[r] = _mm512_fmadd_ps(w0, x0, acc[r]);
                    acc[r] = _mm512_fmadd_ps(w1, x1, acc[r]);
                }
                i += 32;
            }
            base += block;
        }
        let mut out = [0.0f32; R];
        for (o, &a) in out.iter_mut().zip(&acc) {
            *o = total(a);
        }
        out
    }
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

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx512_walk_gives_the_avx2_and_portable_bits() {
        use crate::isa::{detected, Isa};
        if detected() < Isa::Avx2 {
            return;
        }
        for &(rows, cols, block) in &[(6, 64, 64), (5, 384, 32), (4, 1536, 128), (3, 4096, 4096)] {
            let (codes, scales) = weight(rows, cols, block);
            let mut scales = scales;
            scales[1] = -0.0;
            scales[2] = f32::INFINITY;
            let w = Nf4Weight {
                codes: &codes,
                scales: Scales::Plain(&scales),
                rows,
                cols,
                block,
            };
            let mut x: Vec<f32> = (0..cols)
                .map(|i| ((i * 11 % 23) as f32 - 11.0) / 5.0)
                .collect();
            x[cols / 3] = -0.0;
            let starts: [usize; 3] = std::array::from_fn(|j| (j % rows) * cols);
            // SAFETY: the CPU has AVX2 and FMA; the rows hold whole blocks.
            let narrow = unsafe { avx2::whole_blocks(&w, starts, &x) };
            let wide = (detected() >= Isa::Avx512).then(|| {
                // SAFETY: the CPU has AVX-512 F; the rows hold whole blocks.
                unsafe {
                    (
                        avx512::whole_blocks(&w, starts, &x),
                        avx512::whole_blocks::<1>(&w, [starts[1]], &x)[0],
                    )
                }
            });
            for (j, &s) in starts.iter().enumerate() {
                let p = row_dot_portable(&w, s, &x);
                let same = |a: f32| a.to_bits() == p.to_bits() || (a.is_nan() && p.is_nan());
                assert!(same(narrow[j]), "avx2 {rows}x{cols}/{block} row {j}");
                if let Some((three, one)) = wide {
                    assert!(same(three[j]), "avx512 {rows}x{cols}/{block} row {j}");
                    if j == 1 {
                        assert!(same(one), "avx512 one row {rows}x{cols}/{block}");
                    }
                }
            }
        }
    }

    #[test]
    fn several_rows_at_once_give_each_row_the_bits_of_one_at_a_time() {
        // Whole blocks (the fast path), rows that straddle blocks, an odd start.
        for &(rows, cols, block) in &[(9, 384, 64), (8, 1536, 32), (6, 96, 64), (5, 45, 32)] {
            let (codes, _) = weight(rows, cols, block);
            let blocks = (rows * cols).div_ceil(block);
            let q: Vec<u8> = (0..blocks).map(|b| (b * 89 % 256) as u8).collect();
            let ranges = vec![0.75f32; blocks.div_ceil(crate::nf4::SCALE_GROUP)];
            let w = Nf4Weight {
                codes: &codes,
                scales: Scales::Double {
                    codes: &q,
                    ranges: &ranges,
                    offset: 0.5,
                },
                rows,
                cols,
                block,
            };
            let x: Vec<f32> = (0..cols)
                .map(|i| ((i * 7 % 19) as f32 - 9.0) / 4.0)
                .collect();
            let mut dense = vec![0.0f32; rows * cols];
            w.dequantize_into(0, &mut dense);
            for r in 0..rows - 3 {
                let starts = [r * cols, (r + 1) * cols, (r + 3) * cols];
                let got = row_dots(&w, starts, &x);
                let two = row_dots(&w, [starts[2], starts[0]], &x);
                for (j, &s) in starts.iter().enumerate() {
                    let one = row_dot(&w, s, &x);
                    let portable = row_dot_portable(&w, s, &x);
                    assert_eq!(got[j].to_bits(), one.to_bits(), "{rows}x{cols} row {s}");
                    assert_eq!(one.to_bits(), portable.to_bits(), "{rows}x{cols} row {s}");
                    let exact: f64 = (0..cols).map(|c| dense[s + c] as f64 * x[c] as f64).sum();
                    assert!((one as f64 - exact).abs() < 1e-4 * (1.0 + exact.abs()));
                }
                assert_eq!(two[0].to_bits(), got[2].to_bits());
                assert_eq!(two[1].to_bits(), got[0].to_bits());
            }
        }
    }
}
