//! Eight-lane reductions that the kernels share.
//!
//! Lane `j` takes elements `j, j + 8, j + 16, …` of the whole chunks of
//! eight; the lanes are then combined in lane order, and the tail (fewer than
//! eight elements) last, in index order. The order of every operation is
//! fixed, so a kernel that reduces with these gets the same bits on every CPU
//! and for every thread count.
//!
//! The `#[inline(always)]` helpers are for kernel bodies inside
//! [`multiversion!`](crate::multiversion), which compiles them for the
//! body's target features; the multiversioned ones ([`max_of`], [`exp_sum`],
//! [`dot`], …) are entry points for kernels that call them per row.

use crate::{math, multiversion};

/// The larger of `a` and `b`, or NaN when `a` is NaN or `b` is NaN (numpy's
/// `maximum`): NaN propagates.
#[inline(always)]
pub(crate) fn max_nan(a: f32, b: f32) -> f32 {
    if a >= b || a.is_nan() {
        a
    } else {
        b
    }
}

/// The smaller of `a` and `b`; NaN propagates as in [`max_nan`].
#[inline(always)]
pub(crate) fn min_nan(a: f32, b: f32) -> f32 {
    if a <= b || a.is_nan() {
        a
    } else {
        b
    }
}

/// `x` folded with `f` from `init` in eight lanes, then the lanes and the
/// tail folded in order from `init` again.
#[inline(always)]
pub(crate) fn fold(x: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [init; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for j in 0..8 {
            lanes[j] = f(lanes[j], c[j]);
        }
    }
    let mut acc = init;
    for v in lanes.into_iter().chain(tail.iter().copied()) {
        acc = f(acc, v);
    }
    acc
}

/// The maximum of `x` with NaN propagating (-inf for an empty `x`).
#[inline(always)]
pub(crate) fn max_nan_of(x: &[f32]) -> f32 {
    fold(x, f32::NEG_INFINITY, max_nan)
}

/// `sum_j f(x[j])` in eight lanes.
#[inline(always)]
pub(crate) fn sum_of(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for j in 0..8 {
            lanes[j] += f(c[j]);
        }
    }
    let mut s = 0.0f32;
    for v in lanes.into_iter().chain(tail.iter().map(|&v| f(v))) {
        s += v;
    }
    s
}

/// `sum_j a[j] * f(b[j])` with one fused multiply-add per element, lanes
/// summed in order.
#[inline(always)]
pub(crate) fn dot_of(a: &[f32], b: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            lanes[j] = x[j].mul_add(f(y[j]), lanes[j]);
        }
    }
    let mut s = 0.0f32;
    for v in lanes {
        s += v;
    }
    for (x, y) in ta.iter().zip(tb) {
        s = x.mul_add(f(*y), s);
    }
    s
}

/// `a . b` (equal lengths) as [`dot_of`] computes it.
#[inline(always)]
pub(crate) fn dot8(a: &[f32], b: &[f32]) -> f32 {
    dot_of(a, b, |v| v)
}

multiversion! {
    /// The maximum of `x`, NaN ignored (`f32::max`); -inf for an empty `x`.
    pub(crate) fn max_of(x: &[f32]) -> f32 {
        fold(x, f32::NEG_INFINITY, f32::max)
    }
}

multiversion! {
    /// `x[j] = exp(x[j] - shift)`; returns the sum.
    pub(crate) fn exp_sum(x: &mut [f32], shift: f32) -> f32 {
        let mut lanes = [0.0f32; 8];
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            for j in 0..8 {
                c[j] = math::exp(c[j] - shift);
                lanes[j] += c[j];
            }
        }
        let mut sum = 0.0f32;
        for v in lanes {
            sum += v;
        }
        // The tail's exponentials as one vector (the same elementwise function:
        // the same values as one at a time), then summed in index order.
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let mut pad = [0.0f32; 8];
            pad[..tail.len()].copy_from_slice(tail);
            for v in pad.iter_mut() {
                *v = math::exp(*v - shift);
            }
            tail.copy_from_slice(&pad[..tail.len()]);
            for v in tail.iter() {
                sum += *v;
            }
        }
        sum
    }
}

multiversion! {
    pub(crate) fn scale_in_place(x: &mut [f32], s: f32) {
        for v in x.iter_mut() {
            *v *= s;
        }
    }
}

multiversion! {
    /// `a . b` (equal lengths) as [`dot8`] computes it.
    pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
        dot8(a, b)
    }
}

multiversion! {
    /// `dp[j] = p[j] * (dp[j] - delta)`: the softmax backward of one row.
    pub(crate) fn softmax_grad(p: &[f32], dp: &mut [f32], delta: f32) {
        for (d, &pv) in dp.iter_mut().zip(p) {
            *d = pv * (*d - delta);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.37)
            .collect()
    }

    #[test]
    fn reductions_match_their_definitions_at_every_tail_length() {
        for n in 0..27 {
            let (a, b) = (values(n), values(n + 3)[3..].to_vec());
            let max = a.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max_of(&a), max);
            assert_eq!(max_nan_of(&a), max);
            let sum: f64 = a.iter().map(|&v| v as f64).sum();
            assert!((sum_of(&a, |v| v) as f64 - sum).abs() < 1e-4);
            let d: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            assert!((dot(&a, &b) as f64 - d).abs() < 1e-3);
            let mut e = a.clone();
            let total = exp_sum(&mut e, max);
            assert!(e.iter().zip(&a).all(|(&y, &x)| y == math::exp(x - max)));
            assert_eq!(total, sum_of(&e, |v| v));
        }
    }

    #[test]
    fn nan_propagates_only_where_asked() {
        for n in [1, 7, 8, 9, 20] {
            for at in [0, n / 2, n - 1] {
                let mut x = values(n);
                x[at] = f32::NAN;
                assert!(max_nan_of(&x).is_nan(), "n {n} at {at}");
                assert!(fold(&x, f32::INFINITY, min_nan).is_nan());
                assert!(!max_of(&x).is_nan());
            }
        }
        assert_eq!(max_nan(1.0, f32::NAN).is_nan(), f32::NAN.is_nan());
        assert!(min_nan(f32::NAN, 1.0).is_nan());
    }

    #[test]
    fn lanes_are_summed_in_a_fixed_order() {
        // 1e8 + 1 - 1e8 differs by order; lane 0 takes the large values.
        let mut x = vec![1.0f32; 16];
        x[0] = 1e8;
        x[8] = -1e8;
        assert_eq!(sum_of(&x, |v| v), 14.0);
        let ones = vec![1.0f32; 16];
        assert_eq!(dot8(&x, &ones), 14.0);
    }
}
