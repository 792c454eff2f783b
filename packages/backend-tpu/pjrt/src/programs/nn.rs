//! Fused normalization, activation, loss and rotary programs (backend API 1.2).
//!
//! Rows are the leading axes, the last axis is normalized; statistics come
//! back shaped like the rows. Sums accumulate in the target's wide type.

use super::index::first_bad;
use super::{expect_elem, start, Input, Target};
use crate::error::Result;
use crate::hlo::{Builder, Program, Reducer, Scalar, Value};
use crate::invalid;
use crate::types::ElementType::{F32, F64, I64};

/// The row count axes map: operand axis i -> result axis i, for broadcasting row stats back.
fn rows_map(rank: usize) -> Vec<i64> {
    (0..rank as i64 - 1).collect()
}

/// Mean over the last axis in `wide`, shaped like the rows (in `wide`).
fn row_mean(b: &mut Builder, x: &Value, target: Target) -> Result<Value> {
    let last = x.rank() as i64 - 1;
    let d = x.dims()[last as usize];
    let w = b.convert(x, target.wide)?;
    let s = b.reduce(&w, Scalar::F(0.0), Reducer::Add, &[last])?;
    let n = b.splat(Scalar::F(d as f64), target.wide, s.dims())?;
    b.div(&s, &n)
}

/// Broadcast row statistics `[rows]` back to `dims` and convert to `x`'s type.
fn spread(b: &mut Builder, stat: &Value, dims: &[i64]) -> Result<Value> {
    let s = b.convert(stat, F32)?;
    b.broadcast_in_dim(&s, &rows_map(dims.len()), dims)
}

/// `1 / sqrt(x)`: XLA's float64 rsqrt is that anyway (and says so in its log).
fn reciprocal_sqrt(b: &mut Builder, x: &Value) -> Result<Value> {
    if x.elem() != F64 {
        return b.unary("stablehlo.rsqrt", x);
    }
    let root = b.unary("stablehlo.sqrt", x)?;
    let one = b.splat(Scalar::F(1.0), F64, x.dims())?;
    b.div(&one, &root)
}

fn check_norm(op: &str, x: &Input, params: &[Option<&Input>]) -> Result<i64> {
    expect_elem(op, "x", x, &[F32])?;
    let Some(&d) = x.shape.last() else {
        return invalid!("{op}: x needs at least one axis, found a 0-d tensor");
    };
    for p in params.iter().flatten() {
        expect_elem(op, "a parameter", p, &[F32])?;
        if p.shape != [d] {
            return invalid!("{op}: parameter {:?} for rows of {d}", p.shape);
        }
    }
    Ok(d)
}

fn check_rows(op: &str, x: &Input, stats: &[&Input]) -> Result<()> {
    let rows = &x.shape[..x.rank() - 1];
    for s in stats {
        expect_elem(op, "a statistic", s, &[F32])?;
        if s.shape != rows {
            return invalid!("{op}: statistics {:?} for rows {rows:?}", s.shape);
        }
    }
    Ok(())
}

/// `y = (x - mean) * rstd * weight + bias`, with `(y, mean, rstd)`.
pub fn layer_norm(
    x: &Input,
    weight: Option<&Input>,
    bias: Option<&Input>,
    eps: f64,
    target: Target,
) -> Result<Program> {
    check_norm("layer_norm", x, &[weight, bias])?;
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let (mut b, v) = start(&inputs)?;
    let dims = x.shape.clone();
    let last = dims.len() as i64 - 1;
    let xw = b.convert(&v[0], target.wide)?;
    let mean = row_mean(&mut b, &v[0], target)?;
    let mean_b = b.broadcast_in_dim(&mean, &rows_map(dims.len()), &dims)?;
    let centered = b.sub(&xw, &mean_b)?;
    let sq = b.mul(&centered, &centered)?;
    let var = b.reduce(&sq, Scalar::F(0.0), Reducer::Add, &[last])?;
    let n = b.splat(
        Scalar::F(dims[last as usize] as f64),
        target.wide,
        var.dims(),
    )?;
    let var = b.div(&var, &n)?;
    let eps_v = b.splat(Scalar::F(eps), target.wide, var.dims())?;
    let var = b.add(&var, &eps_v)?;
    let rstd = reciprocal_sqrt(&mut b, &var)?;
    let rstd_b = b.broadcast_in_dim(&rstd, &rows_map(dims.len()), &dims)?;
    let xhat = b.mul(&centered, &rstd_b)?;
    let mut y = b.convert(&xhat, F32)?;
    let mut next = 1;
    if weight.is_some() {
        let w = b.broadcast_to(&v[next], &dims)?;
        y = b.mul(&y, &w)?;
        next += 1;
    }
    if bias.is_some() {
        let bb = b.broadcast_to(&v[next], &dims)?;
        y = b.add(&y, &bb)?;
    }
    let mean = b.convert(&mean, F32)?;
    let rstd = b.convert(&rstd, F32)?;
    Ok(b.finish(&[y, mean, rstd]))
}

/// Gradients of a norm from `xhat` (normalized x) and `g = dy * weight`:
/// `dx = (g - xhat * mean(g xhat) [- mean(g)]) * rstd`.
fn norm_dx(
    b: &mut Builder,
    g: &Value,
    xhat: &Value,
    rstd_b: &Value,
    centered: bool,
    target: Target,
) -> Result<Value> {
    let dims = g.dims().to_vec();
    let gx = b.mul(g, xhat)?;
    let mean_gx = row_mean(b, &gx, target)?;
    let mean_gx = spread(b, &mean_gx, &dims)?;
    let proj = b.mul(xhat, &mean_gx)?;
    let mut inner = b.sub(g, &proj)?;
    if centered {
        let mean_g = row_mean(b, g, target)?;
        let mean_g = spread(b, &mean_g, &dims)?;
        inner = b.sub(&inner, &mean_g)?;
    }
    b.mul(&inner, rstd_b)
}

/// Sum over every axis but the last, in `wide`.
fn column_sum(b: &mut Builder, x: &Value, target: Target) -> Result<Value> {
    let axes: Vec<i64> = (0..x.rank() as i64 - 1).collect();
    let w = b.convert(x, target.wide)?;
    let s = b.reduce(&w, Scalar::F(0.0), Reducer::Add, &axes)?;
    b.convert(&s, F32)
}

/// `(dx, dweight?, dbias?)` of layer_norm (results in that order, absent ones left out).
pub fn layer_norm_backward(
    dy: &Input,
    x: &Input,
    weight: Option<&Input>,
    mean: &Input,
    rstd: &Input,
    with_bias: bool,
    target: Target,
) -> Result<Program> {
    check_norm("layer_norm_backward", x, &[weight])?;
    if dy.shape != x.shape {
        return invalid!("layer_norm_backward: dy {:?} for x {:?}", dy.shape, x.shape);
    }
    check_rows("layer_norm_backward", x, &[mean, rstd])?;
    let mut inputs = vec![dy, x, mean, rstd];
    inputs.extend(weight);
    let (mut b, v) = start(&inputs)?;
    let dims = x.shape.clone();
    let mean_b = b.broadcast_in_dim(&v[2], &rows_map(dims.len()), &dims)?;
    let rstd_b = b.broadcast_in_dim(&v[3], &rows_map(dims.len()), &dims)?;
    let centered = b.sub(&v[1], &mean_b)?;
    let xhat = b.mul(&centered, &rstd_b)?;
    let g = match weight {
        Some(_) => {
            let w = b.broadcast_to(&v[4], &dims)?;
            b.mul(&v[0], &w)?
        }
        None => v[0].clone(),
    };
    let dx = norm_dx(&mut b, &g, &xhat, &rstd_b, true, target)?;
    let mut results = vec![dx];
    if weight.is_some() {
        let dyx = b.mul(&v[0], &xhat)?;
        results.push(column_sum(&mut b, &dyx, target)?);
    }
    if with_bias {
        results.push(column_sum(&mut b, &v[0], target)?);
    }
    Ok(b.finish(&results))
}

/// `y = x * rstd * weight` with `rstd = 1 / sqrt(mean(x^2) + eps)`; `(y, rstd)`.
pub fn rms_norm(x: &Input, weight: Option<&Input>, eps: f64, target: Target) -> Result<Program> {
    check_norm("rms_norm", x, &[weight])?;
    let mut inputs = vec![x];
    inputs.extend(weight);
    let (mut b, v) = start(&inputs)?;
    let dims = x.shape.clone();
    let sq = b.mul(&v[0], &v[0])?;
    let ms = row_mean(&mut b, &sq, target)?;
    let eps_v = b.splat(Scalar::F(eps), target.wide, ms.dims())?;
    let ms = b.add(&ms, &eps_v)?;
    let rstd = reciprocal_sqrt(&mut b, &ms)?;
    let rstd_b = spread(&mut b, &rstd, &dims)?;
    let mut y = b.mul(&v[0], &rstd_b)?;
    if weight.is_some() {
        let w = b.broadcast_to(&v[1], &dims)?;
        y = b.mul(&y, &w)?;
    }
    let rstd = b.convert(&rstd, F32)?;
    Ok(b.finish(&[y, rstd]))
}

/// `(dx, dweight?)` of rms_norm.
pub fn rms_norm_backward(
    dy: &Input,
    x: &Input,
    weight: Option<&Input>,
    rstd: &Input,
    target: Target,
) -> Result<Program> {
    check_norm("rms_norm_backward", x, &[weight])?;
    if dy.shape != x.shape {
        return invalid!("rms_norm_backward: dy {:?} for x {:?}", dy.shape, x.shape);
    }
    check_rows("rms_norm_backward", x, &[rstd])?;
    let mut inputs = vec![dy, x, rstd];
    inputs.extend(weight);
    let (mut b, v) = start(&inputs)?;
    let dims = x.shape.clone();
    let rstd_b = b.broadcast_in_dim(&v[2], &rows_map(dims.len()), &dims)?;
    let xhat = b.mul(&v[1], &rstd_b)?;
    let g = match weight {
        Some(_) => {
            let w = b.broadcast_to(&v[3], &dims)?;
            b.mul(&v[0], &w)?
        }
        None => v[0].clone(),
    };
    let dx = norm_dx(&mut b, &g, &xhat, &rstd_b, false, target)?;
    let mut results = vec![dx];
    if weight.is_some() {
        let dyx = b.mul(&v[0], &xhat)?;
        results.push(column_sum(&mut b, &dyx, target)?);
    }
    Ok(b.finish(&results))
}

/// `[position, value]` of the first target that is neither `ignore_index` nor a class.
fn target_check(b: &mut Builder, t: &Value, classes: i64, ignore_index: i64) -> Result<Value> {
    let n = t.dims()[0];
    let zero = b.splat(Scalar::I(0), I64, &[n])?;
    let c = b.splat(Scalar::I(classes), I64, &[n])?;
    let ign = b.splat(Scalar::I(ignore_index), I64, &[n])?;
    let low = b.compare("LT", t, &zero)?;
    let high = b.compare("GE", t, &c)?;
    let out = b.binary("stablehlo.or", &low, &high)?;
    let counted = b.compare("NE", t, &ign)?;
    let bad = b.binary("stablehlo.and", &out, &counted)?;
    first_bad(b, t, &bad)
}

fn check_ce(op: &str, logits: &Input, targets: &Input) -> Result<(i64, i64)> {
    expect_elem(op, "logits", logits, &[F32])?;
    expect_elem(op, "targets", targets, &[I64])?;
    if logits.rank() != 2 || targets.shape != [logits.shape[0]] {
        return invalid!(
            "{op}: logits {:?} and targets {:?}",
            logits.shape,
            targets.shape
        );
    }
    Ok((logits.shape[0], logits.shape[1]))
}

/// `one_hot[i, c] = targets[i] == c`.
fn one_hot(b: &mut Builder, t: &Value, n: i64, classes: i64) -> Result<Value> {
    let classes_iota = b.iota(I64, &[n, classes], 1)?;
    let tb = b.broadcast_in_dim(t, &[0], &[n, classes])?;
    b.compare("EQ", &classes_iota, &tb)
}

/// Softmax cross-entropy: `(losses [n], lse [n], check)`.
pub fn cross_entropy(
    logits: &Input,
    targets: &Input,
    ignore_index: i64,
    target: Target,
) -> Result<Program> {
    let (n, classes) = check_ce("cross_entropy", logits, targets)?;
    let (mut b, v) = start(&[logits, targets])?;
    let x = b.convert(&v[0], target.wide)?;
    let (_, row_max, _, row_sum) = super::reduce::softmax_parts(&mut b, &x, None)?;
    let log_sum = b.unary("stablehlo.log", &row_sum)?;
    let lse = b.add(&row_max, &log_sum)?;
    let hot = one_hot(&mut b, &v[1], n, classes)?;
    let zeros = b.splat(Scalar::F(0.0), target.wide, &[n, classes])?;
    let picked = b.select(&hot, &x, &zeros)?;
    let picked = b.reduce(&picked, Scalar::F(0.0), Reducer::Add, &[1])?;
    let loss = b.sub(&lse, &picked)?;
    let ign = b.splat(Scalar::I(ignore_index), I64, &[n])?;
    let kept = b.compare("NE", &v[1], &ign)?;
    let zero_n = b.splat(Scalar::F(0.0), target.wide, &[n])?;
    let loss = b.select(&kept, &loss, &zero_n)?;
    let loss = b.convert(&loss, F32)?;
    let lse = b.convert(&lse, F32)?;
    let check = target_check(&mut b, &v[1], classes, ignore_index)?;
    Ok(b.finish(&[loss, lse, check]))
}

/// `dlogits = (exp(logits - lse) - one_hot) * grad[:, None]`, 0 on ignored rows; `(dlogits, check)`.
pub fn cross_entropy_backward(
    logits: &Input,
    targets: &Input,
    lse: &Input,
    grad: &Input,
    ignore_index: i64,
    target: Target,
) -> Result<Program> {
    let (n, classes) = check_ce("cross_entropy_backward", logits, targets)?;
    for (what, s) in [("lse", lse), ("grad", grad)] {
        expect_elem("cross_entropy_backward", what, s, &[F32])?;
        if s.shape != [n] {
            return invalid!("cross_entropy_backward: {what} {:?} for {n} rows", s.shape);
        }
    }
    let (mut b, v) = start(&[logits, targets, lse, grad])?;
    let dims = [n, classes];
    let x = b.convert(&v[0], target.wide)?;
    let l = b.convert(&v[2], target.wide)?;
    let l = b.broadcast_in_dim(&l, &[0], &dims)?;
    let shifted = b.sub(&x, &l)?;
    let p = b.unary("stablehlo.exponential", &shifted)?;
    let hot = one_hot(&mut b, &v[1], n, classes)?;
    let ones = b.splat(Scalar::F(1.0), target.wide, &dims)?;
    let zeros = b.splat(Scalar::F(0.0), target.wide, &dims)?;
    let hot = b.select(&hot, &ones, &zeros)?;
    let d = b.sub(&p, &hot)?;
    let ign = b.splat(Scalar::I(ignore_index), I64, &[n])?;
    let kept = b.compare("NE", &v[1], &ign)?;
    let g = b.convert(&v[3], target.wide)?;
    let zero_n = b.splat(Scalar::F(0.0), target.wide, &[n])?;
    let g = b.select(&kept, &g, &zero_n)?;
    let g = b.broadcast_in_dim(&g, &[0], &dims)?;
    let d = b.mul(&d, &g)?;
    let d = b.convert(&d, F32)?;
    let check = target_check(&mut b, &v[1], classes, ignore_index)?;
    Ok(b.finish(&[d, check]))
}

/// `theta ** (-2 i / head_dim)` for i < head_dim / 2, in float32 like the reference formula.
pub fn inverse_frequencies(theta: f64, head_dim: i64) -> Vec<f32> {
    let half = head_dim / 2;
    (0..half)
        .map(|i| {
            let exponent = (i as f32) * 2.0 / head_dim as f32;
            1.0 / (theta as f32).powf(exponent)
        })
        .collect()
}

/// Rotary embedding (split-half) of `x [..., heads, head_dim]` at int64
/// `positions [...]`; `(out, check)` where check flags a negative position.
pub fn rotary(
    x: &Input,
    positions: &Input,
    theta: f64,
    inverse: bool,
    target: Target,
) -> Result<Program> {
    expect_elem("rotary", "x", x, &[F32])?;
    expect_elem("rotary", "positions", positions, &[I64])?;
    let r = x.rank();
    if r < 2 || positions.shape != x.shape[..r - 2] || x.shape[r - 1] % 2 != 0 {
        return invalid!(
            "rotary: x {:?} (even head_dim) at positions {:?}",
            x.shape,
            positions.shape
        );
    }
    let dims = x.shape.clone();
    let (hd, half) = (dims[r - 1], dims[r - 1] / 2);
    let (mut b, v) = start(&[x, positions])?;
    let lead = &dims[..r - 2];
    let mut angle_dims = lead.to_vec();
    angle_dims.push(half);
    let freqs = inverse_frequencies(theta, hd);
    let freq_text: Vec<f64> = freqs.iter().map(|&f| f as f64).collect();
    let freq = b.vector_f32(&freq_text)?;
    let freq = b.broadcast_in_dim(&freq, &[lead.len() as i64], &angle_dims)?;
    let pos = b.convert(&v[1], F32)?;
    let map: Vec<i64> = (0..lead.len() as i64).collect();
    let pos = b.broadcast_in_dim(&pos, &map, &angle_dims)?;
    let angle = b.mul(&pos, &freq)?;
    let angle = b.convert(&angle, target.wide)?;
    let cos = b.unary("stablehlo.cosine", &angle)?;
    let mut sin = b.unary("stablehlo.sine", &angle)?;
    if inverse {
        sin = b.unary("stablehlo.negate", &sin)?;
    }
    // [..., half] -> [..., heads, half]
    let mut half_dims = dims.clone();
    half_dims[r - 1] = half;
    let mut spread_map: Vec<i64> = (0..lead.len() as i64).collect();
    spread_map.push(r as i64 - 1);
    let cos = b.broadcast_in_dim(&cos, &spread_map, &half_dims)?;
    let sin = b.broadcast_in_dim(&sin, &spread_map, &half_dims)?;
    let xw = b.convert(&v[0], target.wide)?;
    let x1 = b.narrow(&xw, r - 1, 0, half)?;
    let x2 = b.narrow(&xw, r - 1, half, half)?;
    let a = b.mul(&x1, &cos)?;
    let c = b.mul(&x2, &sin)?;
    let first = b.sub(&a, &c)?;
    let a = b.mul(&x2, &cos)?;
    let c = b.mul(&x1, &sin)?;
    let second = b.add(&a, &c)?;
    let out = b.concatenate(&[first, second], r - 1)?;
    let out = b.convert(&out, F32)?;
    let count = positions.count();
    let flat = b.reshape(&v[1], &[count])?;
    let zero = b.splat(Scalar::I(0), I64, &[count])?;
    let negative = b.compare("LT", &flat, &zero)?;
    let check = first_bad(&mut b, &flat, &negative)?;
    Ok(b.finish(&[out, check]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, i64s};
    use super::*;

    #[test]
    fn layer_norm_returns_y_and_row_statistics() {
        let w = f32s(&[8]);
        let p = layer_norm(
            &f32s(&[2, 3, 8]),
            Some(&w),
            Some(&w),
            1e-5,
            Target::default(),
        )
        .unwrap();
        let dims: Vec<&[i64]> = p.results.iter().map(|t| t.dims.as_slice()).collect();
        assert_eq!(dims, [&[2, 3, 8][..], &[2, 3], &[2, 3]]);
        assert!(layer_norm(
            &f32s(&[2, 3, 8]),
            Some(&f32s(&[7])),
            None,
            1e-5,
            Target::default()
        )
        .is_err());
        let p = layer_norm_backward(
            &f32s(&[4, 8]),
            &f32s(&[4, 8]),
            Some(&w),
            &f32s(&[4]),
            &f32s(&[4]),
            true,
            Target::default(),
        )
        .unwrap();
        assert_eq!(p.results.len(), 3);
    }

    #[test]
    fn cross_entropy_checks_its_targets() {
        let p = cross_entropy(&f32s(&[5, 3]), &i64s(&[5]), -100, Target::default()).unwrap();
        assert_eq!(p.results.len(), 3);
        assert!(cross_entropy(&f32s(&[5, 3]), &i64s(&[4]), -100, Target::default()).is_err());
    }

    #[test]
    fn rotary_frequencies_fall_geometrically() {
        let f = inverse_frequencies(10000.0, 8);
        assert_eq!(f.len(), 4);
        assert_eq!(f[0], 1.0);
        assert!((f[2] - 0.01).abs() < 1e-7);
        assert!(rotary(
            &f32s(&[2, 5, 3, 8]),
            &i64s(&[2, 5]),
            1e4,
            false,
            Target::default()
        )
        .is_ok());
        assert!(rotary(
            &f32s(&[2, 5, 3, 7]),
            &i64s(&[2, 5]),
            1e4,
            false,
            Target::default()
        )
        .is_err());
    }
}
