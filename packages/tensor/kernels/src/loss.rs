//! Softmax cross-entropy fused over rows of logits `[rows, classes]`.
//!
//! The forward pass keeps only each row's log-sum-exp; the backward pass
//! recomputes the probabilities from the logits, so no softmax copy is kept.
//! Rows whose target equals `ignore_index` have loss 0 and gradient 0.

use crate::lanes::{max_nan_of, sum_of};
use crate::pool::{for_chunks, for_each_chunk_mut};
use crate::{ensure, math, multiversion, Result};

multiversion! {
    fn log_sum_exp(x: &[f32]) -> f32 {
        let max = max_nan_of(x);
        if max == f32::NEG_INFINITY || max.is_nan() || max == f32::INFINITY {
            return max;
        }
        max + math::ln(sum_of(x, |v| math::exp(v - max)))
    }
}

multiversion! {
    fn softmax_grad_row(x: &[f32], lse: f32, g: f32, out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = math::exp(v - lse) * g;
        }
    }
}

fn check_targets(targets: &[i64], classes: usize, ignore_index: i64) -> Result<()> {
    for (r, &t) in targets.iter().enumerate() {
        ensure!(
            t == ignore_index || (t >= 0 && (t as usize) < classes),
            "cross_entropy: target {t} of row {r} is out of range for {classes} classes (ignore index {ignore_index})"
        );
    }
    Ok(())
}

fn rows_per_piece(classes: usize) -> usize {
    (8192 / classes.max(1)).max(1)
}

/// Per-row loss `lse - x[target]` (0 for ignored rows) and per-row log-sum-exp.
pub fn cross_entropy(
    logits: &[f32],
    classes: usize,
    targets: &[i64],
    ignore_index: i64,
    losses: &mut [f32],
    lse: &mut [f32],
) -> Result<()> {
    let rows = targets.len();
    ensure!(classes > 0, "cross_entropy: zero classes");
    ensure!(
        logits.len() == rows * classes,
        "cross_entropy: {} logits for {rows} rows of {classes}",
        logits.len()
    );
    ensure!(
        losses.len() == rows && lse.len() == rows,
        "cross_entropy: outputs for {} rows, expected {rows}",
        losses.len()
    );
    check_targets(targets, classes, ignore_index)?;
    let piece = rows_per_piece(classes);
    // Parallel by the logits' size: the statistics alone are one float a row.
    let parallel = crate::pool::parallel(logits.len(), crate::pool::PARALLEL_THRESHOLD);
    for_each_chunk_mut(lse, piece, parallel, |p, out| {
        for (i, o) in out.iter_mut().enumerate() {
            let r = p * piece + i;
            *o = log_sum_exp(&logits[r * classes..(r + 1) * classes]);
        }
    });
    for (r, (loss, &t)) in losses.iter_mut().zip(targets).enumerate() {
        *loss = if t == ignore_index {
            0.0
        } else {
            lse[r] - logits[r * classes + t as usize]
        };
    }
    Ok(())
}

/// `dlogits[r] = (softmax(x[r]) - onehot(target[r])) * grad[r]`; 0 for ignored rows.
pub fn cross_entropy_backward(
    logits: &[f32],
    classes: usize,
    targets: &[i64],
    lse: &[f32],
    grad: &[f32],
    ignore_index: i64,
    dlogits: &mut [f32],
) -> Result<()> {
    let rows = targets.len();
    ensure!(classes > 0, "cross_entropy backward: zero classes");
    ensure!(
        logits.len() == rows * classes && dlogits.len() == logits.len(),
        "cross_entropy backward: {} logits and {} gradients for {rows} rows of {classes}",
        logits.len(),
        dlogits.len()
    );
    ensure!(
        lse.len() == rows && grad.len() == rows,
        "cross_entropy backward: statistics for {} rows, expected {rows}",
        lse.len()
    );
    check_targets(targets, classes, ignore_index)?;
    let piece = rows_per_piece(classes);
    for_chunks(dlogits, piece * classes, |p, out| {
        for (i, row) in out.chunks_mut(classes).enumerate() {
            let r = p * piece + i;
            let t = targets[r];
            if t == ignore_index {
                row.fill(0.0);
                continue;
            }
            softmax_grad_row(
                &logits[r * classes..(r + 1) * classes],
                lse[r],
                grad[r],
                row,
            );
            row[t as usize] -= grad[r];
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_and_gradient() {
        let logits = [1.0f32, 2.0, 3.0, 0.5, 0.5, 0.5];
        let targets = [2i64, -100];
        let (mut loss, mut lse) = ([0.0f32; 2], [0.0f32; 2]);
        cross_entropy(&logits, 3, &targets, -100, &mut loss, &mut lse).unwrap();
        let want = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln() - 3.0;
        assert!((loss[0] as f64 - want).abs() < 1e-6);
        assert_eq!(loss[1], 0.0);
        let mut d = [0.0f32; 6];
        cross_entropy_backward(&logits, 3, &targets, &lse, &[2.0, 1.0], -100, &mut d).unwrap();
        assert!((d[0] + d[1] + d[2]).abs() < 1e-6 && d[2] < 0.0);
        assert_eq!(&d[3..], &[0.0; 3]);
        assert!(cross_entropy(&logits, 3, &[3, 0], -100, &mut loss, &mut lse).is_err());
    }

    /// Rows of logits large enough for the team: each row's statistics and loss
    /// are the one-row computation's, whatever the threads.
    #[test]
    fn many_rows_have_each_rows_bits() {
        let (rows, classes) = (600, 500);
        let logits: Vec<f32> = (0..rows * classes)
            .map(|v| ((v * 7919) % 997) as f32 * 0.01 - 5.0)
            .collect();
        let targets: Vec<i64> = (0..rows as i64)
            .map(|r| (r * 37) % classes as i64)
            .collect();
        let mut runs = Vec::new();
        for threads in [1, 2] {
            crate::pool::set_num_threads(threads);
            let (mut loss, mut lse) = (vec![0.0f32; rows], vec![0.0f32; rows]);
            cross_entropy(&logits, classes, &targets, -100, &mut loss, &mut lse).unwrap();
            runs.push((loss, lse));
        }
        let (mut one, mut one_lse) = ([0.0f32], [0.0f32]);
        for r in [0, 299, rows - 1] {
            let row = &logits[r * classes..(r + 1) * classes];
            cross_entropy(
                row,
                classes,
                &targets[r..r + 1],
                -100,
                &mut one,
                &mut one_lse,
            )
            .unwrap();
            for (loss, lse) in &runs {
                assert_eq!(
                    (loss[r].to_bits(), lse[r].to_bits()),
                    (one[0].to_bits(), one_lse[0].to_bits())
                );
            }
        }
    }
}
