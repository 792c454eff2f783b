//! bfloat16: the upper 16 bits of an IEEE float32 (1 sign, 8 exponent and 7
//! mantissa bits), stored as `u16` bit patterns.
//!
//! Widening to float32 is exact. Narrowing rounds to nearest, ties to even;
//! values past the largest finite bfloat16 become infinities and a NaN becomes
//! the quiet NaN of its sign (`0x7FC0` / `0xFFC0`), as `ml_dtypes` and Eigen do.
//! Products run in float32: each operand is widened (exactly) and the float32
//! kernels accumulate, so a bfloat16 product of two bfloat16 values is exact
//! and only the sums round.

use crate::matmul::MatmulSpec;
use crate::pool::{for_chunks, CHUNK};
use crate::{ensure, Result};

/// The bfloat16 nearest to `x` (ties to even); a NaN stays a (quiet) NaN.
#[inline(always)]
pub fn from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16 & 0x8000) | 0x7FC0;
    }
    // Adding 0x7FFF plus the lowest kept bit carries into the kept half exactly
    // when the dropped half is above one half, or equal to it with an odd kept half.
    let round = 0x7FFF + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// The float32 that `h` stands for (exact).
#[inline(always)]
pub fn to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// `out[i] = from_f32(x[i])`.
pub fn narrow(x: &[f32], out: &mut [u16]) -> Result<()> {
    ensure!(
        x.len() == out.len(),
        "bfloat16 cast: {} inputs, {} outputs",
        x.len(),
        out.len()
    );
    for_chunks(out, CHUNK, |i, dst| {
        let src = &x[i * CHUNK..i * CHUNK + dst.len()];
        for (o, &v) in dst.iter_mut().zip(src) {
            *o = from_f32(v);
        }
    });
    Ok(())
}

/// `out[i] = to_f32(x[i])`.
pub fn widen(x: &[u16], out: &mut [f32]) -> Result<()> {
    ensure!(
        x.len() == out.len(),
        "bfloat16 cast: {} inputs, {} outputs",
        x.len(),
        out.len()
    );
    for_chunks(out, CHUNK, |i, dst| {
        let src = &x[i * CHUNK..i * CHUNK + dst.len()];
        for (o, &v) in dst.iter_mut().zip(src) {
            *o = to_f32(v);
        }
    });
    Ok(())
}

/// The float32 values of `x`, as a new vector.
pub fn widened(x: &[u16]) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    // The lengths agree by construction.
    let _ = widen(x, &mut out);
    out
}

/// `out = op(a) @ op(b)` for bfloat16 operands: every product exact, the sums
/// accumulated in float32 by the float32 kernel, the result float32.
pub fn matmul_bf16(spec: &MatmulSpec, a: &[u16], b: &[u16], out: &mut [f32]) -> Result<()> {
    matmul_bf16_bias(spec, a, b, None, out)
}

/// [`matmul_bf16`] with a float32 bias added as [`crate::matmul::matmul_bias_f32`] adds it.
pub fn matmul_bf16_bias(
    spec: &MatmulSpec,
    a: &[u16],
    b: &[u16],
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    crate::matmul::matmul_bias_f32(spec, &widened(a), &widened(b), bias, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
        assert_eq!(from_f32(1.0 + 2f32.powi(-8)), 0x3F80);
        // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is the upper.
        assert_eq!(from_f32(1.0 + 3.0 * 2f32.powi(-8)), 0x3F82);
        // Just above the halfway point rounds up.
        assert_eq!(from_f32(f32::from_bits(0x3F80_8001)), 0x3F81);
        assert_eq!(from_f32(f32::from_bits(0x3F80_7FFF)), 0x3F80);
    }

    #[test]
    fn special_values() {
        assert_eq!(from_f32(f32::INFINITY), 0x7F80);
        assert_eq!(from_f32(f32::NEG_INFINITY), 0xFF80);
        assert_eq!(from_f32(f32::MAX), 0x7F80);
        assert_eq!(from_f32(-0.0), 0x8000);
        assert_eq!(from_f32(f32::NAN), 0x7FC0);
        assert_eq!(from_f32(-f32::NAN), 0xFFC0);
        // A signalling NaN whose payload sits in the dropped half stays a NaN.
        assert!(to_f32(from_f32(f32::from_bits(0x7F80_0001))).is_nan());
        assert_eq!(from_f32(f32::from_bits(1)), 0);
        assert_eq!(to_f32(0x0001), f32::from_bits(0x0001_0000));
    }

    #[test]
    fn widening_then_narrowing_is_the_identity() {
        for h in 0..=u16::MAX {
            let x = to_f32(h);
            if !x.is_nan() {
                assert_eq!(from_f32(x), h);
            }
        }
    }

    #[test]
    fn matmul_accumulates_in_f32() {
        let a: Vec<u16> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .map(|&x| from_f32(x))
            .collect();
        let b: Vec<u16> = [0.5f32, -1.0, 0.25, 2.0]
            .iter()
            .map(|&x| from_f32(x))
            .collect();
        let spec = MatmulSpec {
            m: 2,
            k: 2,
            n: 2,
            transpose_a: false,
            transpose_b: false,
            a_offsets: &[0],
            b_offsets: &[0],
        };
        let mut out = [0.0f32; 4];
        matmul_bf16(&spec, &a, &b, &mut out).unwrap();
        assert_eq!(out, [1.0, 3.0, 2.5, 5.0]);
    }
}
