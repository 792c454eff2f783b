//! Branch-free f32 elementary functions that compilers vectorize.
//!
//! Polynomials follow the Cephes single-precision library (S. Moshier): `exp`
//! and `log` are within 2 ulp over their ranges; `erf` uses Abramowitz and
//! Stegun 7.1.26 (absolute error below 1.5e-7), which is what GELU needs.
//! Coefficients are kept digit for digit as published.
#![allow(clippy::excessive_precision)]

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// e^x; exactly 0 below -87.33 (masked positions stay exactly zero), inf above 88.72.
#[inline(always)]
#[allow(clippy::manual_clamp)] // clamp would keep NaN, and `n` must be finite
pub fn exp(x: f32) -> f32 {
    // max/min rather than clamp: NaN becomes a finite value here (and is
    // returned as NaN below), so `n` is always a small integer.
    let xc = x.max(-87.336_54).min(88.722_83);
    let n = (xc * LOG2E + 0.5).floor();
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 5.000_000_1e-1);
    let e = (r * r).mul_add(p, r + 1.0);
    // 2^(n-1) then *2 keeps the exponent field in range for n = 128.
    // SAFETY: `n` is an integer in [-126, 128]. (A saturating `as` cast would
    // keep the loop from vectorizing: 2.5x slower.)
    let n = unsafe { n.to_int_unchecked::<i32>() };
    let scale = f32::from_bits(((n + 126) as u32) << 23);
    let y = e * scale * 2.0;
    let y = if x > 88.722_83 { f32::INFINITY } else { y };
    let y = if x < -87.336_54 { 0.0 } else { y };
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Natural logarithm; log(0) = -inf, negative inputs give NaN.
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let m0 = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let small = m0 < std::f32::consts::FRAC_1_SQRT_2;
    e -= small as i32;
    let m = if small { m0 + m0 - 1.0 } else { m0 - 1.0 };
    let z = m * m;
    let mut p = 7.037_683_6e-2_f32;
    p = p.mul_add(m, -1.151_461e-1);
    p = p.mul_add(m, 1.167_699_9e-1);
    p = p.mul_add(m, -1.242_014_1e-1);
    p = p.mul_add(m, 1.424_932_3e-1);
    p = p.mul_add(m, -1.666_805_8e-1);
    p = p.mul_add(m, 2.000_071_4e-1);
    p = p.mul_add(m, -2.499_999_4e-1);
    p = p.mul_add(m, 3.333_333e-1);
    let ef = e as f32;
    let mut y = m * z * p;
    y = ef.mul_add(LN2_LO, y);
    y = z.mul_add(-0.5, y);
    let r = m + y + ef * LN2_HI;
    // Zero, subnormals, negatives, inf and NaN take the exact route.
    if x > f32::MIN_POSITIVE && x < f32::INFINITY {
        r
    } else {
        x.ln()
    }
}

/// Hyperbolic tangent: a polynomial near zero, 1 - 2/(e^2x + 1) elsewhere.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let mut p = -5.704_988_7e-3_f32;
    p = p.mul_add(z, 2.063_908_9e-2);
    p = p.mul_add(z, -5.373_971_6e-2);
    p = p.mul_add(z, 1.333_144_2e-1);
    p = p.mul_add(z, -3.333_328_2e-1);
    let near = (x * z).mul_add(p, x);
    let far = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    let far = if x < 0.0 { -far } else { far };
    if a < 0.625 {
        near
    } else {
        far
    }
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// Error function, absolute error below 1.5e-7.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / 0.327_591_1f32.mul_add(a, 1.0);
    let mut p = 1.061_405_4_f32;
    p = p.mul_add(t, -1.453_152_1);
    p = p.mul_add(t, 1.421_413_8);
    p = p.mul_add(t, -0.284_496_74);
    p = p.mul_add(t, 0.254_829_6);
    let y = 1.0 - p * t * exp(-a * a);
    if x < 0.0 {
        -y
    } else {
        y
    }
}

pub const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU with the exact Gaussian CDF: x Φ(x).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU with the tanh approximation used by GPT-2, `0.5 x (1 + tanh u)` with
/// `u = sqrt(2/pi) (x + 0.044715 x^3)`, computed as the equal `x sigmoid(2u)`:
/// one exponential and one division.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    let inner = SQRT_2_OVER_PI * (0.044_715 * x * x * x + x);
    x / (1.0 + exp(-2.0 * inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f32, b: f64) -> f64 {
        ((a as f64) - b).abs() / b.abs().max(1e-30)
    }

    #[test]
    fn exp_matches_libm() {
        let mut x = -87.0f32;
        while x < 88.0 {
            assert!(rel(exp(x), (x as f64).exp()) < 3e-7, "exp({x})");
            x += 0.173;
        }
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn ln_matches_libm() {
        let mut x = 1e-30f32;
        while x < 1e30 {
            assert!(
                ((ln(x) as f64) - (x as f64).ln()).abs() < 2e-7 * (x as f64).ln().abs().max(1.0),
                "ln({x})"
            );
            x *= 1.37;
        }
        assert_eq!(ln(0.0), f32::NEG_INFINITY);
        assert!(ln(-1.0).is_nan());
        assert_eq!(ln(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn gelu_tanh_matches_its_tanh_form() {
        let mut x = -12.0f32;
        while x < 12.0 {
            let xd = x as f64;
            let want = 0.5
                * xd
                * (1.0 + (0.797_884_560_802_865_4 * (xd + 0.044_715 * xd * xd * xd)).tanh());
            let got = gelu_tanh(x) as f64;
            assert!(
                (got - want).abs() <= 2e-7 * want.abs().max(1.0),
                "gelu_tanh({x}) = {got}, want {want}"
            );
            x += 0.0173;
        }
        assert_eq!(gelu_tanh(-200.0), 0.0);
        assert_eq!(gelu_tanh(200.0), 200.0);
        assert!(gelu_tanh(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_erf_close() {
        let mut x = -10.0f32;
        while x < 10.0 {
            assert!(
                (tanh(x) as f64 - (x as f64).tanh()).abs() < 3e-7,
                "tanh({x})"
            );
            x += 0.0371;
        }
        assert!((erf(0.5) as f64 - 0.520_499_877_813_046_5).abs() < 2e-7);
        assert!((erf(-1.5) as f64 + 0.966_105_146_475_310_7).abs() < 2e-7);
    }
}
