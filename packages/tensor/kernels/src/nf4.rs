//! NF4 (4-bit NormalFloat) weights: dequantization and the quantized linear.
//!
//! A packed weight of `rows x cols` elements (flat, row-major; `n = rows * cols`)
//! is split into blocks of `block` consecutive elements, each with one scale.
//! Element `i` is `CODEBOOK[code_i] * scale[i / block]` in float32, where
//! `code_i` is the low nibble of byte `i / 2` for even `i` and its high nibble
//! for odd `i`. With double quantization the block scales are stored as bytes:
//! block `b` decodes to `clamp(offset + (range[b / 256] * (q_b - 128)) / 127, 0,
//! f32::MAX)`, evaluated left to right in float32.
//!
//! The kernels never hold the whole float32 weight: they dequantize one tile of
//! rows (forward) or columns (input gradient) at a time into a small buffer and
//! multiply it with `gemm`. Tiles have a fixed size and every output element is
//! produced by exactly one tile, so results do not depend on the thread count.

use gemm::{gemm, Parallelism};

use crate::pool::{
    for_chunks, for_each_index, parallel, with_kept, Kept, Shared, CHUNK, PARALLEL_WORK,
};
use crate::{ensure, Result};

/// The 16 NF4 values (bitsandbytes' table), in code order, digits as published.
#[allow(clippy::excessive_precision)]
pub const CODEBOOK: [f32; 16] = [
    -1.0,
    -0.696_192_800_998_687_7,
    -0.525_073_051_452_636_7,
    -0.394_917_488_098_144_53,
    -0.284_441_381_692_886_35,
    -0.184_773_430_228_233_34,
    -0.091_050_036_251_544_95,
    0.0,
    0.079_580_299_556_255_34,
    0.160_930_201_411_247_25,
    0.246_112_301_945_686_34,
    0.337_915_241_718_292_24,
    0.440_709_829_330_444_34,
    0.562_617_003_917_694_1,
    0.722_956_836_223_602_3,
    1.0,
];

/// Block scales per range of a double-quantized weight.
pub const SCALE_GROUP: usize = 256;
/// Smallest and largest block sizes (powers of two in between are allowed).
pub const MIN_BLOCK: usize = 32;
pub const MAX_BLOCK: usize = 4096;

/// Rows (forward) or columns (input gradient) dequantized per tile.
const TILE: usize = 64;

/// How the block scales are stored.
#[derive(Debug, Clone, Copy)]
pub enum Scales<'a> {
    /// One float32 per block.
    Plain(&'a [f32]),
    /// One byte per block, one float32 range per group of [`SCALE_GROUP`] blocks,
    /// and one offset for the whole weight.
    Double {
        codes: &'a [u8],
        ranges: &'a [f32],
        offset: f32,
    },
}

/// A packed NF4 weight `[rows, cols]`.
#[derive(Debug, Clone, Copy)]
pub struct Nf4Weight<'a> {
    pub codes: &'a [u8],
    pub scales: Scales<'a>,
    pub rows: usize,
    pub cols: usize,
    pub block: usize,
}

/// A double-quantized block scale.
#[inline(always)]
pub fn decode_scale(q: u8, range: f32, offset: f32) -> f32 {
    (offset + (range * (q as f32 - 128.0)) / 127.0).clamp(0.0, f32::MAX)
}

impl Nf4Weight<'_> {
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn blocks(&self) -> usize {
        self.len().div_ceil(self.block)
    }

    /// Check that every buffer has the length the shape and block size imply.
    pub fn check(&self) -> Result<()> {
        let b = self.block;
        ensure!(
            b.is_power_of_two() && (MIN_BLOCK..=MAX_BLOCK).contains(&b),
            "nf4: block size must be a power of two from {MIN_BLOCK} to {MAX_BLOCK}, found {b}"
        );
        let n = self.len();
        ensure!(
            self.codes.len() == n.div_ceil(2),
            "nf4: a [{}, {}] weight needs {} code bytes, found {}",
            self.rows,
            self.cols,
            n.div_ceil(2),
            self.codes.len()
        );
        let blocks = self.blocks();
        match self.scales {
            Scales::Plain(s) => {
                ensure!(
                    s.len() == blocks,
                    "nf4: {blocks} blocks need {blocks} scales, found {}",
                    s.len()
                );
            }
            Scales::Double {
                codes,
                ranges,
                offset,
            } => {
                ensure!(
                    codes.len() == blocks,
                    "nf4: {blocks} blocks need {blocks} scale codes, found {}",
                    codes.len()
                );
                let groups = blocks.div_ceil(SCALE_GROUP);
                ensure!(
                    ranges.len() == groups,
                    "nf4: {blocks} blocks need {groups} scale ranges, found {}",
                    ranges.len()
                );
                ensure!(offset.is_finite(), "nf4: the scale offset is {offset}");
            }
        }
        Ok(())
    }

    /// The scale of block `b`.
    #[inline(always)]
    pub fn scale(&self, b: usize) -> f32 {
        match self.scales {
            Scales::Plain(s) => s[b],
            Scales::Double {
                codes,
                ranges,
                offset,
            } => decode_scale(codes[b], ranges[b / SCALE_GROUP], offset),
        }
    }

    /// Dequantize the flat elements `start .. start + out.len()` into `out`.
    pub fn dequantize_into(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        let mut i = start;
        let mut o = 0;
        while i < end {
            let b = i / self.block;
            let stop = ((b + 1) * self.block).min(end);
            let s = self.scale(b);
            let lut: [f32; 16] = std::array::from_fn(|c| CODEBOOK[c] * s);
            if i % 2 == 1 {
                out[o] = lut[(self.codes[i / 2] >> 4) as usize];
                i += 1;
                o += 1;
            }
            while i + 1 < stop {
                let byte = self.codes[i / 2];
                out[o] = lut[(byte & 15) as usize];
                out[o + 1] = lut[(byte >> 4) as usize];
                i += 2;
                o += 2;
            }
            if i < stop {
                out[o] = lut[(self.codes[i / 2] & 15) as usize];
                i += 1;
                o += 1;
            }
        }
    }
}

thread_local! {
    /// A thread's dequantized tile, kept across tiles and calls.
    static TILE_BUFFER: Kept<Vec<f32>> = const { std::cell::Cell::new(None) };
}

fn for_tiles(tiles: usize, work: usize, f: impl Fn(usize, &mut Vec<f32>) + Sync) {
    let parallel = tiles > 1 && parallel(work, PARALLEL_WORK);
    for_each_index(tiles, parallel, |t| {
        with_kept(&TILE_BUFFER, |buf| f(t, buf))
    });
}

/// Every element of `w` into `out` (`rows * cols` floats).
pub fn dequantize(w: &Nf4Weight, out: &mut [f32]) -> Result<()> {
    w.check()?;
    ensure!(
        out.len() == w.len(),
        "nf4_dequantize: output has {} elements, expected {}",
        out.len(),
        w.len()
    );
    for_chunks(out, CHUNK, |i, chunk| w.dequantize_into(i * CHUNK, chunk));
    Ok(())
}

/// `out [m, rows] = x [m, cols] @ dequant(w)^T (+ bias [rows])`.
pub fn linear(
    w: &Nf4Weight,
    x: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    w.check()?;
    let (n, k) = (w.rows, w.cols);
    ensure!(
        x.len() == m * k,
        "nf4_linear: input has {} elements, expected {m} x {k}",
        x.len()
    );
    ensure!(
        out.len() == m * n,
        "nf4_linear: output has {} elements, expected {m} x {n}",
        out.len()
    );
    if let Some(b) = bias {
        ensure!(
            b.len() == n,
            "nf4_linear: bias has {} elements, expected {n}",
            b.len()
        );
    }
    if out.is_empty() {
        return Ok(());
    }
    if m == 1 && k > 0 {
        crate::nf4_vector::linear_vector(w, x, bias, out);
        return Ok(());
    }
    let dst = Shared::new(out);
    for_tiles(n.div_ceil(TILE), m * n * k, |t, buf| {
        let r0 = t * TILE;
        let rows = TILE.min(n - r0);
        buf.resize(rows * k, 0.0);
        w.dequantize_into(r0 * k, &mut buf[..rows * k]);
        let base = dst.at(0);
        // SAFETY: the tile writes columns r0 .. r0 + rows of every output row, which
        // lie inside `out` (m x n) and belong to no other tile; `x` is m x k and
        // `buf` rows x k, read as its transpose.
        unsafe {
            if k == 0 {
                for i in 0..m {
                    std::slice::from_raw_parts_mut(base.add(i * n + r0), rows).fill(0.0);
                }
            } else {
                gemm(
                    m,
                    rows,
                    k,
                    base.add(r0),
                    1,
                    n as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    buf.as_ptr(),
                    k as isize,
                    1,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    Parallelism::None,
                );
            }
            if let Some(b) = bias {
                for i in 0..m {
                    let row = std::slice::from_raw_parts_mut(base.add(i * n + r0), rows);
                    row.iter_mut()
                        .zip(&b[r0..r0 + rows])
                        .for_each(|(y, bj)| *y += bj);
                }
            }
        }
    });
    Ok(())
}

/// `dx [m, cols] = dy [m, rows] @ dequant(w)`: the input gradient of [`linear`].
pub fn linear_backward(w: &Nf4Weight, dy: &[f32], m: usize, dx: &mut [f32]) -> Result<()> {
    w.check()?;
    let (n, k) = (w.rows, w.cols);
    ensure!(
        dy.len() == m * n,
        "nf4_linear_backward: gradient has {} elements, expected {m} x {n}",
        dy.len()
    );
    ensure!(
        dx.len() == m * k,
        "nf4_linear_backward: output has {} elements, expected {m} x {k}",
        dx.len()
    );
    if dx.is_empty() {
        return Ok(());
    }
    if n == 0 {
        dx.fill(0.0);
        return Ok(());
    }
    let dst = Shared::new(dx);
    for_tiles(k.div_ceil(TILE), m * n * k, |t, buf| {
        let c0 = t * TILE;
        let cols = TILE.min(k - c0);
        buf.resize(n * cols, 0.0);
        for (r, row) in buf[..n * cols].chunks_mut(cols).enumerate() {
            w.dequantize_into(r * k + c0, row);
        }
        // SAFETY: the tile writes columns c0 .. c0 + cols of every row of dx (m x k),
        // which belong to no other tile; dy is m x n and buf n x cols.
        unsafe {
            gemm(
                m,
                cols,
                n,
                dst.at(c0),
                1,
                k as isize,
                false,
                dy.as_ptr(),
                1,
                n as isize,
                buf.as_ptr(),
                1,
                cols as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A weight whose codes and scales follow simple patterns.
    fn packed(rows: usize, cols: usize, block: usize) -> (Vec<u8>, Vec<f32>) {
        let n = rows * cols;
        let codes = (0..n.div_ceil(2))
            .map(|j| ((j * 7 + 3) % 256) as u8)
            .collect();
        let scales = (0..n.div_ceil(block))
            .map(|b| 0.25 + (b % 5) as f32 * 0.5)
            .collect();
        (codes, scales)
    }

    fn naive(w: &Nf4Weight) -> Vec<f32> {
        (0..w.len())
            .map(|i| {
                let code = (w.codes[i / 2] >> (4 * (i % 2))) & 15;
                CODEBOOK[code as usize] * w.scale(i / w.block)
            })
            .collect()
    }

    #[test]
    fn dequantize_matches_the_definition_at_any_start() {
        let (codes, scales) = packed(3, 45, 32);
        let w = Nf4Weight {
            codes: &codes,
            scales: Scales::Plain(&scales),
            rows: 3,
            cols: 45,
            block: 32,
        };
        let want = naive(&w);
        let mut all = vec![0.0; w.len()];
        dequantize(&w, &mut all).unwrap();
        assert_eq!(all, want);
        for start in [0, 1, 31, 32, 33, 64, 100] {
            for len in [0, 1, 2, 5, 40] {
                let mut out = vec![0.0; len.min(w.len() - start)];
                w.dequantize_into(start, &mut out);
                assert_eq!(out, want[start..start + out.len()]);
            }
        }
    }

    #[test]
    fn double_quantized_scales_decode_and_clamp() {
        assert_eq!(decode_scale(128, 5.0, 0.5), 0.5);
        assert_eq!(decode_scale(255, 1.0, 0.5), 1.5);
        assert_eq!(decode_scale(1, 1.0, 0.5), 0.0);
        assert_eq!(decode_scale(255, f32::MAX, f32::MAX), f32::MAX);
    }

    #[test]
    fn linear_and_backward_match_a_dense_product() {
        for (rows, cols, m) in [(130, 70, 3), (5, 64, 1), (64, 129, 7)] {
            let (codes, scales) = packed(rows, cols, 64);
            let q: Vec<u8> = scales.iter().map(|&s| (s * 50.0) as u8).collect();
            let ranges = vec![2.0; q.len().div_ceil(SCALE_GROUP)];
            let w = Nf4Weight {
                codes: &codes,
                scales: Scales::Double {
                    codes: &q,
                    ranges: &ranges,
                    offset: 1.0,
                },
                rows,
                cols,
                block: 64,
            };
            let dense = naive(&w);
            let x: Vec<f32> = (0..m * cols)
                .map(|v| ((v * 13) % 17) as f32 / 8.0 - 1.0)
                .collect();
            let bias: Vec<f32> = (0..rows).map(|v| v as f32 * 0.01).collect();
            let mut y = vec![0.0; m * rows];
            linear(&w, &x, m, Some(&bias), &mut y).unwrap();
            for i in 0..m {
                for j in 0..rows {
                    let want: f32 = (0..cols)
                        .map(|p| x[i * cols + p] * dense[j * cols + p])
                        .sum::<f32>()
                        + bias[j];
                    assert!((y[i * rows + j] - want).abs() <= 1e-4 * (1.0 + want.abs()));
                }
            }
            let dy: Vec<f32> = (0..m * rows)
                .map(|v| ((v * 5) % 11) as f32 / 4.0 - 1.0)
                .collect();
            let mut dx = vec![0.0; m * cols];
            linear_backward(&w, &dy, m, &mut dx).unwrap();
            for i in 0..m {
                for p in 0..cols {
                    let want: f32 = (0..rows)
                        .map(|j| dy[i * rows + j] * dense[j * cols + p])
                        .sum();
                    assert!((dx[i * cols + p] - want).abs() <= 1e-4 * (1.0 + want.abs()));
                }
            }
        }
    }

    #[test]
    fn mismatched_buffers_are_refused() {
        let (codes, scales) = packed(2, 64, 64);
        let w = Nf4Weight {
            codes: &codes,
            scales: Scales::Plain(&scales),
            rows: 2,
            cols: 64,
            block: 48,
        };
        assert!(w.check().is_err());
        let w = Nf4Weight { block: 64, ..w };
        assert!(w.check().is_ok());
        let w = Nf4Weight {
            codes: &codes[1..],
            ..w
        };
        assert!(w.check().is_err());
        let w = Nf4Weight {
            codes: &codes,
            rows: 2,
            cols: 64,
            block: 64,
            scales: Scales::Plain(&scales),
        };
        let mut y = vec![0.0; 2];
        assert!(linear(&w, &[0.0; 63], 1, None, &mut y).is_err());
    }
}
