//! Layer normalization and RMS normalization over the last axis of `[rows, d]`,
//! forward and backward.
//!
//! The forward pass returns the per-row statistics the backward pass needs
//! (mean and reciprocal standard deviation), so nothing else is kept. The
//! parameter gradients are sums over rows: each fixed-size piece of rows
//! produces a partial sum and the partials are added in piece order, so the
//! result does not depend on the thread count.

use crate::lanes::{dot_of, sum_of};
use crate::pool::{for_each_chunk_mut, for_each_mut, SharedMut};
use crate::{ensure, multiversion, Result};

/// Which normalization a kernel computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    /// `(x - mean) / sqrt(var + eps) * w + b`.
    Layer,
    /// `x / sqrt(mean(x^2) + eps) * w`.
    Rms,
}

/// Rows per piece: at most 256 pieces, at least 16 rows each.
fn piece_rows(rows: usize) -> usize {
    rows.div_ceil(256).max(16)
}

/// From this many elements a norm runs on the team (its pieces are fixed by the
/// row count alone, so the bits do not depend on it): `tiny`'s `[512, 128]`
/// activations ran on one thread under the elementwise threshold.
const NORM_THRESHOLD: usize = 1 << 14;

fn parallel(elements: usize) -> bool {
    crate::pool::parallel(elements, NORM_THRESHOLD)
}

multiversion! {
    fn forward_row(norm: Norm, x: &[f32], w: Option<&[f32]>, b: Option<&[f32]>, eps: f32, y: &mut [f32]) -> (f32, f32) {
        let n = x.len() as f32;
        let mean = if norm == Norm::Layer { sum_of(x, |v| v) / n } else { 0.0 };
        let var = sum_of(x, |v| (v - mean) * (v - mean)) / n;
        let rstd = 1.0 / (var + eps).sqrt();
        match (w, b) {
            (Some(w), Some(b)) => {
                for (((o, &v), &wj), &bj) in y.iter_mut().zip(x).zip(w).zip(b) {
                    *o = ((v - mean) * rstd).mul_add(wj, bj);
                }
            }
            (Some(w), None) => {
                for ((o, &v), &wj) in y.iter_mut().zip(x).zip(w) {
                    *o = (v - mean) * rstd * wj;
                }
            }
            (None, Some(b)) => {
                for ((o, &v), &bj) in y.iter_mut().zip(x).zip(b) {
                    *o = (v - mean) * rstd + bj;
                }
            }
            (None, None) => {
                for (o, &v) in y.iter_mut().zip(x) {
                    *o = (v - mean) * rstd;
                }
            }
        }
        (mean, rstd)
    }
}

/// Normalize each row of `x` `[rows, d]` into `y`; `mean` (layer norm only)
/// and `rstd` receive one value per row.
#[allow(clippy::too_many_arguments)]
pub fn norm_forward(
    norm: Norm,
    x: &[f32],
    d: usize,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    eps: f32,
    y: &mut [f32],
    mean: Option<&mut [f32]>,
    rstd: &mut [f32],
) -> Result<()> {
    ensure!(d > 0, "{norm:?} norm: rows of zero elements");
    let rows = x.len() / d;
    ensure!(
        x.len() == rows * d && y.len() == x.len(),
        "{norm:?} norm: {} inputs, {} outputs for rows of {d}",
        x.len(),
        y.len()
    );
    ensure!(
        rstd.len() == rows,
        "{norm:?} norm: {} statistics for {rows} rows",
        rstd.len()
    );
    ensure!(
        weight.is_none_or(|w| w.len() == d),
        "{norm:?} norm: weight of {} for rows of {d}",
        weight.map_or(0, <[f32]>::len)
    );
    ensure!(
        bias.is_none_or(|b| b.len() == d),
        "{norm:?} norm: bias of {} for rows of {d}",
        bias.map_or(0, <[f32]>::len)
    );
    ensure!(
        norm == Norm::Layer || bias.is_none(),
        "RMS norm takes no bias"
    );
    let mut mean_scratch;
    let mean = match mean {
        Some(m) => {
            ensure!(
                m.len() == rows,
                "{norm:?} norm: {} means for {rows} rows",
                m.len()
            );
            m
        }
        None => {
            mean_scratch = vec![0.0f32; rows];
            &mut mean_scratch[..]
        }
    };
    let (means, rstds) = (SharedMut::new(mean), SharedMut::new(rstd));
    for_each_chunk_mut(y, d, parallel(x.len()), |r, yr| {
        let stats = forward_row(norm, &x[r * d..(r + 1) * d], weight, bias, eps, yr);
        // SAFETY: row r's statistics are written by this piece alone, and both
        // slices hold `rows` elements (checked above).
        unsafe { (*means.at(r), *rstds.at(r)) = stats };
    });
    Ok(())
}

/// One `[d]` slice of partial sums per piece, or `None`s when not wanted.
fn split_partials(v: &mut [f32], d: usize, pieces: usize) -> Vec<Option<&mut [f32]>> {
    if v.is_empty() {
        (0..pieces).map(|_| None).collect()
    } else {
        v.chunks_mut(d).map(Some).collect()
    }
}

multiversion! {
    /// dx of one row; adds this row's `dy * xhat` and `dy` into the partials.
    fn backward_row(
        norm: Norm, x: &[f32], dy: &[f32], w: Option<&[f32]>, stats: (f32, f32),
        dx: &mut [f32], partials: (Option<&mut [f32]>, Option<&mut [f32]>),
    ) {
        let ((mean, rstd), (dw, db)) = (stats, partials);
        let n = x.len() as f32;
        // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w
        for (o, (&gv, &wv)) in dx.iter_mut().zip(dy.iter().zip(w.unwrap_or(dy))) {
            *o = if w.is_some() { gv * wv } else { gv };
        }
        let g_mean = if norm == Norm::Layer { sum_of(dx, |v| v) / n } else { 0.0 };
        let gx_mean = dot_of(dx, x, |xv| (xv - mean) * rstd) / n;
        for (o, &xv) in dx.iter_mut().zip(x) {
            let xhat = (xv - mean) * rstd;
            *o = rstd * (*o - g_mean - xhat * gx_mean);
        }
        if let Some(dw) = dw {
            for ((acc, &g), &xv) in dw.iter_mut().zip(dy).zip(x) {
                *acc = g.mul_add((xv - mean) * rstd, *acc);
            }
        }
        if let Some(db) = db {
            for (acc, &g) in db.iter_mut().zip(dy) {
                *acc += g;
            }
        }
    }
}

/// Gradients of [`norm_forward`]: `dx` `[rows, d]`, and when asked, the weight
/// gradient `dw` and bias gradient `db` `[d]` (sums over rows).
#[allow(clippy::too_many_arguments)]
pub fn norm_backward(
    norm: Norm,
    x: &[f32],
    dy: &[f32],
    d: usize,
    weight: Option<&[f32]>,
    mean: Option<&[f32]>,
    rstd: &[f32],
    dx: &mut [f32],
    dw: Option<&mut [f32]>,
    db: Option<&mut [f32]>,
) -> Result<()> {
    ensure!(d > 0, "{norm:?} norm backward: rows of zero elements");
    let rows = x.len() / d;
    ensure!(
        x.len() == rows * d && dy.len() == x.len() && dx.len() == x.len(),
        "{norm:?} norm backward: x {}, dy {}, dx {} elements for rows of {d}",
        x.len(),
        dy.len(),
        dx.len()
    );
    ensure!(
        rstd.len() == rows && mean.is_none_or(|m| m.len() == rows),
        "{norm:?} norm backward: statistics for {} rows, expected {rows}",
        rstd.len()
    );
    ensure!(
        weight.is_none_or(|w| w.len() == d),
        "{norm:?} norm backward: weight of {} for rows of {d}",
        weight.map_or(0, <[f32]>::len)
    );
    ensure!(
        dw.as_ref().is_none_or(|g| g.len() == d) && db.as_ref().is_none_or(|g| g.len() == d),
        "{norm:?} norm backward: parameter gradients must have {d} elements"
    );
    let piece = piece_rows(rows.max(1));
    let pieces = rows.div_ceil(piece);
    let (want_w, want_b) = (dw.is_some(), db.is_some());
    let mut partial_w = vec![0.0f32; if want_w { pieces * d } else { 0 }];
    let mut partial_b = vec![0.0f32; if want_b { pieces * d } else { 0 }];
    let body = |(p, dxp): (usize, &mut [f32]), pw: Option<&mut [f32]>, pb: Option<&mut [f32]>| {
        let (mut pw, mut pb) = (pw, pb);
        for (i, dxr) in dxp.chunks_mut(d).enumerate() {
            let r = p * piece + i;
            let (xr, gr) = (&x[r * d..(r + 1) * d], &dy[r * d..(r + 1) * d]);
            let m = mean.map_or(0.0, |m| m[r]);
            backward_row(
                norm,
                xr,
                gr,
                weight,
                (m, rstd[r]),
                dxr,
                (pw.as_deref_mut(), pb.as_deref_mut()),
            );
        }
    };
    let (cw, cb) = (
        split_partials(&mut partial_w, d, pieces),
        split_partials(&mut partial_b, d, pieces),
    );
    let mut work: Vec<_> = dx
        .chunks_mut(piece * d)
        .enumerate()
        .zip(cw.into_iter().zip(cb))
        .collect();
    for_each_mut(&mut work, parallel(x.len()), |_, ((e, dxp), (w, b))| {
        body((*e, dxp), w.as_deref_mut(), b.as_deref_mut())
    });
    for (out, partial) in [(dw, &partial_w), (db, &partial_b)] {
        if let Some(out) = out {
            out.fill(0.0);
            for part in partial.chunks(d) {
                for (o, &v) in out.iter_mut().zip(part) {
                    *o += v;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) % 1000) as f32
                    / 250.0
                    - 2.0
            })
            .collect()
    }

    #[test]
    fn layer_norm_rows_are_standardized() {
        let (rows, d) = (5, 37);
        let x = data(rows * d, 1);
        let mut y = vec![0.0; rows * d];
        let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
        norm_forward(
            Norm::Layer,
            &x,
            d,
            None,
            None,
            1e-5,
            &mut y,
            Some(&mut mean),
            &mut rstd,
        )
        .unwrap();
        for r in y.chunks(d) {
            let m: f32 = r.iter().sum::<f32>() / d as f32;
            let v: f32 = r.iter().map(|a| a * a).sum::<f32>() / d as f32;
            assert!(m.abs() < 1e-5 && (v - 1.0).abs() < 1e-3, "{m} {v}");
        }
    }

    /// Finite differences of sum(y * c) against the analytic gradient.
    fn check_grad(norm: Norm) {
        let (rows, d) = (3, 9);
        let x = data(rows * d, 3);
        let w = data(d, 5);
        let b = data(d, 7);
        let c = data(rows * d, 11);
        let bias = (norm == Norm::Layer).then_some(&b[..]);
        let loss = |x: &[f32], w: &[f32]| -> f64 {
            let mut y = vec![0.0; rows * d];
            let mut rstd = vec![0.0; rows];
            norm_forward(norm, x, d, Some(w), bias, 1e-5, &mut y, None, &mut rstd).unwrap();
            y.iter()
                .zip(&c)
                .map(|(a, b)| (*a as f64) * (*b as f64))
                .sum()
        };
        let mut y = vec![0.0; rows * d];
        let (mut mean, mut rstd) = (vec![0.0; rows], vec![0.0; rows]);
        norm_forward(
            norm,
            &x,
            d,
            Some(&w),
            bias,
            1e-5,
            &mut y,
            Some(&mut mean),
            &mut rstd,
        )
        .unwrap();
        let (mut dx, mut dw, mut db) = (vec![0.0; rows * d], vec![0.0; d], vec![0.0; d]);
        let m = (norm == Norm::Layer).then_some(&mean[..]);
        norm_backward(
            norm,
            &x,
            &c,
            d,
            Some(&w),
            m,
            &rstd,
            &mut dx,
            Some(&mut dw),
            Some(&mut db),
        )
        .unwrap();
        let h = 1e-2f32;
        for i in [0, 4, 13, 26] {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += h;
            xm[i] -= h;
            let fd = (loss(&xp, &w) - loss(&xm, &w)) / (2.0 * h as f64);
            assert!(
                (fd - dx[i] as f64).abs() < 2e-2,
                "{norm:?} dx[{i}]: {fd} vs {}",
                dx[i]
            );
        }
        for j in [0, 8] {
            let (mut wp, mut wm) = (w.clone(), w.clone());
            wp[j] += h;
            wm[j] -= h;
            let fd = (loss(&x, &wp) - loss(&x, &wm)) / (2.0 * h as f64);
            assert!(
                (fd - dw[j] as f64).abs() < 2e-2,
                "{norm:?} dw[{j}]: {fd} vs {}",
                dw[j]
            );
        }
        let want_db: f32 = (0..rows).map(|r| c[r * d + 2]).sum();
        assert!((db[2] - want_db).abs() < 1e-5);
    }

    #[test]
    fn gradients_match_finite_differences() {
        check_grad(Norm::Layer);
        check_grad(Norm::Rms);
    }

    #[test]
    fn parameter_gradients_do_not_depend_on_threads() {
        // Above the elementwise threshold, and under it but above the norms' own.
        for (rows, d) in [(4099, 64), (300, 100)] {
            gradients_alike_at_one_and_three_threads(rows, d);
        }
    }

    fn gradients_alike_at_one_and_three_threads(rows: usize, d: usize) {
        let x = data(rows * d, 1);
        let dy = data(rows * d, 2);
        let mut rstd = vec![0.0; rows];
        let mut y = vec![0.0; rows * d];
        norm_forward(Norm::Rms, &x, d, None, None, 1e-6, &mut y, None, &mut rstd).unwrap();
        let run = || {
            let (mut dx, mut dw) = (vec![0.0; rows * d], vec![0.0; d]);
            let w = vec![1.0; d];
            norm_backward(
                Norm::Rms,
                &x,
                &dy,
                d,
                Some(&w),
                None,
                &rstd,
                &mut dx,
                Some(&mut dw),
                None,
            )
            .unwrap();
            (dx, dw)
        };
        let one = ThreadPoolCheck::with_threads(1, run);
        let many = ThreadPoolCheck::with_threads(3, run);
        assert_eq!(one, many);
        let forward = || {
            let (mut y, mut mean, mut rstd) =
                (vec![0.0; rows * d], vec![0.0; rows], vec![0.0; rows]);
            let w = data(d, 3);
            norm_forward(
                Norm::Layer,
                &x,
                d,
                Some(&w),
                None,
                1e-5,
                &mut y,
                Some(&mut mean),
                &mut rstd,
            )
            .unwrap();
            (y, mean, rstd)
        };
        assert_eq!(
            ThreadPoolCheck::with_threads(1, forward),
            ThreadPoolCheck::with_threads(3, forward)
        );
    }

    struct ThreadPoolCheck;

    impl ThreadPoolCheck {
        fn with_threads<R>(n: usize, f: impl Fn() -> R) -> R {
            crate::pool::set_num_threads(n);
            f()
        }
    }
}
