//! Rotary position embedding in the split-half ("rotate_half") form.
//!
//! For `x` `[rows, heads, head_dim]` and one position per row, pair `i` of
//! each head (elements `i` and `i + head_dim / 2`) turns by the angle
//! `position * theta^(-2i / head_dim)`. The inverse turns by the negative
//! angle: it is the backward pass, since a rotation's adjoint is its inverse.

use crate::pool::for_chunks;
use crate::{ensure, Result};

/// `inv_freq[i] = 1 / theta^(2i / head_dim)`, rounded to float32 as Llama does.
fn inverse_frequencies(theta: f64, head_dim: usize) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| {
            let exponent = (2 * i) as f32 / head_dim as f32;
            1.0 / (theta as f32).powf(exponent)
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn rotate_row(
    x: &[f32],
    out: &mut [f32],
    position: i64,
    inv_freq: &[f32],
    head_dim: usize,
    inverse: bool,
    cos: &mut [f32],
    sin: &mut [f32],
) {
    let half = head_dim / 2;
    for ((c, s), &f) in cos.iter_mut().zip(sin.iter_mut()).zip(inv_freq) {
        let angle = (position as f32 * f) as f64;
        *c = angle.cos() as f32;
        *s = if inverse {
            -angle.sin() as f32
        } else {
            angle.sin() as f32
        };
    }
    for (xh, oh) in x.chunks_exact(head_dim).zip(out.chunks_exact_mut(head_dim)) {
        let (x1, x2) = xh.split_at(half);
        let (o1, o2) = oh.split_at_mut(half);
        for i in 0..half {
            o1[i] = x1[i] * cos[i] - x2[i] * sin[i];
            o2[i] = x2[i] * cos[i] + x1[i] * sin[i];
        }
    }
}

/// Rotate `x` `[rows, heads, head_dim]` by `positions` `[rows]` into `out`.
pub fn rotary(
    x: &[f32],
    head_dim: usize,
    positions: &[i64],
    theta: f64,
    inverse: bool,
    out: &mut [f32],
) -> Result<()> {
    ensure!(
        head_dim > 0 && head_dim.is_multiple_of(2),
        "rotary: head_dim must be even and positive, found {head_dim}"
    );
    ensure!(
        theta > 0.0 && theta.is_finite(),
        "rotary: theta must be positive, found {theta}"
    );
    let rows = positions.len();
    ensure!(
        out.len() == x.len(),
        "rotary: {} inputs, {} outputs",
        x.len(),
        out.len()
    );
    ensure!(
        rows > 0 || x.is_empty(),
        "rotary: {} elements for no positions",
        x.len()
    );
    if rows == 0 {
        return Ok(());
    }
    let width = x.len() / rows;
    ensure!(
        width * rows == x.len() && width.is_multiple_of(head_dim),
        "rotary: {} elements are not {rows} rows of heads of {head_dim}",
        x.len()
    );
    if let Some((r, p)) = positions.iter().enumerate().find(|(_, &p)| p < 0) {
        return Err(crate::KernelError(format!(
            "rotary: position {p} of row {r} is negative"
        )));
    }
    let inv_freq = inverse_frequencies(theta, head_dim);
    if width == 0 {
        return Ok(());
    }
    let rows_per_piece = (8192 / width).max(1);
    for_chunks(out, rows_per_piece * width, |p, piece| {
        let (mut cos, mut sin) = (vec![0.0f32; head_dim / 2], vec![0.0f32; head_dim / 2]);
        for (i, o) in piece.chunks_mut(width).enumerate() {
            let r = p * rows_per_piece + i;
            rotate_row(
                &x[r * width..(r + 1) * width],
                o,
                positions[r],
                &inv_freq,
                head_dim,
                inverse,
                &mut cos,
                &mut sin,
            );
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_undoes_and_position_zero_is_identity() {
        let x: Vec<f32> = (0..2 * 3 * 8).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut y = vec![0.0; x.len()];
        let mut back = vec![0.0; x.len()];
        rotary(&x, 8, &[0, 0], 10_000.0, false, &mut y).unwrap();
        assert_eq!(x, y);
        rotary(&x, 8, &[5, 17], 10_000.0, false, &mut y).unwrap();
        rotary(&y, 8, &[5, 17], 10_000.0, true, &mut back).unwrap();
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() < 1e-5);
        }
        // Norms of each pair are preserved.
        let n = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        assert!((n(&x) - n(&y)).abs() < 1e-3);
        assert!(rotary(&x, 8, &[-1, 0], 10_000.0, false, &mut y).is_err());
    }
}
