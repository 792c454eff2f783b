//! Elementwise functions of one operand.

use crate::pool::{for_chunks, CHUNK};
use crate::{ensure, math, multiversion, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    GeluTanh,
    Silu,
}

impl UnaryOp {
    pub const ALL: [(&'static str, UnaryOp); 12] = [
        ("neg", UnaryOp::Neg),
        ("abs", UnaryOp::Abs),
        ("exp", UnaryOp::Exp),
        ("log", UnaryOp::Log),
        ("sqrt", UnaryOp::Sqrt),
        ("rsqrt", UnaryOp::Rsqrt),
        ("tanh", UnaryOp::Tanh),
        ("sigmoid", UnaryOp::Sigmoid),
        ("relu", UnaryOp::Relu),
        ("gelu", UnaryOp::Gelu),
        ("gelu_tanh", UnaryOp::GeluTanh),
        ("silu", UnaryOp::Silu),
    ];

    /// Whether the function costs an exponential, a logarithm or a division per
    /// element (worth sharing from far fewer elements than an add).
    fn costly(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, op)| op)
    }
}

#[inline(always)]
fn each(x: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

multiversion! {
    fn map_chunk(op: UnaryOp, x: &[f32], out: &mut [f32]) {
        match op {
            UnaryOp::Neg => each(x, out, |v| -v),
            UnaryOp::Abs => each(x, out, f32::abs),
            UnaryOp::Exp => each(x, out, math::exp),
            UnaryOp::Log => each(x, out, math::ln),
            UnaryOp::Sqrt => each(x, out, f32::sqrt),
            UnaryOp::Rsqrt => each(x, out, |v| 1.0 / v.sqrt()),
            UnaryOp::Tanh => each(x, out, math::tanh),
            UnaryOp::Sigmoid => each(x, out, math::sigmoid),
            UnaryOp::Relu => each(x, out, |v| if v > 0.0 || v.is_nan() { v } else { 0.0 }),
            UnaryOp::Gelu => each(x, out, math::gelu),
            UnaryOp::GeluTanh => each(x, out, math::gelu_tanh),
            UnaryOp::Silu => each(x, out, |v| v * math::sigmoid(v)),
        }
    }
}

/// `out[i] = op(x[i])` for float32.
pub fn unary_f32(op: UnaryOp, x: &[f32], out: &mut [f32]) -> Result<()> {
    ensure!(
        x.len() == out.len(),
        "unary {op:?}: input has {} elements, output {}",
        x.len(),
        out.len()
    );
    if op.costly() && crate::pool::parallel(x.len(), TEAM_ELEMENTS) {
        // A transcendental function over a prefill's activations: pieces on the
        // team's hot helpers (the products around it keep them awake).
        let dst = crate::pool::Shared::new(out);
        let pieces = x.len().div_ceil(TEAM_PIECE);
        crate::team::team().run(pieces, &|p| {
            let start = p * TEAM_PIECE;
            let len = TEAM_PIECE.min(x.len() - start);
            // SAFETY: piece p alone writes out[start..start + len], inside `out`.
            let o = unsafe { std::slice::from_raw_parts_mut(dst.at(start), len) };
            map_chunk(op, &x[start..start + len], o);
        });
        return Ok(());
    }
    for_chunks(out, CHUNK, |i, chunk| {
        let start = i * CHUNK;
        map_chunk(op, &x[start..start + chunk.len()], chunk);
    });
    Ok(())
}

/// From this many elements a costly function runs on the team, in pieces of
/// `TEAM_PIECE` (each element is computed alone, so the bits do not depend on it).
const TEAM_ELEMENTS: usize = 1 << 14;
const TEAM_PIECE: usize = 1 << 12;

/// `out[i] = op(x[i])` for int64 (negation and absolute value only).
pub fn unary_i64(op: UnaryOp, x: &[i64], out: &mut [i64]) -> Result<()> {
    ensure!(
        x.len() == out.len(),
        "unary {op:?}: input has {} elements, output {}",
        x.len(),
        out.len()
    );
    let f: fn(i64) -> i64 = match op {
        UnaryOp::Neg => i64::wrapping_neg,
        UnaryOp::Abs => i64::wrapping_abs,
        _ => {
            return Err(crate::KernelError(format!(
                "unary {op:?} is not defined for int64"
            )))
        }
    };
    for_chunks(out, CHUNK, |i, chunk| {
        let start = i * CHUNK;
        for (o, &v) in chunk.iter_mut().zip(&x[start..]) {
            *o = f(v);
        }
    });
    Ok(())
}

/// Logical not of a bool tensor.
pub fn logical_not(x: &[bool], out: &mut [bool]) -> Result<()> {
    ensure!(
        x.len() == out.len(),
        "logical_not: input has {} elements, output {}",
        x.len(),
        out.len()
    );
    for (o, &v) in out.iter_mut().zip(x) {
        *o = !v;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costly_functions_on_the_team_give_each_element_its_own_bits() {
        // Not a whole number of pieces, past the team's threshold.
        let n = TEAM_ELEMENTS + 3 * TEAM_PIECE + 17;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % 1001) as f32 * 0.01 - 5.0)
            .collect();
        crate::pool::set_num_threads(2);
        for op in [
            UnaryOp::Gelu,
            UnaryOp::GeluTanh,
            UnaryOp::Exp,
            UnaryOp::Silu,
        ] {
            let mut out = vec![f32::NAN; n];
            unary_f32(op, &x, &mut out).unwrap();
            let mut want = vec![0.0f32; n];
            map_chunk(op, &x, &mut want);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&want), "{op:?}");
        }
    }

    #[test]
    fn relu_and_silu() {
        let x = [-2.0f32, 0.0, 3.0];
        let mut out = [0.0f32; 3];
        unary_f32(UnaryOp::Relu, &x, &mut out).unwrap();
        assert_eq!(out, [0.0, 0.0, 3.0]);
        unary_f32(UnaryOp::Silu, &x, &mut out).unwrap();
        assert!((out[2] - 3.0 / (1.0 + (-3.0f32).exp())).abs() < 1e-6);
    }

    #[test]
    fn length_mismatch_is_an_error() {
        let mut out = [0.0f32; 2];
        assert!(unary_f32(UnaryOp::Exp, &[1.0; 3], &mut out).is_err());
    }
}
