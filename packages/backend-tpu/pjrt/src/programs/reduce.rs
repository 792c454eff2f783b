//! Reductions over one axis, argmax, and (causal, log-) softmax.

use super::{expect_axis, expect_elem, start, Input, Target};
use crate::error::Result;
use crate::hlo::{Builder, Program, Reducer, Scalar, Value};
use crate::invalid;
use crate::types::ElementType::{self, Bool, F32, I64};

/// Sum over `axes` accumulated in `wide`, returned in the operand's type.
pub fn wide_sum(b: &mut Builder, x: &Value, axes: &[i64], wide: ElementType) -> Result<Value> {
    let w = b.convert(x, wide)?;
    let s = b.reduce(&w, Scalar::F(0.0), Reducer::Add, axes)?;
    b.convert(&s, x.elem())
}

pub fn reduce(op: &str, x: &Input, axis: usize, target: Target) -> Result<Program> {
    expect_axis(op, axis, x)?;
    let axes = [axis as i64];
    let (mut b, v) = start(&[x])?;
    let x_v = &v[0];
    let out = match (x.elem(), op) {
        (F32, "sum") => wide_sum(&mut b, x_v, &axes, target.wide)?,
        (F32, "mean") => {
            let w = b.convert(x_v, target.wide)?;
            let s = b.reduce(&w, Scalar::F(0.0), Reducer::Add, &axes)?;
            let n = b.splat(Scalar::F(x.shape[axis] as f64), target.wide, s.dims())?;
            let m = b.div(&s, &n)?;
            b.convert(&m, F32)?
        }
        (F32, "sum_squares") => {
            let w = b.convert(x_v, target.wide)?;
            let sq = b.mul(&w, &w)?;
            let s = b.reduce(&sq, Scalar::F(0.0), Reducer::Add, &axes)?;
            b.convert(&s, F32)?
        }
        (F32, "max") => nan_reduce(
            &mut b,
            x_v,
            Scalar::F(f64::NEG_INFINITY),
            Reducer::Max,
            &axes,
        )?,
        (F32, "min") => nan_reduce(&mut b, x_v, Scalar::F(f64::INFINITY), Reducer::Min, &axes)?,
        (I64, "sum") => b.reduce(x_v, Scalar::I(0), Reducer::Add, &axes)?,
        (I64, "max") => b.reduce(x_v, Scalar::I(i64::MIN), Reducer::Max, &axes)?,
        (I64, "min") => b.reduce(x_v, Scalar::I(i64::MAX), Reducer::Min, &axes)?,
        (e, _) => return invalid!("reduce: {op} is not defined for {}", e.name()),
    };
    Ok(b.finish(&[out]))
}

/// A max or min reduction that gives NaN where the reduced values hold one (as numpy).
pub fn nan_reduce(
    b: &mut Builder,
    x: &Value,
    init: Scalar,
    reducer: Reducer,
    axes: &[i64],
) -> Result<Value> {
    let plain = b.reduce(x, init, reducer, axes)?;
    let nan = b.compare("NE", x, x)?;
    let has_nan = b.reduce(&nan, Scalar::B(false), Reducer::Or, axes)?;
    let nans = b.splat(Scalar::F(f64::NAN), x.elem(), plain.dims())?;
    b.select(&has_nan, &nans, &plain)
}

pub fn argmax(x: &Input, axis: usize) -> Result<Program> {
    expect_axis("argmax", axis, x)?;
    expect_elem("argmax", "the operand", x, &[F32, I64])?;
    if x.shape[axis] == 0 {
        return invalid!("argmax: axis {axis} of {:?} is empty", x.shape);
    }
    let (mut b, v) = start(&[x])?;
    let out = b.argmax(&v[0], axis)?;
    Ok(b.finish(&[out]))
}

/// True where query q (of t, at position q + s - t) may see key k (of s): k <= q + s - t,
/// and, with a `window` w > 0, q + s - t - k < w. Shaped `[t, s]`.
pub fn causal_visible(b: &mut Builder, t: i64, s: i64, window: i64) -> Result<Value> {
    let q = b.iota(I64, &[t, s], 0)?;
    let k = b.iota(I64, &[t, s], 1)?;
    let shift = b.splat(Scalar::I(s - t), I64, &[t, s])?;
    let pos = b.add(&q, &shift)?;
    let visible = b.compare("LE", &k, &pos)?;
    if window <= 0 {
        return Ok(visible);
    }
    let back = b.sub(&pos, &k)?;
    let w = b.splat(Scalar::I(window), I64, &[t, s])?;
    let near = b.compare("LT", &back, &w)?;
    b.binary("stablehlo.and", &visible, &near)
}

/// Softmax pieces over the last axis of `x` with an optional `[.., t, s]`
/// mask (broadcast over leading axes): `(shifted, row_max, exps, row_sum)`
/// where hidden entries of `exps` are exactly 0.
pub fn softmax_parts(
    b: &mut Builder,
    x: &Value,
    mask: Option<&Value>,
) -> Result<(Value, Value, Value, Value)> {
    let dims = x.dims().to_vec();
    let last = (dims.len() - 1) as i64;
    let mask = match mask {
        Some(m) => Some(b.broadcast_to(m, &dims)?),
        None => None,
    };
    let neg_inf = b.splat(Scalar::F(f64::NEG_INFINITY), x.elem(), &dims)?;
    let masked = match &mask {
        Some(m) => b.select(m, x, &neg_inf)?,
        None => x.clone(),
    };
    let row_max = b.reduce(&masked, Scalar::F(f64::NEG_INFINITY), Reducer::Max, &[last])?;
    let map: Vec<i64> = (0..last).collect();
    let max_b = b.broadcast_in_dim(&row_max, &map, &dims)?;
    let shifted = b.sub(&masked, &max_b)?;
    let mut exps = b.unary("stablehlo.exponential", &shifted)?;
    if let Some(m) = &mask {
        let zeros = b.splat(Scalar::F(0.0), x.elem(), &dims)?;
        exps = b.select(m, &exps, &zeros)?;
    }
    let row_sum = b.reduce(&exps, Scalar::F(0.0), Reducer::Add, &[last])?;
    Ok((shifted, row_max, exps, row_sum))
}

/// (Log-)softmax of the last axis; `causal` masks `[..., t, s]` scores.
pub fn softmax(x: &Input, causal: bool, log: bool) -> Result<Program> {
    expect_elem("softmax", "the operand", x, &[F32])?;
    if x.rank() == 0 || (causal && x.rank() < 2) {
        return invalid!("softmax: shape {:?} (causal: {causal})", x.shape);
    }
    let (mut b, v) = start(&[x])?;
    let dims = x.shape.clone();
    let r = dims.len();
    let mask = if causal {
        Some(causal_visible(&mut b, dims[r - 2], dims[r - 1], 0)?)
    } else {
        None
    };
    let (shifted, _, exps, row_sum) = softmax_parts(&mut b, &v[0], mask.as_ref())?;
    let map: Vec<i64> = (0..r as i64 - 1).collect();
    let out = if log {
        let lse = b.unary("stablehlo.log", &row_sum)?;
        let lse = b.broadcast_in_dim(&lse, &map, &dims)?;
        b.sub(&shifted, &lse)?
    } else {
        let sum = b.broadcast_in_dim(&row_sum, &map, &dims)?;
        b.div(&exps, &sum)?
    };
    Ok(b.finish(&[out]))
}

/// Is any element of a bool tensor true (a scalar)?
pub fn any(b: &mut Builder, x: &Value) -> Result<Value> {
    if x.elem() != Bool {
        return invalid!("any: expected bool, found {}", x.ty);
    }
    let axes: Vec<i64> = (0..x.rank() as i64).collect();
    b.reduce(x, Scalar::B(false), Reducer::Or, &axes)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, i64s};
    use super::*;

    #[test]
    fn float_sums_accumulate_wide() {
        let p = reduce("sum", &f32s(&[3, 4]), 1, Target::default()).unwrap();
        assert!(p.text.contains("tensor<3x4xf64>"));
        let p = reduce("sum", &f32s(&[3, 4]), 1, Target::for_platform("tpu")).unwrap();
        assert!(!p.text.contains("f64"));
        assert!(reduce("mean", &i64s(&[3]), 0, Target::default()).is_err());
        assert!(reduce("sum", &f32s(&[3]), 1, Target::default()).is_err());
    }

    #[test]
    fn softmax_masks_with_iotas() {
        let p = softmax(&f32s(&[2, 3, 5]), true, true).unwrap();
        assert!(p.text.contains("stablehlo.iota"));
        assert!(p.text.contains("stablehlo.select"));
        assert!(softmax(&f32s(&[5]), true, false).is_err());
    }
}
