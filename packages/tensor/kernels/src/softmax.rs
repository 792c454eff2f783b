//! Numerically stable softmax and log-softmax over the last axis, with an
//! optional causal mask.

use crate::lanes::{max_nan_of, sum_of};
use crate::pool::for_chunks;
use crate::{ensure, math, multiversion, Result};

/// Causal masking for rows of a `[..., t, s]` score tensor: query row q (of t)
/// may see keys `0..=q + s - t`; masked keys get probability exactly 0.
#[derive(Debug, Clone, Copy)]
pub struct Causal {
    pub queries: usize,
}

multiversion! {
    fn row(x: &[f32], out: &mut [f32], visible: usize, log: bool) {
        let (xs, masked) = (&x[..visible], &mut out[visible..]);
        masked.fill(if log { f32::NEG_INFINITY } else { 0.0 });
        let out = &mut out[..visible];
        let max = max_nan_of(xs);
        // A row of -inf has no finite maximum; shift by 0 so it yields NaN like numpy.
        let shift = if max == f32::NEG_INFINITY { 0.0 } else { max };
        // One exp per element: softmax keeps e^(x - max) in `out` and scales it;
        // log-softmax keeps x - max and subtracts log(sum).
        let sum = if log {
            for (o, &v) in out.iter_mut().zip(xs) {
                *o = v - shift;
            }
            sum_of(out, math::exp)
        } else {
            for (o, &v) in out.iter_mut().zip(xs) {
                *o = math::exp(v - shift);
            }
            sum_of(out, |v| v)
        };
        if log {
            let log_sum = math::ln(sum);
            for o in out.iter_mut() {
                *o -= log_sum;
            }
        } else {
            let inv = 1.0 / sum;
            for o in out.iter_mut() {
                *o *= inv;
            }
        }
    }
}

/// Softmax (or log-softmax) of each row of `x` `[rows, n]`.
pub fn softmax_f32(
    x: &[f32],
    rows: usize,
    n: usize,
    causal: Option<Causal>,
    log: bool,
    out: &mut [f32],
) -> Result<()> {
    ensure!(
        x.len() == rows * n && out.len() == rows * n,
        "softmax: {} elements for {rows} rows of {n}",
        x.len()
    );
    if let Some(c) = causal {
        ensure!(
            c.queries > 0 && c.queries <= n,
            "softmax: causal mask with {} queries over {n} keys",
            c.queries
        );
        ensure!(
            rows.is_multiple_of(c.queries),
            "softmax: {rows} rows are not a multiple of {} queries",
            c.queries
        );
    }
    if n == 0 {
        return Ok(());
    }
    let rows_per_chunk = (4096 / n).max(1);
    for_chunks(out, rows_per_chunk * n, |ci, chunk| {
        for (r, dst) in chunk.chunks_mut(n).enumerate() {
            let global = ci * rows_per_chunk + r;
            let visible = match causal {
                Some(c) => global % c.queries + 1 + (n - c.queries),
                None => n,
            };
            row(&x[global * n..(global + 1) * n], dst, visible, log);
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_masked() {
        let x = [1000.0f32, 1000.0, 0.0, 5.0, 6.0, 7.0];
        let mut out = [0.0f32; 6];
        softmax_f32(&x, 2, 3, None, false, &mut out).unwrap();
        assert!((out[0] - 0.5).abs() < 1e-6 && out[2] == 0.0);
        softmax_f32(&x, 2, 3, Some(Causal { queries: 2 }), false, &mut out).unwrap();
        // row 0 sees keys 0..=1, row 1 sees all three
        assert_eq!(out[2], 0.0);
        assert!((out[0] - 0.5).abs() < 1e-6);
        assert!((out[3..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}
