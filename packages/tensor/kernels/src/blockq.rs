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
//! row is first quantized to 8 bits per block of 32 (as llama.cpp does for its
//! `vec_dot`): `a = max |x|`, `s = a / 127`, `q = round(x * (1 / s))` (half away
//! from zero; all zero when `s` is 0). Unlike llama.cpp the activation scale `s`
//! stays float32 (llama.cpp rounds it to half). Each output is then a sum over
//! blocks of exact integer dot products scaled by `d * s` (see `blockq_dot.rs`);
//! F16 weights multiply the float32 input directly. One output element is always
//! computed the same way, by the same function, whatever the batch size, the
//! thread count or the CPU, so prefill and decode give the same bits.

use crate::blockq_dot::{
    dot_f16, dot_q4_0, dot_q8_0, dot_rows_f16, dot_rows_q4_0, dot_rows_q8_0, f16_to_f32,
};
use crate::pool::Shared;

#[cfg(target_arch = "x86_64")]
#[path = "blockq_quant.rs"]
mod quant;
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
            self.cols % f.block() == 0,
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

/// Input rows quantized to 8 bits per block of 32 (see the module docs): `q`
/// `[m, cols]`, the float32 scales `[m, cols / 32]`, and for Q4_0 eight times
/// the sum of each group of four `q` (`[m, cols / 32 * 8]`), which the Q4_0 dot
/// product subtracts for the weight's offset of 8.
pub(crate) struct QuantizedRows {
    pub q: Vec<i8>,
    pub scales: Vec<f32>,
    pub sums: Vec<i32>,
}

/// The largest magnitude of `x`, NaN when `x` has one.
#[inline(always)]
fn absmax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |a, &v| {
        if v.is_nan() || a.is_nan() {
            f32::NAN
        } else {
            a.max(v.abs())
        }
    })
}

pub(crate) fn quantize_rows(x: &[f32], with_sums: bool) -> QuantizedRows {
    quantize_rows_with(x, with_sums, true)
}

/// [`quantize_rows`], `vector`: with the AVX2 version where the CPU has it.
fn quantize_rows_with(x: &[f32], with_sums: bool, vector: bool) -> QuantizedRows {
    let blocks = x.len() / QK;
    let mut q = vec![0i8; x.len()];
    let mut scales = vec![0.0f32; blocks];
    let mut sums = vec![0i32; if with_sums { blocks * 8 } else { 0 }];
    #[cfg(target_arch = "x86_64")]
    if vector && crate::pool::has_avx2_fma() {
        // SAFETY: the CPU has AVX2; the buffers have the lengths it needs.
        unsafe { quant::quantize(x, &mut q, &mut scales, &mut sums) };
        return QuantizedRows { q, scales, sums };
    }
    quantize_portable(x, &mut q, &mut scales, &mut sums);
    QuantizedRows { q, scales, sums }
}

fn quantize_portable(x: &[f32], q: &mut [i8], scales: &mut [f32], sums: &mut [i32]) {
    for (b, (xb, qb)) in x.chunks_exact(QK).zip(q.chunks_exact_mut(QK)).enumerate() {
        let s = absmax(xb) / 127.0;
        let inv = if s != 0.0 { 1.0 / s } else { 0.0 };
        for (o, &v) in qb.iter_mut().zip(xb) {
            // A non-finite scale leaves q at 0 and makes the block's products NaN.
            *o = (v * inv).round() as i8;
        }
        scales[b] = s;
        if !sums.is_empty() {
            for (j, g) in qb.chunks_exact(4).enumerate() {
                sums[b * 8 + j] = 8 * g.iter().map(|&v| v as i32).sum::<i32>();
            }
        }
    }
}

/// Output rows per piece handed to the team.
pub(crate) const ROWS: usize = 16;

/// Weight rows dotted with an input row at once (the rest one at a time): Q8_0
/// and Q4_0, F16.
const AT_ONCE: usize = 4;
const AT_ONCE_F16: usize = 2;

/// `out [m, rows] = x [m, cols] @ W^T (+ bias [rows])`.
pub fn linear(
    w: &BlockWeight,
    x: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    linear_with(w, x, m, bias, out, true)
}

/// [`linear`] computing one weight row at a time, the input quantized by the
/// portable loop: the same bits, slower (kept to check and time the kernels
/// that take several rows at once and the AVX2 quantization).
#[doc(hidden)]
pub fn linear_row_by_row(
    w: &BlockWeight,
    x: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    linear_with(w, x, m, bias, out, false)
}

fn linear_with(
    w: &BlockWeight,
    x: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
    grouped: bool,
) -> Result<()> {
    w.check()?;
    let (n, k, name) = (w.rows, w.cols, w.format.name());
    ensure!(
        x.len() == m * k,
        "{name}_linear: input has {} elements, expected {m} x {k}",
        x.len()
    );
    ensure!(
        out.len() == m * n,
        "{name}_linear: output has {} elements, expected {m} x {n}",
        out.len()
    );
    if let Some(b) = bias {
        ensure!(
            b.len() == n,
            "{name}_linear: bias has {} elements, expected {n}",
            b.len()
        );
    }
    if out.is_empty() {
        return Ok(());
    }
    let xq = match w.format {
        BlockFormat::F16 => None,
        f => Some(quantize_rows_with(x, f == BlockFormat::Q4_0, grouped)),
    };
    let dst = Shared::new(out);
    let piece = |p: usize| {
        let first = p * ROWS;
        let rows = first..(first + ROWS).min(n);
        piece_rows(w, xq.as_ref(), x, m, rows, grouped, |i, r, v| {
            let v = match bias {
                Some(b) => v + b[r],
                None => v,
            };
            // SAFETY: element (i, r) of `out` belongs to this piece alone.
            unsafe { *dst.at(i * n + r) = v };
        });
    };
    let pieces = n.div_ceil(ROWS);
    if crate::pool::parallel(m * n * k, 1 << 17) {
        crate::team::team().run(pieces, &piece);
    } else {
        (0..pieces).for_each(piece);
    }
    Ok(())
}

/// The weight rows `rows` (at most [`ROWS`]) of `w` against every input row of `x`
/// (`[m, cols]`, quantized in `xq` for Q8_0 and Q4_0): `store(i, r, dot)` for each.
/// The rows stay in cache while the input rows pass; a whole piece is taken
/// `AT_ONCE` rows a step (F16: `AT_ONCE_F16`), `ROWS / at_once` apart, so that
/// each of the streams read at once stays sequential for longer; a short piece
/// in runs of consecutive rows, then one at a time. `grouped` false takes one
/// row at a time (the same bits).
pub(crate) fn piece_rows(
    w: &BlockWeight,
    xq: Option<&QuantizedRows>,
    x: &[f32],
    m: usize,
    rows: std::ops::Range<usize>,
    grouped: bool,
    mut store: impl FnMut(usize, usize, f32),
) {
    let k = w.cols;
    let kb = k / QK;
    // Input row i against the weight rows `rs` (one, or as many as the format
    // takes at once), into y.
    let dots = |rs: &[usize], i: usize, y: &mut [f32]| {
        let xi = &x[i * k..(i + 1) * k];
        let codes = xq.map(|a| {
            (
                &a.q[i * k..(i + 1) * k],
                &a.scales[i * kb..(i + 1) * kb],
                &a.sums[(i * kb * 8).min(a.sums.len())..((i + 1) * kb * 8).min(a.sums.len())],
            )
        });
        match (w.format, codes, rs.len()) {
            (BlockFormat::F16, _, AT_ONCE_F16) => {
                let rows = std::array::from_fn(|j| w.row(rs[j]));
                y.copy_from_slice(&dot_rows_f16::<AT_ONCE_F16>(rows, xi));
            }
            (BlockFormat::Q8_0, Some((q, s, _)), AT_ONCE) => {
                let rows = std::array::from_fn(|j| w.row(rs[j]));
                y.copy_from_slice(&dot_rows_q8_0::<AT_ONCE>(rows, q, s));
            }
            (BlockFormat::Q4_0, Some((q, s, sums)), AT_ONCE) => {
                let rows = std::array::from_fn(|j| w.row(rs[j]));
                y.copy_from_slice(&dot_rows_q4_0::<AT_ONCE>(rows, q, s, sums));
            }
            (format, codes, _) => {
                for (o, &r) in y.iter_mut().zip(rs) {
                    *o = match (format, codes) {
                        (BlockFormat::Q8_0, Some((q, s, _))) => dot_q8_0(w.row(r), q, s),
                        (BlockFormat::Q4_0, Some((q, s, sums))) => dot_q4_0(w.row(r), q, s, sums),
                        _ => dot_f16(w.row(r), xi),
                    };
                }
            }
        }
    };
    let at_once = match (grouped, w.format) {
        (false, _) => 1,
        (true, BlockFormat::F16) => AT_ONCE_F16,
        (true, _) => AT_ONCE,
    };
    let (first, last) = (rows.start, rows.end);
    let mut groups = [[0usize; AT_ONCE]; ROWS];
    let mut lens = [0usize; ROWS];
    let mut count = 0;
    if last - first == ROWS && at_once > 1 {
        let apart = ROWS / at_once;
        for j in 0..apart {
            groups[j] = std::array::from_fn(|t| first + j + (t % at_once) * apart);
            lens[j] = at_once;
        }
        count = apart;
    } else {
        let mut r = first;
        while r < last {
            let take = if r + at_once <= last { at_once } else { 1 };
            groups[count] = std::array::from_fn(|t| r + t % take);
            lens[count] = take;
            count += 1;
            r += take;
        }
    }
    let mut y = [0.0f32; AT_ONCE];
    for i in 0..m {
        for (g, &len) in groups[..count].iter().zip(&lens) {
            dots(&g[..len], i, &mut y[..len]);
            for (&r, &v) in g[..len].iter().zip(&y[..len]) {
                store(i, r, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(v: f32) -> [u8; 2] {
        // Exact for the small dyadic values the tests use.
        let bits = v.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
        let mant = ((bits >> 13) & 0x3ff) as u16;
        let h = if v == 0.0 {
            sign
        } else {
            sign | ((exp as u16) << 10) | mant
        };
        h.to_le_bytes()
    }

    /// A weight of `rows x cols` in `format` with patterned bytes.
    fn weight(format: BlockFormat, rows: usize, cols: usize) -> Vec<u8> {
        let mut data = Vec::new();
        for r in 0..rows {
            match format {
                BlockFormat::F16 => {
                    for c in 0..cols {
                        data.extend(half(((r * 7 + c * 3) % 19) as f32 / 8.0 - 1.0));
                    }
                }
                _ => {
                    for b in 0..cols / QK {
                        data.extend(half(0.25 + ((r + b) % 5) as f32 / 16.0));
                        let n = if format == BlockFormat::Q8_0 { 32 } else { 16 };
                        data.extend((0..n).map(|j| ((r * 31 + b * 17 + j * 13) % 256) as u8));
                    }
                }
            }
        }
        data
    }

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
    fn linear_is_close_to_the_dequantized_product_and_rows_do_not_depend_on_m() {
        for format in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::F16] {
            for &(rows, cols, m) in &[(70, 384, 3), (5, 32, 1), (33, 96, 2)] {
                let data = weight(format, rows, cols);
                let w = BlockWeight {
                    format,
                    data: &data,
                    rows,
                    cols,
                };
                let mut dense = vec![0.0; rows * cols];
                dequantize(&w, &mut dense).unwrap();
                let x: Vec<f32> = (0..m * cols)
                    .map(|i| ((i * 13 % 17) as f32 - 8.0) / 8.0)
                    .collect();
                let bias: Vec<f32> = (0..rows).map(|r| r as f32 * 0.01).collect();
                let mut out = vec![0.0; m * rows];
                linear(&w, &x, m, Some(&bias), &mut out).unwrap();
                for i in 0..m {
                    let mut one = vec![0.0; rows];
                    linear(&w, &x[i * cols..(i + 1) * cols], 1, Some(&bias), &mut one).unwrap();
                    assert_eq!(one, out[i * rows..(i + 1) * rows]);
                    for r in 0..rows {
                        let exact: f64 = (0..cols)
                            .map(|c| dense[r * cols + c] as f64 * x[i * cols + c] as f64)
                            .sum::<f64>()
                            + bias[r] as f64;
                        let norm: f64 = (0..cols)
                            .map(|c| (dense[r * cols + c] as f64 * x[i * cols + c] as f64).abs())
                            .sum();
                        // 8-bit activations: about 1/254 of each product at most.
                        let tol = match format {
                            BlockFormat::F16 => 1e-5 * (1.0 + norm),
                            _ => norm / 250.0 + 1e-5,
                        };
                        let got = out[i * rows + r] as f64;
                        assert!(
                            (got - exact).abs() <= tol,
                            "{format:?} {r}: {got} vs {exact}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn non_finite_inputs_give_nan() {
        let data = weight(BlockFormat::Q8_0, 2, 32);
        let w = BlockWeight {
            format: BlockFormat::Q8_0,
            data: &data,
            rows: 2,
            cols: 32,
        };
        let mut x = vec![1.0; 32];
        x[3] = f32::NAN;
        let mut out = vec![0.0; 2];
        linear(&w, &x, 1, None, &mut out).unwrap();
        assert!(out.iter().all(|v| v.is_nan()));
        x[3] = f32::INFINITY;
        linear(&w, &x, 1, None, &mut out).unwrap();
        assert!(out.iter().all(|v| v.is_nan()));
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

    #[test]
    fn several_rows_at_once_match_one_row_at_a_time_bit_for_bit() {
        for format in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::F16] {
            // Whole pieces, a short last piece, fewer rows than a step.
            for &(rows, cols, m) in &[(64, 384, 1), (37, 96, 3), (3, 32, 2), (16, 1536, 1)] {
                let data = weight(format, rows, cols);
                let w = BlockWeight {
                    format,
                    data: &data,
                    rows,
                    cols,
                };
                let x: Vec<f32> = (0..m * cols)
                    .map(|i| ((i * 31 % 23) as f32 - 11.0) / 3.0)
                    .collect();
                let bias: Vec<f32> = (0..rows).map(|r| r as f32 * 0.5 - 3.0).collect();
                for b in [None, Some(&bias[..])] {
                    let mut fast = vec![0.0; m * rows];
                    let mut slow = vec![1.0; m * rows];
                    linear(&w, &x, m, b, &mut fast).unwrap();
                    linear_row_by_row(&w, &x, m, b, &mut slow).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&fast), bits(&slow), "{format:?} {rows}x{cols} m={m}");
                }
            }
        }
    }

    #[test]
    fn the_fast_quantization_matches_the_portable_one() {
        let mut x: Vec<f32> = (0..32 * 40)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * [1.0, 0.01, 3e-39, 1e30][i / 320])
            .collect();
        // Ties (a block whose largest magnitude is 127 has the scale 1).
        for (j, v) in x[..32].iter_mut().enumerate() {
            *v = if j == 0 {
                127.0
            } else {
                (j as f32 - 16.0) + 0.5
            };
        }
        x[40] = -0.0;
        x[70] = f32::NAN;
        x[100] = f32::INFINITY;
        x[130] = f32::NEG_INFINITY;
        x[160..192].fill(0.0);
        x[200] = f32::MIN_POSITIVE;
        x.extend([1.0, 2.0, 3.0]); // a tail that is not a block
        for with_sums in [false, true] {
            let fast = quantize_rows(&x, with_sums);
            let blocks = x.len() / QK;
            let mut q = vec![0i8; x.len()];
            let mut scales = vec![0.0f32; blocks];
            let mut sums = vec![0i32; if with_sums { blocks * 8 } else { 0 }];
            quantize_portable(&x, &mut q, &mut scales, &mut sums);
            assert_eq!(fast.q, q);
            assert_eq!(fast.sums, sums);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast.scales), bits(&scales));
            // Half away from zero: -14.5, -13.5, -12.5 and 0.5.
            assert_eq!([q[1], q[2], q[3], q[16]], [-15, -14, -13, 1]);
        }
    }
}
