//! Backward passes of the smooth activations: `dx = dy * f'(x)`.

use crate::pool::{for_chunks, CHUNK};
use crate::{ensure, math, multiversion, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Exact GELU, `x Φ(x)`.
    Gelu,
    /// GPT-2's tanh approximation of GELU.
    GeluTanh,
    /// `x sigmoid(x)`.
    Silu,
}

impl Activation {
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "gelu" => Self::Gelu,
            "gelu_tanh" => Self::GeluTanh,
            "silu" => Self::Silu,
            _ => return None,
        })
    }
}

/// 1 / sqrt(2 pi)
const INV_SQRT_2PI: f32 = 0.398_942_3;

#[inline(always)]
fn gelu_grad(x: f32) -> f32 {
    let cdf = 0.5 * (1.0 + math::erf(x * std::f32::consts::FRAC_1_SQRT_2));
    let pdf = INV_SQRT_2PI * math::exp(-0.5 * x * x);
    x.mul_add(pdf, cdf)
}

/// With `s = sigmoid(2u)`: `1 + tanh u = 2s` and `1 - tanh^2 u = 4s(1 - s)`, so
/// the derivative `0.5 (1 + t) + 0.5 x (1 - t^2) u'` is `s + 2 x s (1 - s) u'`.
#[inline(always)]
fn gelu_tanh_grad(x: f32) -> f32 {
    let x2 = x * x;
    let u = math::SQRT_2_OVER_PI * x * 0.044_715f32.mul_add(x2, 1.0);
    let s = 1.0 / (1.0 + math::exp(-2.0 * u));
    let du = math::SQRT_2_OVER_PI * (3.0 * 0.044_715f32).mul_add(x2, 1.0);
    (2.0 * x * s * (1.0 - s)).mul_add(du, s)
}

#[inline(always)]
fn silu_grad(x: f32) -> f32 {
    let s = math::sigmoid(x);
    s * (x * (1.0 - s) + 1.0)
}

multiversion! {
    fn chunk(op: Activation, x: &[f32], dy: &[f32], dx: &mut [f32]) {
        match op {
            Activation::Gelu => {
                for ((o, &v), &g) in dx.iter_mut().zip(x).zip(dy) {
                    *o = g * gelu_grad(v);
                }
            }
            Activation::GeluTanh => {
                for ((o, &v), &g) in dx.iter_mut().zip(x).zip(dy) {
                    *o = g * gelu_tanh_grad(v);
                }
            }
            Activation::Silu => {
                for ((o, &v), &g) in dx.iter_mut().zip(x).zip(dy) {
                    *o = g * silu_grad(v);
                }
            }
        }
    }
}

/// `dx[i] = dy[i] * op'(x[i])`.
pub fn activation_backward(op: Activation, x: &[f32], dy: &[f32], dx: &mut [f32]) -> Result<()> {
    ensure!(
        x.len() == dy.len() && dx.len() == x.len(),
        "{op:?} backward: x has {} elements, dy {}, dx {}",
        x.len(),
        dy.len(),
        dx.len()
    );
    for_chunks(dx, CHUNK, |i, out| {
        let start = i * CHUNK;
        let end = start + out.len();
        chunk(op, &x[start..end], &dy[start..end], out);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivatives_match_finite_differences() {
        let f = |op: Activation, x: f64| -> f64 {
            match op {
                Activation::Gelu => math::gelu(x as f32) as f64,
                Activation::GeluTanh => math::gelu_tanh(x as f32) as f64,
                Activation::Silu => x / (1.0 + (-x).exp()),
            }
        };
        for op in [Activation::Gelu, Activation::GeluTanh, Activation::Silu] {
            let xs: Vec<f32> = (-40..40).map(|i| i as f32 * 0.15).collect();
            let ones = vec![1.0; xs.len()];
            let mut dx = vec![0.0; xs.len()];
            activation_backward(op, &xs, &ones, &mut dx).unwrap();
            for (&x, &d) in xs.iter().zip(&dx) {
                let h = 1e-2;
                let fd = (f(op, x as f64 + h) - f(op, x as f64 - h)) / (2.0 * h);
                assert!(
                    (fd - d as f64).abs() < 2e-3,
                    "{op:?}'({x}) = {d}, finite difference {fd}"
                );
            }
        }
    }
}
