//! Unary, binary, comparison, select and conversion programs (numpy broadcasting).

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, PI};

use super::{expect_elem, start, Input};
use crate::error::Result;
use crate::hlo::{broadcast_shapes, Builder, Program, Value};
use crate::invalid;
use crate::types::ElementType::{self, Bool, F32, I64};

/// `erf` through XLA's own approximation (CHLO, expanded by the compiler).
fn erf(b: &mut Builder, x: &Value) -> Result<Value> {
    b.unary("chlo.erf", x)
}

/// `0.5 x (1 + erf(x / sqrt 2))`.
pub fn gelu(b: &mut Builder, x: &Value) -> Result<Value> {
    let dims = x.dims().to_vec();
    let scaled = mul_by(b, x, FRAC_1_SQRT_2)?;
    let e = erf(b, &scaled)?;
    let one = b.splat(crate::hlo::Scalar::F(1.0), x.elem(), &dims)?;
    let t = b.add(&one, &e)?;
    let half_x = mul_by(b, x, 0.5)?;
    b.mul(&half_x, &t)
}

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu_tanh(b: &mut Builder, x: &Value) -> Result<Value> {
    let dims = x.dims().to_vec();
    let inner = gelu_tanh_inner(b, x)?;
    let t = b.unary("stablehlo.tanh", &inner)?;
    let one = b.splat(crate::hlo::Scalar::F(1.0), x.elem(), &dims)?;
    let s = b.add(&one, &t)?;
    let half_x = mul_by(b, x, 0.5)?;
    b.mul(&half_x, &s)
}

fn gelu_tanh_inner(b: &mut Builder, x: &Value) -> Result<Value> {
    let x2 = b.mul(x, x)?;
    let x3 = b.mul(&x2, x)?;
    let c3 = mul_by(b, &x3, 0.044715)?;
    let sum = b.add(x, &c3)?;
    mul_by(b, &sum, (2.0 / PI).sqrt())
}

/// `x * sigmoid(x)`.
pub fn silu(b: &mut Builder, x: &Value) -> Result<Value> {
    let s = b.unary("stablehlo.logistic", x)?;
    b.mul(x, &s)
}

/// `x * c` for a constant `c`.
pub fn mul_by(b: &mut Builder, x: &Value, c: f64) -> Result<Value> {
    let k = b.splat(crate::hlo::Scalar::F(c), x.elem(), x.dims())?;
    b.mul(x, &k)
}

/// `x + c` for a constant `c`.
pub fn add_const(b: &mut Builder, x: &Value, c: f64) -> Result<Value> {
    let k = b.splat(crate::hlo::Scalar::F(c), x.elem(), x.dims())?;
    b.add(x, &k)
}

/// The float32 unary ops of the backend interface, on a value.
pub fn unary_f32(b: &mut Builder, op: &str, x: &Value) -> Result<Value> {
    let simple = match op {
        "neg" => Some("stablehlo.negate"),
        "abs" => Some("stablehlo.abs"),
        "exp" => Some("stablehlo.exponential"),
        "log" => Some("stablehlo.log"),
        "sqrt" => Some("stablehlo.sqrt"),
        "rsqrt" => Some("stablehlo.rsqrt"),
        "tanh" => Some("stablehlo.tanh"),
        "sigmoid" => Some("stablehlo.logistic"),
        _ => None,
    };
    if let Some(name) = simple {
        return b.unary(name, x);
    }
    match op {
        "relu" => {
            let zero = b.splat(crate::hlo::Scalar::F(0.0), x.elem(), x.dims())?;
            b.nan_min_max("stablehlo.maximum", x, &zero)
        }
        "gelu" => gelu(b, x),
        "gelu_tanh" => gelu_tanh(b, x),
        "silu" => silu(b, x),
        _ => invalid!("unary: unknown float32 op {op:?}"),
    }
}

pub fn unary(op: &str, x: &Input) -> Result<Program> {
    let (mut b, v) = start(&[x])?;
    let out = match (x.elem(), op) {
        (F32, _) => unary_f32(&mut b, op, &v[0])?,
        (I64, "neg") => b.unary("stablehlo.negate", &v[0])?,
        (I64, "abs") => b.unary("stablehlo.abs", &v[0])?,
        (Bool, "logical_not") => b.unary("stablehlo.not", &v[0])?,
        (e, _) => return invalid!("unary: {op} is not defined for {}", e.name()),
    };
    Ok(b.finish(&[out]))
}

fn check_broadcast(op: &str, shapes: &[&[i64]], out_shape: &[i64]) -> Result<()> {
    let mut shape = Vec::new();
    for s in shapes {
        shape = match broadcast_shapes(&shape, s) {
            Some(next) => next,
            None => return invalid!("{op}: shapes {shapes:?} do not broadcast"),
        };
    }
    if shape != out_shape {
        return invalid!("{op}: shapes {shapes:?} broadcast to {shape:?}, not {out_shape:?}");
    }
    Ok(())
}

fn binary_name(op: &str, elem: ElementType) -> Result<&'static str> {
    Ok(match (op, elem) {
        ("add", F32 | I64) => "stablehlo.add",
        ("sub", F32 | I64) => "stablehlo.subtract",
        ("mul", F32 | I64) => "stablehlo.multiply",
        ("div", F32) => "stablehlo.divide",
        ("pow", F32) => "stablehlo.power",
        ("maximum", F32 | I64) => "stablehlo.maximum",
        ("minimum", F32 | I64) => "stablehlo.minimum",
        _ => return invalid!("binary: {op} is not defined for {}", elem.name()),
    })
}

pub fn binary(op: &str, a: &Input, b_in: &Input, out_shape: &[i64]) -> Result<Program> {
    if a.elem() != b_in.elem() {
        return invalid!(
            "binary {op}: dtypes {} and {} differ",
            a.elem().name(),
            b_in.elem().name()
        );
    }
    let name = binary_name(op, a.elem())?;
    check_broadcast(op, &[&a.shape, &b_in.shape], out_shape)?;
    let (mut b, v) = start(&[a, b_in])?;
    let x = b.broadcast_to(&v[0], out_shape)?;
    let y = b.broadcast_to(&v[1], out_shape)?;
    let out = match name {
        "stablehlo.maximum" | "stablehlo.minimum" => b.nan_min_max(name, &x, &y)?,
        _ => b.binary(name, &x, &y)?,
    };
    Ok(b.finish(&[out]))
}

pub fn compare(op: &str, a: &Input, b_in: &Input, out_shape: &[i64]) -> Result<Program> {
    if a.elem() != b_in.elem() {
        return invalid!(
            "compare {op}: dtypes {} and {} differ",
            a.elem().name(),
            b_in.elem().name()
        );
    }
    check_broadcast(op, &[&a.shape, &b_in.shape], out_shape)?;
    let (mut b, v) = start(&[a, b_in])?;
    let x = b.broadcast_to(&v[0], out_shape)?;
    let y = b.broadcast_to(&v[1], out_shape)?;
    let out = match op {
        "eq" => b.compare("EQ", &x, &y)?,
        "ne" => b.compare("NE", &x, &y)?,
        "lt" => b.compare("LT", &x, &y)?,
        "le" => b.compare("LE", &x, &y)?,
        "gt" => b.compare("GT", &x, &y)?,
        "ge" => b.compare("GE", &x, &y)?,
        "logical_and" | "logical_or" => {
            if a.elem() != Bool {
                return invalid!(
                    "compare: {op} needs bool operands, found {}",
                    a.elem().name()
                );
            }
            let name = if op == "logical_and" {
                "stablehlo.and"
            } else {
                "stablehlo.or"
            };
            b.binary(name, &x, &y)?
        }
        _ => return invalid!("compare: unknown op {op:?}"),
    };
    Ok(b.finish(&[out]))
}

pub fn select(cond: &Input, a: &Input, b_in: &Input, out_shape: &[i64]) -> Result<Program> {
    expect_elem("where", "the condition", cond, &[Bool])?;
    if a.elem() != b_in.elem() {
        return invalid!(
            "where: dtypes {} and {} differ",
            a.elem().name(),
            b_in.elem().name()
        );
    }
    check_broadcast("where", &[&cond.shape, &a.shape, &b_in.shape], out_shape)?;
    let (mut b, v) = start(&[cond, a, b_in])?;
    let c = b.broadcast_to(&v[0], out_shape)?;
    let x = b.broadcast_to(&v[1], out_shape)?;
    let y = b.broadcast_to(&v[2], out_shape)?;
    let out = b.select(&c, &x, &y)?;
    Ok(b.finish(&[out]))
}

/// Element type conversion; float to integer truncates toward zero, anything to bool is `!= 0`.
pub fn astype(x: &Input, dst: ElementType) -> Result<Program> {
    let (mut b, v) = start(&[x])?;
    let out = if dst == Bool && x.elem() != Bool {
        let zero = b.splat(crate::hlo::zero(x.elem()), x.elem(), &x.shape)?;
        b.compare("NE", &v[0], &zero)?
    } else {
        b.convert(&v[0], dst)?
    };
    Ok(b.finish(&[out]))
}

/// `dx = dy * op'(x)` for gelu, gelu_tanh and silu.
pub fn activation_backward(op: &str, x: &Input, dy: &Input) -> Result<Program> {
    expect_elem("activation_backward", "x", x, &[F32])?;
    expect_elem("activation_backward", "dy", dy, &[F32])?;
    if x.shape != dy.shape {
        return invalid!(
            "activation_backward: x {:?} and dy {:?} differ",
            x.shape,
            dy.shape
        );
    }
    let (mut b, v) = start(&[x, dy])?;
    let (x, dy) = (&v[0], &v[1]);
    let grad = match op {
        "gelu" => {
            // Phi(x) + x phi(x)
            let scaled = mul_by(&mut b, x, FRAC_1_SQRT_2)?;
            let e = erf(&mut b, &scaled)?;
            let cdf = add_const(&mut b, &e, 1.0)?;
            let cdf = mul_by(&mut b, &cdf, 0.5)?;
            let x2 = b.mul(x, x)?;
            let arg = mul_by(&mut b, &x2, -0.5)?;
            let pdf = b.unary("stablehlo.exponential", &arg)?;
            let pdf = mul_by(&mut b, &pdf, FRAC_2_SQRT_PI * FRAC_1_SQRT_2 * 0.5)?;
            let xpdf = b.mul(x, &pdf)?;
            b.add(&cdf, &xpdf)?
        }
        "gelu_tanh" => {
            // 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2)
            let inner = gelu_tanh_inner(&mut b, x)?;
            let t = b.unary("stablehlo.tanh", &inner)?;
            let left = add_const(&mut b, &t, 1.0)?;
            let left = mul_by(&mut b, &left, 0.5)?;
            let t2 = b.mul(&t, &t)?;
            let sech2 = mul_by(&mut b, &t2, -1.0)?;
            let sech2 = add_const(&mut b, &sech2, 1.0)?;
            let x2 = b.mul(x, x)?;
            let poly = mul_by(&mut b, &x2, 3.0 * 0.044715)?;
            let poly = add_const(&mut b, &poly, 1.0)?;
            let right = b.mul(&sech2, &poly)?;
            let right = b.mul(&right, x)?;
            let right = mul_by(&mut b, &right, 0.5 * (2.0 / PI).sqrt())?;
            b.add(&left, &right)?
        }
        "silu" => {
            // s (1 + x (1 - s))
            let s = b.unary("stablehlo.logistic", x)?;
            let one_minus = mul_by(&mut b, &s, -1.0)?;
            let one_minus = add_const(&mut b, &one_minus, 1.0)?;
            let inner = b.mul(x, &one_minus)?;
            let inner = add_const(&mut b, &inner, 1.0)?;
            b.mul(&s, &inner)?
        }
        _ => return invalid!("activation_backward: unknown activation {op:?}"),
    };
    let out = b.mul(&grad, dy)?;
    Ok(b.finish(&[out]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, i64s};
    use super::*;

    #[test]
    fn binary_broadcasts_both_operands() {
        let p = binary("add", &f32s(&[3, 1]), &f32s(&[4]), &[3, 4]).unwrap();
        assert!(p.text.contains("broadcast_dimensions = array<i64: 0, 1>"));
        assert!(p.text.contains("broadcast_dimensions = array<i64: 1>"));
        assert!(binary("add", &f32s(&[3]), &f32s(&[4]), &[4]).is_err());
        assert!(binary("add", &f32s(&[3]), &f32s(&[3]), &[2, 3]).is_err());
        assert!(binary("div", &i64s(&[3]), &i64s(&[3]), &[3]).is_err());
    }

    #[test]
    fn unary_knows_which_ops_exist_per_dtype() {
        assert!(unary("exp", &f32s(&[2]))
            .unwrap()
            .text
            .contains("stablehlo.exponential"));
        assert!(unary("neg", &i64s(&[2])).is_ok());
        assert!(unary("exp", &i64s(&[2])).is_err());
        assert!(unary("gelu", &f32s(&[2]))
            .unwrap()
            .text
            .contains("chlo.erf"));
        assert!(unary("nope", &f32s(&[2])).is_err());
    }

    #[test]
    fn comparisons_give_bool() {
        let p = compare("lt", &f32s(&[2]), &f32s(&[2]), &[2]).unwrap();
        assert_eq!(p.results[0].elem, Bool);
        assert!(compare("logical_and", &f32s(&[2]), &f32s(&[2]), &[2]).is_err());
    }
}
