//! index_select, index_add, gather and scatter_add, each with an index check.
//!
//! XLA clamps out-of-range gather indices and drops out-of-range scatter
//! updates; the backend interface raises instead. So every indexing program
//! has a second result, `check = [position, value]` of the first bad index
//! (`[-1, 0]` when all are in range), which the caller reads back and turns
//! into an error naming the index.

use super::{expect_axis, expect_elem, start, Input};
use crate::error::Result;
use crate::hlo::{zero, Builder, Program, Reducer, Scalar, Value};
use crate::invalid;
use crate::types::ElementType::{F32, I64};

/// `[position, value]` of the first entry of 1-D `flat` where `bad` holds, or `[-1, 0]`.
pub fn first_bad(b: &mut Builder, flat: &Value, bad: &Value) -> Result<Value> {
    let len = flat.dims()[0];
    if len == 0 {
        return b.vector_i64(&[-1, 0]);
    }
    let iota = b.iota(I64, &[len], 0)?;
    let none = b.splat(Scalar::I(len), I64, &[len])?;
    let candidates = b.select(bad, &iota, &none)?;
    let pos = b.reduce(&candidates, Scalar::I(i64::MAX), Reducer::Min, &[0])?;
    let len_s = b.scalar(Scalar::I(len), I64)?;
    let found = b.compare("LT", &pos, &len_s)?;
    let last = b.scalar(Scalar::I(len - 1), I64)?;
    let safe = b.binary("stablehlo.minimum", &pos, &last)?;
    let at = b.reshape(&safe, &[1])?;
    let value = b.gather_points(flat, &at)?;
    let minus_one = b.scalar(Scalar::I(-1), I64)?;
    let pos = b.select(&found, &pos, &minus_one)?;
    let pos = b.reshape(&pos, &[1])?;
    let value = b.reshape(&value, &[1])?;
    b.concatenate(&[pos, value], 0)
}

/// The check result for indices that must lie in `[0, n)`.
pub fn range_check(b: &mut Builder, indices: &Value, n: i64) -> Result<Value> {
    let len = indices.ty.count();
    let flat = b.reshape(indices, &[len])?;
    let zero_v = b.splat(Scalar::I(0), I64, &[len])?;
    let n_v = b.splat(Scalar::I(n), I64, &[len])?;
    let low = b.compare("LT", &flat, &zero_v)?;
    let high = b.compare("GE", &flat, &n_v)?;
    let bad = b.binary("stablehlo.or", &low, &high)?;
    first_bad(b, &flat, &bad)
}

fn index_vector(op: &str, indices: &Input) -> Result<i64> {
    expect_elem(op, "indices", indices, &[I64])?;
    if indices.rank() != 1 {
        return invalid!("{op}: indices must be 1-D, found shape {:?}", indices.shape);
    }
    Ok(indices.shape[0])
}

pub fn index_select(x: &Input, axis: usize, indices: &Input) -> Result<Program> {
    expect_axis("index_select", axis, x)?;
    index_vector("index_select", indices)?;
    let (mut b, v) = start(&[x, indices])?;
    let out = b.take(&v[0], &v[1], axis)?;
    let check = range_check(&mut b, &v[1], x.shape[axis])?;
    Ok(b.finish(&[out, check]))
}

pub fn index_add(base: &Input, axis: usize, indices: &Input, src: &Input) -> Result<Program> {
    expect_axis("index_add", axis, base)?;
    expect_elem("index_add", "base", base, &[F32])?;
    expect_elem("index_add", "src", src, &[F32])?;
    let count = index_vector("index_add", indices)?;
    let mut want = base.shape.clone();
    want[axis] = count;
    if src.shape != want {
        return invalid!(
            "index_add: src {:?} for base {:?} and {count} indices",
            src.shape,
            base.shape
        );
    }
    let (mut b, v) = start(&[base, indices, src])?;
    let out = b.index_add(&v[0], &v[1], &v[2], axis)?;
    let check = range_check(&mut b, &v[1], base.shape[axis])?;
    Ok(b.finish(&[out, check]))
}

/// Full coordinates `[*index_shape, rank]`: `indices` on `axis`, the position elsewhere.
fn coordinates(b: &mut Builder, indices: &Value, rank: usize, axis: usize) -> Result<Value> {
    let dims = indices.dims().to_vec();
    let mut one_more = dims.clone();
    one_more.push(1);
    let mut parts = Vec::with_capacity(rank);
    for d in 0..rank {
        let part = if d == axis {
            indices.clone()
        } else {
            b.iota(I64, &dims, d)?
        };
        parts.push(b.reshape(&part, &one_more)?);
    }
    b.concatenate(&parts, rank)
}

fn check_along(op: &str, x: &Input, axis: usize, indices: &Input) -> Result<()> {
    expect_axis(op, axis, x)?;
    expect_elem(op, "indices", indices, &[I64])?;
    let ok = indices.rank() == x.rank()
        && (0..x.rank()).all(|d| d == axis || indices.shape[d] == x.shape[d]);
    if !ok {
        return invalid!(
            "{op}: indices {:?} do not match {:?} off axis {axis}",
            indices.shape,
            x.shape
        );
    }
    Ok(())
}

pub fn gather(x: &Input, axis: usize, indices: &Input) -> Result<Program> {
    check_along("gather", x, axis, indices)?;
    let (mut b, v) = start(&[x, indices])?;
    let out = if indices.count() == 0 {
        b.splat(zero(x.elem()), x.elem(), &indices.shape)?
    } else {
        let coords = coordinates(&mut b, &v[1], x.rank(), axis)?;
        b.gather_points(&v[0], &coords)?
    };
    let check = range_check(&mut b, &v[1], x.shape[axis])?;
    Ok(b.finish(&[out, check]))
}

pub fn scatter_add(base: &Input, axis: usize, indices: &Input, src: &Input) -> Result<Program> {
    check_along("scatter_add", base, axis, indices)?;
    expect_elem("scatter_add", "base", base, &[F32])?;
    expect_elem("scatter_add", "src", src, &[F32])?;
    if src.shape != indices.shape {
        return invalid!(
            "scatter_add: src {:?} and indices {:?} differ",
            src.shape,
            indices.shape
        );
    }
    let (mut b, v) = start(&[base, indices, src])?;
    let out = if indices.count() == 0 {
        v[0].clone()
    } else {
        let coords = coordinates(&mut b, &v[1], base.rank(), axis)?;
        b.scatter_add_points(&v[0], &coords, &v[2])?
    };
    let check = range_check(&mut b, &v[1], base.shape[axis])?;
    Ok(b.finish(&[out, check]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, i64s};
    use super::*;

    #[test]
    fn every_indexing_program_returns_a_check() {
        let p = index_select(&f32s(&[4, 5]), 1, &i64s(&[3])).unwrap();
        assert_eq!(p.results[0].dims, [4, 3]);
        assert_eq!(p.results[1].dims, [2]);
        let p = gather(&f32s(&[3, 4]), 1, &i64s(&[3, 2])).unwrap();
        assert_eq!(p.results[0].dims, [3, 2]);
        let p = scatter_add(&f32s(&[3, 4]), 0, &i64s(&[2, 4]), &f32s(&[2, 4])).unwrap();
        assert_eq!(p.results[0].dims, [3, 4]);
        let p = index_add(&f32s(&[3, 4]), 0, &i64s(&[5]), &f32s(&[5, 4])).unwrap();
        assert_eq!(p.results[0].dims, [3, 4]);
    }

    #[test]
    fn mismatched_indices_are_refused() {
        assert!(index_select(&f32s(&[4]), 0, &i64s(&[1, 1])).is_err());
        assert!(gather(&f32s(&[3, 4]), 1, &i64s(&[2, 2])).is_err());
        assert!(index_add(&f32s(&[3, 4]), 0, &i64s(&[2]), &f32s(&[3, 4])).is_err());
        assert!(index_select(&f32s(&[4]), 0, &f32s(&[1])).is_err());
    }
}
