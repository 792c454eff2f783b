//! Kernels of riftco-backend-NAME, in plain Rust (no Python), tested with `cargo test`.
//!
//! Every kernel works on flat, contiguous, row-major slices whose shapes the
//! Python side has already validated; a kernel still checks lengths and returns
//! a [`KernelError`] rather than reading or writing out of bounds. Results must
//! not depend on how work is split (riftco's kernels are deterministic).

use std::fmt;

/// A kernel refused its arguments (they disagree with each other).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError(pub String);

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KernelError {}

pub type Result<T> = std::result::Result<T, KernelError>;

/// Softmax (or, with `log`, log-softmax) of each of the `rows` rows of `n` values in `x`.
///
/// With `causal_queries = t > 0` the rows are `[..., t, n]` scores: row `r` is query
/// `q = r % t` and sees keys `0..=q + n - t`; hidden keys get exactly 0 (log: -inf).
/// A row with no finite maximum gives NaN, as numpy's formula does.
pub fn softmax(
    x: &[f32],
    rows: usize,
    n: usize,
    causal_queries: usize,
    log: bool,
) -> Result<Vec<f32>> {
    if rows.checked_mul(n) != Some(x.len()) {
        return Err(KernelError(format!(
            "softmax: {} values for {rows} rows of {n}",
            x.len()
        )));
    }
    if causal_queries > n || (causal_queries > 0 && rows % causal_queries != 0) {
        return Err(KernelError(format!(
            "softmax: a causal mask of {causal_queries} queries does not fit {rows} rows of {n} keys"
        )));
    }
    let mut out = vec![0.0f32; x.len()];
    if n == 0 {
        return Ok(out);
    }
    for (r, (src, dst)) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
        let visible = if causal_queries == 0 {
            n
        } else {
            r % causal_queries + 1 + n - causal_queries
        };
        row(&src[..visible], &mut dst[..visible], log);
        dst[visible..].fill(if log { f32::NEG_INFINITY } else { 0.0 });
    }
    Ok(out)
}

fn row(x: &[f32], out: &mut [f32], log: bool) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| {
        if m.is_nan() || v.is_nan() {
            f32::NAN
        } else {
            m.max(v)
        }
    });
    let shift = if max == f32::NEG_INFINITY { 0.0 } else { max };
    let sum: f64 = x.iter().map(|&v| f64::from((v - shift).exp())).sum();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = if log {
            (f64::from(v - shift) - sum.ln()) as f32
        } else {
            (f64::from((v - shift).exp()) / sum) as f32
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sum_to_one_and_large_values_are_stable() {
        let out = softmax(&[1000.0, 1000.0, 0.0, 1.0, 2.0, 3.0], 2, 3, 0, false).unwrap();
        assert!((out[0] - 0.5).abs() < 1e-6 && out[2] == 0.0);
        assert!((out[3..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn the_causal_mask_hides_later_keys() {
        // two queries over three keys: query 0 sees keys 0..=1, query 1 all three
        let out = softmax(&[0.0; 6], 2, 3, 2, false).unwrap();
        assert_eq!(out, vec![0.5, 0.5, 0.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0]);
        let log = softmax(&[0.0; 6], 2, 3, 2, true).unwrap();
        assert_eq!(log[2], f32::NEG_INFINITY);
        assert!((log[0] - 0.5f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn disagreeing_arguments_are_errors() {
        assert!(softmax(&[0.0; 5], 2, 3, 0, false).is_err());
        assert!(softmax(&[0.0; 6], 2, 3, 4, false).is_err());
        assert!(softmax(&[0.0; 6], 3, 2, 2, false).is_err());
    }
}
