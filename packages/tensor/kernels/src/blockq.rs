//! Weights in llama.cpp's (ggml's) block layouts: Q8_0, Q4_0 and F16, for
//! inference. A weight `[rows, cols]` is stored row by row, each row as it is in
//! a GGUF tensor:
//!
//! * `Q8_0`: `cols / 32` blocks of 34 bytes, a little-endian IEEE half scale `d`
//!   then 32 int8 `q`; element `j` is `d * q_j`.
//! * `Q4_0`: `cols / 32` blocks of 18 bytes, a half scale `d` then 16 bytes whose
//!   low nibbles hold elements 0..15 and high nibbles elements 16..31; element
//!   `j` is `d * (nibble_j - 8)`.
//! * `F16`: `cols` little-endian halves.
//!
//! The linear never materializes float32 weights. For Q8_0 and Q4_0 each input
//! row is first quantized to 8 bits per block of 32 exactly as ggml's
//! `quantize_row_q8_0` does on x86-64 (the path llama.cpp runs there before its
//! `vec_dot`): `a = max |x|`, the scale `s = half(a / 127)` (float32 division,
//! then rounded to an IEEE half, ties to even), `q = round(x * (127 / a))` with
//! the float32 inverse, rounded to nearest with ties to even (all zero when `a`
//! is 0). (ggml's portable reference takes `1 / (a / 127)` and rounds ties away
//! from zero; the two differ only where a product lands on a tie or within an
//! ulp of one.) Each output is then a sum over blocks of exact integer dot
//! products scaled by `d * s`, both halves as float32 (see `blockq/dot.rs`);
//! F16 weights multiply the float32 input directly. One output element is always
//! computed the same way, by the same function, whatever the batch size, the
//! thread count or the CPU, so prefill and decode give the same bits.

mod dot;
mod linear;
mod quantize;
#[cfg(test)]
mod test_weights;
pub mod tiles;

pub use dot::{f16_tiles, f16_to_f32, f32_to_f16};
pub use linear::{linear, linear_row_by_row};
pub(crate) use linear::{piece_rows, ROWS};
#[cfg(test)]
pub(crate) use quantize::quantize_rows;
pub(crate) use quantize::{quantize_rows_into, QuantizedRows};

use crate::{ensure, Result};

/// Elements per Q8_0 / Q4_0 block.
pub const QK: usize = 32;

/// A block layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    Q8_0,
    Q4_0,
    F16,
}

impl BlockFormat {
    /// The format named `name` (`q8_0`, `q4_0` or `f16`).
    pub fn parse(name: &str) -> Result<BlockFormat> {
        match name {
            "q8_0" => Ok(BlockFormat::Q8_0),
            "q4_0" => Ok(BlockFormat::Q4_0),
            "f16" => Ok(BlockFormat::F16),
            _ => Err(crate::KernelError(format!(
                "block weights: expected the format q8_0, q4_0 or f16, found {name:?}"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BlockFormat::Q8_0 => "q8_0",
            BlockFormat::Q4_0 => "q4_0",
            BlockFormat::F16 => "f16",
        }
    }

    /// Bytes of one row of `cols` elements (`cols` a multiple of the block).
    pub fn row_bytes(self, cols: usize) -> usize {
        match self {
            BlockFormat::Q8_0 => cols / QK * 34,
            BlockFormat::Q4_0 => cols / QK * 18,
            BlockFormat::F16 => cols * 2,
        }
    }

    /// Elements per block (1 for F16).
    pub fn block(self) -> usize {
        match self {
            BlockFormat::F16 => 1,
            _ => QK,
        }
    }
}

/// A weight `[rows, cols]` in a block layout.
#[derive(Debug, Clone, Copy)]
pub struct BlockWeight<'a> {
    pub format: BlockFormat,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
}

impl BlockWeight<'_> {
    pub fn row_bytes(&self) -> usize {
        self.format.row_bytes(self.cols)
    }

    /// The bytes of row `r`.
    #[inline(always)]
    pub fn row(&self, r: usize) -> &[u8] {
        let b = self.row_bytes();
        &self.data[r * b..(r + 1) * b]
    }

    /// Check that the row length fits the format and the bytes the shape.
    pub fn check(&self) -> Result<()> {
        let f = self.format;
        ensure!(
            self.cols.is_multiple_of(f.block()),
            "{}: a row must hold whole blocks of {} elements, found {} columns",
            f.name(),
            f.block(),
            self.cols
        );
        let want = self.rows * self.row_bytes();
        ensure!(
            self.data.len() == want,
            "{}: a [{}, {}] weight needs {want} bytes, found {}",
            f.name(),
            self.rows,
            self.cols,
            self.data.len()
        );
        Ok(())
    }

    /// Row `r` as float32 into `out` (`cols` elements).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let row = self.row(r);
        match self.format {
            BlockFormat::F16 => {
                for (o, h) in out.iter_mut().zip(row.chunks_exact(2)) {
                    *o = f16_to_f32(u16::from_le_bytes([h[0], h[1]]));
                }
            }
            BlockFormat::Q8_0 => {
                for (o, b) in out.chunks_exact_mut(QK).zip(row.chunks_exact(34)) {
                    let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                    for (v, &q) in o.iter_mut().zip(&b[2..]) {
                        *v = d * (q as i8) as f32;
                    }
                }
            }
            BlockFormat::Q4_0 => {
                for (o, b) in out.chunks_exact_mut(QK).zip(row.chunks_exact(18)) {
                    let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                    for (j, &q) in b[2..].iter().enumerate() {
                        o[j] = d * ((q & 15) as i32 - 8) as f32;
                        o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
                    }
                }
            }
        }
    }
}

/// Every element of `w` into `out` (`rows * cols` floats).
pub fn dequantize(w: &BlockWeight, out: &mut [f32]) -> Result<()> {
    w.check()?;
    ensure!(
        out.len() == w.rows * w.cols,
        "{}_dequantize: output has {} elements, expected {}",
        w.format.name(),
        out.len(),
        w.rows * w.cols
    );
    if w.cols == 0 {
        return Ok(());
    }
    let rows_per = (crate::pool::CHUNK / w.cols).max(1);
    crate::pool::for_chunks(out, rows_per * w.cols, |i, chunk| {
        for (j, row) in chunk.chunks_exact_mut(w.cols).enumerate() {
            w.dequantize_row(i * rows_per + j, row);
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::test_weights::{half, weight};
    use super::*;

    #[test]
    fn dequantize_reads_the_ggml_layouts() {
        let mut q8 = half(0.5).to_vec();
        q8.extend((0..32u8).map(|j| (j as i8 - 16) as u8));
        let w = BlockWeight {
            format: BlockFormat::Q8_0,
            data: &q8,
            rows: 1,
            cols: 32,
        };
        let mut out = vec![0.0; 32];
        dequantize(&w, &mut out).unwrap();
        assert_eq!(out[0], -8.0);
        assert_eq!(out[31], 7.5);
        let mut q4 = half(2.0).to_vec();
        q4.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let w = BlockWeight {
            format: BlockFormat::Q4_0,
            data: &q4,
            ..w
        };
        dequantize(&w, &mut out).unwrap();
        assert_eq!(out[0], -16.0);
        assert_eq!(out[15], 14.0);
        assert_eq!(out[16], 14.0);
        assert_eq!(out[31], -16.0);
    }

    #[test]
    fn mismatched_buffers_are_refused() {
        let data = weight(BlockFormat::Q4_0, 2, 64);
        let w = BlockWeight {
            format: BlockFormat::Q4_0,
            data: &data,
            rows: 2,
            cols: 64,
        };
        assert!(w.check().is_ok());
        assert!(BlockWeight { cols: 48, ..w }.check().is_err());
        assert!(BlockWeight { rows: 3, ..w }.check().is_err());
        let mut y = vec![0.0; 2];
        assert!(linear(&w, &[0.0; 63], 1, None, &mut y).is_err());
        assert!(BlockFormat::parse("q5_0").is_err());
        assert_eq!(BlockFormat::parse("f16").unwrap(), BlockFormat::F16);
    }
}
