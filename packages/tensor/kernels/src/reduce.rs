//! Reductions over one axis of a `[outer, n, inner]` view.
//!
//! Each output element is accumulated in a fixed order (eight lanes over
//! fixed blocks of the reduced axis, combined in index order), so results do
//! not depend on the thread count.

use crate::lanes::{fold, max_nan, min_nan, sum_of};
use crate::pool::{for_each_chunk_mut, for_each_mut, parallel, PARALLEL_THRESHOLD};
use crate::{ensure, multiversion, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    SumSquares,
}

impl ReduceOp {
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "sum" => Self::Sum,
            "mean" => Self::Mean,
            "max" => Self::Max,
            "min" => Self::Min,
            "sum_squares" => Self::SumSquares,
            _ => return None,
        })
    }
}

/// Elements of a contiguous row reduced as one block.
const BLOCK: usize = 1 << 14;

multiversion! {
    fn block_f32(op: ReduceOp, x: &[f32]) -> f64 {
        match op {
            ReduceOp::Sum | ReduceOp::Mean => sum_of(x, |v| v) as f64,
            ReduceOp::SumSquares => {
                let mut wide = [0.0f64; 4];
                for c in x.chunks_exact(4) { for j in 0..4 { wide[j] += (c[j] as f64) * (c[j] as f64); } }
                let mut s = wide[0] + wide[1] + wide[2] + wide[3];
                for &v in x.chunks_exact(4).remainder() { s += (v as f64) * (v as f64); }
                s
            }
            ReduceOp::Max => fold(x, f32::NEG_INFINITY, max_nan) as f64,
            ReduceOp::Min => fold(x, f32::INFINITY, min_nan) as f64,
        }
    }
}

fn combine(op: ReduceOp, parts: impl Iterator<Item = f64>) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => parts.fold(0.0f32, |a, b| a + b as f32) as f64,
        ReduceOp::SumSquares => parts.sum(),
        ReduceOp::Max => parts.fold(f32::NEG_INFINITY, |a, b| max_nan(a, b as f32)) as f64,
        ReduceOp::Min => parts.fold(f32::INFINITY, |a, b| min_nan(a, b as f32)) as f64,
    }
}

fn finish(op: ReduceOp, v: f64, n: usize) -> f32 {
    match op {
        ReduceOp::Mean => (v as f32) / n as f32,
        _ => v as f32,
    }
}

fn row_f32(op: ReduceOp, x: &[f32], parallel: bool) -> f32 {
    let v = if x.len() <= BLOCK {
        block_f32(op, x)
    } else if parallel {
        let mut parts = vec![0.0f64; x.len().div_ceil(BLOCK)];
        for_each_mut(&mut parts, true, |i, part| {
            *part = block_f32(op, &x[i * BLOCK..((i + 1) * BLOCK).min(x.len())])
        });
        combine(op, parts.into_iter())
    } else {
        combine(op, x.chunks(BLOCK).map(|b| block_f32(op, b)))
    };
    finish(op, v, x.len())
}

/// Columns a piece of a reduction over the middle axis takes.
const COLUMNS: usize = 64;

multiversion! {
    fn columns_f32(op: ReduceOp, x: &[f32], n: usize, inner: usize, out: &mut [f32]) {
        // out[j] = reduce_i x[i * inner + j] for the out.len() columns from x[0],
        // accumulated in i order.
        let width = out.len();
        let mut acc: Vec<f64> = vec![0.0; if op == ReduceOp::SumSquares { width } else { 0 }];
        match op {
            ReduceOp::Sum | ReduceOp::Mean => out.fill(0.0),
            ReduceOp::Max => out.fill(f32::NEG_INFINITY),
            ReduceOp::Min => out.fill(f32::INFINITY),
            ReduceOp::SumSquares => {}
        }
        for i in 0..n {
            let row = &x[i * inner..i * inner + width];
            match op {
                ReduceOp::Sum | ReduceOp::Mean => for (o, &v) in out.iter_mut().zip(row) { *o += v },
                ReduceOp::Max => for (o, &v) in out.iter_mut().zip(row) { *o = max_nan(*o, v) },
                ReduceOp::Min => for (o, &v) in out.iter_mut().zip(row) { *o = min_nan(*o, v) },
                ReduceOp::SumSquares => for (o, &v) in acc.iter_mut().zip(row) { *o += (v as f64) * (v as f64) },
            }
        }
        match op {
            ReduceOp::Mean => { let d = n as f32; for o in out.iter_mut() { *o /= d } }
            ReduceOp::SumSquares => for (o, &a) in out.iter_mut().zip(&acc) { *o = a as f32 },
            _ => {}
        }
    }
}

/// Reduce `x` viewed as `[outer, n, inner]` over its middle axis into `out` `[outer, inner]`.
pub fn reduce_f32(
    op: ReduceOp,
    x: &[f32],
    outer: usize,
    n: usize,
    inner: usize,
    out: &mut [f32],
) -> Result<()> {
    ensure!(
        x.len() == outer * n * inner,
        "reduce {op:?}: input has {} elements, expected {}",
        x.len(),
        outer * n * inner
    );
    ensure!(
        out.len() == outer * inner,
        "reduce {op:?}: output has {} elements, expected {}",
        out.len(),
        outer * inner
    );
    if out.is_empty() {
        return Ok(());
    }
    let parallel = parallel(x.len(), PARALLEL_THRESHOLD);
    if inner == 1 {
        if outer == 1 {
            out[0] = row_f32(op, x, parallel);
        } else {
            for_each_mut(out, parallel, |o, v| {
                *v = row_f32(op, &x[o * n..(o + 1) * n], false)
            });
        }
        return Ok(());
    }
    // Pieces of COLUMNS columns of one outer slab (each column summed down its
    // rows alone, in order: the pieces do not change the bits), so that one slab
    // (a bias gradient's column sums) runs on every thread too.
    let (slab, blocks) = (n * inner, inner.div_ceil(COLUMNS));
    let mut pieces: Vec<(usize, &mut [f32])> = out
        .chunks_mut(inner)
        .enumerate()
        .flat_map(|(o, row)| {
            row.chunks_mut(COLUMNS)
                .enumerate()
                .map(move |(b, c)| (o * blocks + b, c))
        })
        .collect();
    for_each_mut(&mut pieces, parallel, |_, (t, dst)| {
        let (o, j0) = (*t / blocks, *t % blocks * COLUMNS);
        columns_f32(op, &x[o * slab + j0..(o + 1) * slab], n, inner, dst)
    });
    Ok(())
}

/// Integer reductions (sum, max, min) in index order.
pub fn reduce_i64(
    op: ReduceOp,
    x: &[i64],
    outer: usize,
    n: usize,
    inner: usize,
    out: &mut [i64],
) -> Result<()> {
    ensure!(
        x.len() == outer * n * inner && out.len() == outer * inner,
        "reduce {op:?}: sizes disagree"
    );
    let (init, f): (i64, fn(i64, i64) -> i64) = match op {
        ReduceOp::Sum => (0, i64::wrapping_add),
        ReduceOp::Max => (i64::MIN, i64::max),
        ReduceOp::Min => (i64::MAX, i64::min),
        _ => {
            return Err(crate::KernelError(format!(
                "reduce {op:?} is not defined for int64"
            )))
        }
    };
    for o in 0..outer {
        for j in 0..inner {
            out[o * inner + j] = (0..n).fold(init, |acc, i| f(acc, x[(o * n + i) * inner + j]));
        }
    }
    Ok(())
}

/// NaN is the only value unequal to itself (works for any PartialOrd type).
#[allow(clippy::eq_op)]
#[inline(always)]
fn is_nan<T: PartialOrd>(v: T) -> bool {
    v != v
}

/// Index of the largest element along the middle axis (first one on ties; NaN wins).
pub fn argmax<T: Copy + PartialOrd + Send + Sync>(
    x: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    out: &mut [i64],
) -> Result<()> {
    ensure!(n > 0, "argmax over an empty axis");
    ensure!(
        x.len() == outer * n * inner && out.len() == outer * inner,
        "argmax: sizes disagree"
    );
    let work = |(o, dst): (usize, &mut [i64])| {
        for (j, d) in dst.iter_mut().enumerate() {
            let mut best = 0usize;
            let mut best_v = x[o * n * inner + j];
            for i in 1..n {
                let v = x[(o * n + i) * inner + j];
                if !is_nan(best_v) && (v > best_v || is_nan(v)) {
                    best = i;
                    best_v = v;
                }
            }
            *d = best as i64;
        }
    };
    if inner > 0 {
        let parallel = x.len() >= PARALLEL_THRESHOLD && outer > 1;
        for_each_chunk_mut(out, inner, parallel, |i, c| work((i, c)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_max() {
        let x: Vec<f32> = (0..24).map(|v| v as f32).collect(); // [2,3,4]
        let mut out = vec![0.0; 8];
        reduce_f32(ReduceOp::Sum, &x, 2, 3, 4, &mut out).unwrap();
        assert_eq!(out, [12.0, 15.0, 18.0, 21.0, 48.0, 51.0, 54.0, 57.0]);
        let mut out = vec![0.0; 6];
        reduce_f32(ReduceOp::Max, &x, 6, 4, 1, &mut out).unwrap();
        assert_eq!(out, [3.0, 7.0, 11.0, 15.0, 19.0, 23.0]);
        let mut idx = vec![0; 2];
        argmax(&[1.0f32, 5.0, 5.0, 0.0, 2.0, 1.0], 2, 3, 1, &mut idx).unwrap();
        assert_eq!(idx, [1, 1]);
    }

    #[test]
    fn long_rows_are_thread_count_independent() {
        let x: Vec<f32> = (0..300_000u64)
            .map(|v| ((v * 7919) % 1000) as f32 * 1e-3)
            .collect();
        let mut a = [0.0f32];
        let mut b = [0.0f32];
        crate::pool::set_num_threads(1);
        reduce_f32(ReduceOp::Sum, &x, 1, x.len(), 1, &mut a).unwrap();
        crate::pool::set_num_threads(2);
        reduce_f32(ReduceOp::Sum, &x, 1, x.len(), 1, &mut b).unwrap();
        assert_eq!(a[0].to_bits(), b[0].to_bits());
    }

    /// Column sums taken in pieces of COLUMNS columns on the team: each column
    /// the in-order sum down its rows, whatever the threads, a short last piece
    /// and several slabs included.
    #[test]
    fn column_pieces_sum_each_column_in_row_order() {
        let (outer, n, inner) = (3, 700, 2 * COLUMNS + 37);
        let x: Vec<f32> = (0..outer * n * inner)
            .map(|v| ((v * 7919) % 1013) as f32 * 1e-3 - 0.5)
            .collect();
        let mut want = vec![0.0f32; outer * inner];
        for o in 0..outer {
            for j in 0..inner {
                for i in 0..n {
                    want[o * inner + j] += x[(o * n + i) * inner + j];
                }
            }
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for threads in [1, 2] {
            crate::pool::set_num_threads(threads);
            for o in [1, outer] {
                let mut out = vec![f32::NAN; o * inner];
                reduce_f32(ReduceOp::Sum, &x[..o * n * inner], o, n, inner, &mut out).unwrap();
                assert_eq!(
                    bits(&out),
                    bits(&want[..o * inner]),
                    "{threads} threads, {o} slabs"
                );
            }
        }
    }
}
