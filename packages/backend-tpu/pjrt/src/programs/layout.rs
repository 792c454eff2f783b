//! Strided copies (permute, slicing, broadcast) and concatenation.

use super::{start, Input};
use crate::error::Result;
use crate::hlo::{zero, Builder, Program, Value};
use crate::invalid;
use crate::types::{check_dims, ElementType};

/// `out[i] = flat(x)[offset + sum(i_d * strides[d])]`.
///
/// Views that are a slice of some row-major factorization of `x` (permutes,
/// slices with steps that divide evenly, broadcasts) become reshape, slice,
/// transpose and broadcast; anything else becomes one gather of computed
/// flat indices.
pub fn copy_strided(x: &Input, out_shape: &[i64], strides: &[i64], offset: i64) -> Result<Program> {
    check_dims("copy_strided", out_shape)?;
    if strides.len() != out_shape.len() || strides.iter().any(|&s| s < 0) || offset < 0 {
        return invalid!(
            "copy_strided: strides {strides:?} and offset {offset} for shape {out_shape:?}"
        );
    }
    let n = x.count();
    let (mut b, v) = start(&[x])?;
    let out_count: i64 = out_shape.iter().product();
    if out_count == 0 {
        let out = b.splat(zero(x.elem()), x.elem(), out_shape)?;
        return Ok(b.finish(&[out]));
    }
    let last = offset
        + out_shape
            .iter()
            .zip(strides)
            .map(|(&d, &s)| (d - 1) * s)
            .sum::<i64>();
    if last >= n {
        return invalid!(
            "copy_strided: the view {out_shape:?} strides {strides:?} offset {offset} reaches \
             element {last} of {n}"
        );
    }
    let flat = b.reshape(&v[0], &[n])?;
    let out = match as_slices(&mut b, &flat, out_shape, strides, offset)? {
        Some(out) => out,
        None => gather_view(&mut b, &flat, out_shape, strides, offset)?,
    };
    Ok(b.finish(&[out]))
}

/// The view as reshape + slice + transpose + broadcast, when strides allow.
fn as_slices(
    b: &mut Builder,
    flat: &Value,
    out_shape: &[i64],
    strides: &[i64],
    offset: i64,
) -> Result<Option<Value>> {
    let n = flat.dims()[0];
    // The dims that walk memory, largest stride first.
    let mut walking: Vec<usize> = (0..out_shape.len())
        .filter(|&d| out_shape[d] > 1 && strides[d] > 0)
        .collect();
    walking.sort_by_key(|&d| std::cmp::Reverse(strides[d]));
    let s: Vec<i64> = walking.iter().map(|&d| strides[d]).collect();
    if s.windows(2).any(|w| w[0] == w[1] || w[0] % w[1] != 0) {
        return Ok(None);
    }
    let (radices, starts) = match s.first() {
        None => (vec![n], vec![offset]),
        Some(&top) => {
            if n % top != 0 {
                return Ok(None);
            }
            let mut radices = vec![n / top];
            radices.extend(s.windows(2).map(|w| w[0] / w[1]));
            radices.push(s[s.len() - 1]);
            let mut starts = vec![offset / top];
            let mut rest = offset % top;
            for &step in &s[1..] {
                starts.push(rest / step);
                rest %= step;
            }
            starts.push(rest);
            (radices, starts)
        }
    };
    let mut limits: Vec<i64> = walking
        .iter()
        .zip(&starts)
        .map(|(&d, &o)| o + out_shape[d])
        .collect();
    limits.push(starts[starts.len() - 1] + 1);
    if limits.iter().zip(&radices).any(|(l, r)| l > r) {
        return Ok(None);
    }
    let grid = b.reshape(flat, &radices)?;
    let ones = vec![1; radices.len()];
    let cut = b.slice(&grid, &starts, &limits, &ones)?;
    let sizes: Vec<i64> = walking.iter().map(|&d| out_shape[d]).collect();
    let cut = b.reshape(&cut, &sizes)?;
    // Back to the view's axis order, then fill the unit and broadcast axes.
    let mut by_position = walking.clone();
    by_position.sort_unstable();
    let perm: Vec<i64> = by_position
        .iter()
        .map(|d| walking.iter().position(|w| w == d).unwrap() as i64)
        .collect();
    let ordered = b.transpose(&cut, &perm)?;
    let map: Vec<i64> = by_position.iter().map(|&d| d as i64).collect();
    Ok(Some(b.broadcast_in_dim(&ordered, &map, out_shape)?))
}

/// The view as a gather of flat indices computed on the device.
fn gather_view(
    b: &mut Builder,
    flat: &Value,
    out_shape: &[i64],
    strides: &[i64],
    offset: i64,
) -> Result<Value> {
    let mut index = b.splat(crate::hlo::Scalar::I(offset), ElementType::I64, out_shape)?;
    for (d, &stride) in strides.iter().enumerate() {
        if stride == 0 || out_shape[d] == 1 {
            continue;
        }
        let iota = b.iota(ElementType::I64, out_shape, d)?;
        let step = b.splat(crate::hlo::Scalar::I(stride), ElementType::I64, out_shape)?;
        let term = b.mul(&iota, &step)?;
        index = b.add(&index, &term)?;
    }
    let mut points = out_shape.to_vec();
    points.push(1);
    let index = b.reshape(&index, &points)?;
    b.gather_points(flat, &index)
}

pub fn concat(xs: &[Input], axis: usize) -> Result<Program> {
    let Some(first) = xs.first() else {
        return invalid!("concat: no operands");
    };
    if axis >= first.rank() {
        return invalid!(
            "concat: axis {axis} is out of range for shape {:?}",
            first.shape
        );
    }
    let refs: Vec<&Input> = xs.iter().collect();
    let (mut b, v) = start(&refs)?;
    let out = b.concatenate(&v, axis)?;
    Ok(b.finish(&[out]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::f32s;
    use super::*;

    #[test]
    fn a_permute_is_a_transpose() {
        // [2, 3, 4] read as [4, 2, 3]
        let p = copy_strided(&f32s(&[2, 3, 4]), &[4, 2, 3], &[1, 12, 4], 0).unwrap();
        assert!(p.text.contains("stablehlo.transpose"), "{}", p.text);
        assert!(!p.text.contains("stablehlo.gather"));
    }

    #[test]
    fn a_stepped_slice_is_a_slice() {
        // x[0:4:2, :, 1:] of [4, 3, 5]
        let p = copy_strided(&f32s(&[4, 3, 5]), &[2, 3, 4], &[30, 5, 1], 1).unwrap();
        assert!(p.text.contains("stablehlo.slice"));
        assert!(!p.text.contains("stablehlo.gather"));
    }

    #[test]
    fn a_broadcast_is_a_broadcast() {
        let p = copy_strided(&f32s(&[3]), &[2, 3], &[0, 1], 0).unwrap();
        assert!(p.text.contains("stablehlo.broadcast_in_dim"));
        assert!(!p.text.contains("stablehlo.gather"));
    }

    #[test]
    fn uneven_steps_fall_back_to_a_gather() {
        let p = copy_strided(&f32s(&[4, 3, 5]), &[4, 3, 2], &[15, 5, 3], 0).unwrap();
        assert!(p.text.contains("stablehlo.gather"));
    }

    #[test]
    fn views_past_the_end_are_refused() {
        assert!(copy_strided(&f32s(&[4]), &[3], &[2], 0).is_err());
        assert!(copy_strided(&f32s(&[4]), &[2], &[1], -1).is_err());
        assert!(copy_strided(&f32s(&[4]), &[0, 5], &[1, 1], 0).is_ok());
    }
}
