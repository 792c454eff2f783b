//! `x @ W^T` against a block-layout weight (see [`super`]): the input quantized
//! once, the output split into pieces of [`ROWS`] weight rows for the team, and
//! within a piece the weight rows grouped so that several are dotted with an
//! input row at once.

use super::dot::{dot_f16, dot_q4_0, dot_q8_0, dot_rows_f16, dot_rows_q4_0, dot_rows_q8_0};
use super::quantize::{quantize_rows_with, QuantizedRows};
use super::{BlockFormat, BlockWeight, QK};
use crate::pool::Shared;
use crate::{ensure, Result};

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
    let at_once = match (grouped, w.format) {
        (false, _) => 1,
        (true, BlockFormat::F16) => AT_ONCE_F16,
        (true, _) => AT_ONCE,
    };
    let groups = Groups::of(rows, at_once);
    let mut y = [0.0f32; AT_ONCE];
    for i in 0..m {
        for (g, &len) in groups.rows[..groups.count].iter().zip(&groups.lens) {
            dots(w, xq, x, &g[..len], i, &mut y[..len]);
            for (&r, &v) in g[..len].iter().zip(&y[..len]) {
                store(i, r, v);
            }
        }
    }
}

/// The weight rows of a piece in the groups that are dotted at once.
struct Groups {
    /// The rows of group `j` are `rows[j][..lens[j]]`.
    rows: [[usize; AT_ONCE]; ROWS],
    lens: [usize; ROWS],
    count: usize,
}

impl Groups {
    /// A whole piece of `ROWS` rows as `ROWS / at_once` groups of rows
    /// `ROWS / at_once` apart; a short one in runs of `at_once` consecutive
    /// rows, then one at a time.
    fn of(rows: std::ops::Range<usize>, at_once: usize) -> Groups {
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
        Groups {
            rows: groups,
            lens,
            count,
        }
    }
}

/// Input row `i` of `x` (`xq` its codes) against the weight rows `rs` of `w`
/// (one, or as many as the format takes at once), into `y`.
#[inline(always)]
fn dots(
    w: &BlockWeight,
    xq: Option<&QuantizedRows>,
    x: &[f32],
    rs: &[usize],
    i: usize,
    y: &mut [f32],
) {
    let k = w.cols;
    let kb = k / QK;
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
}

#[cfg(test)]
mod tests {
    use super::super::dequantize;
    use super::super::test_weights::weight;
    use super::*;

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
}
