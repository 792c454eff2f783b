//! Batched matmul with broadcast batch axes.

use super::{expect_elem, start, Input};
use crate::error::Result;
use crate::hlo::{broadcast_shapes, Builder, Program, Value};
use crate::invalid;
use crate::types::ElementType::F32;

/// `a @ b` over the last two axes of values; `transpose_*` reads an operand
/// as its transpose. Batch axes broadcast as in numpy.
pub fn matmul_values(
    b: &mut Builder,
    x: &Value,
    y: &Value,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Value> {
    if x.rank() < 2 || y.rank() < 2 {
        return invalid!("matmul: operands {} and {} need two axes", x.ty, y.ty);
    }
    let (ra, rb) = (x.rank(), y.rank());
    let (m, k) = if transpose_a {
        (x.dims()[ra - 1], x.dims()[ra - 2])
    } else {
        (x.dims()[ra - 2], x.dims()[ra - 1])
    };
    let (k2, n) = if transpose_b {
        (y.dims()[rb - 1], y.dims()[rb - 2])
    } else {
        (y.dims()[rb - 2], y.dims()[rb - 1])
    };
    if k != k2 {
        return invalid!(
            "matmul: inner dims disagree: {} @ {} ({k} vs {k2})",
            x.ty,
            y.ty
        );
    }
    let Some(batch) = broadcast_shapes(&x.dims()[..ra - 2], &y.dims()[..rb - 2]) else {
        return invalid!(
            "matmul: batch axes of {} and {} do not broadcast",
            x.ty,
            y.ty
        );
    };
    let nb = batch.len() as i64;
    if rb == 2 && !transpose_a && ra > 2 {
        // A shared matrix: fold a's batch axes into its rows, no broadcast copy.
        let rows: i64 = x.dims()[..ra - 1].iter().product();
        let flat = b.reshape(x, &[rows, k])?;
        let cy = if transpose_b { 1 } else { 0 };
        let out = b.dot_general(&flat, y, (&[], &[]), (&[1], &[cy]))?;
        let mut dims = batch.clone();
        dims.extend([m, n]);
        return b.reshape(&out, &dims);
    }
    let mut a_dims = batch.clone();
    a_dims.extend_from_slice(&x.dims()[ra - 2..]);
    let mut b_dims = batch.clone();
    b_dims.extend_from_slice(&y.dims()[rb - 2..]);
    let xa = b.broadcast_to(x, &a_dims)?;
    let yb = b.broadcast_to(y, &b_dims)?;
    let batch_axes: Vec<i64> = (0..nb).collect();
    let ca = if transpose_a { nb } else { nb + 1 };
    let cb = if transpose_b { nb + 1 } else { nb };
    b.dot_general(&xa, &yb, (&batch_axes, &batch_axes), (&[ca], &[cb]))
}

pub fn matmul(a: &Input, b_in: &Input, transpose_a: bool, transpose_b: bool) -> Result<Program> {
    expect_elem("matmul", "a", a, &[F32])?;
    expect_elem("matmul", "b", b_in, &[F32])?;
    let (mut b, v) = start(&[a, b_in])?;
    let out = matmul_values(&mut b, &v[0], &v[1], transpose_a, transpose_b)?;
    Ok(b.finish(&[out]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::f32s;
    use super::*;

    #[test]
    fn result_shapes() {
        let p = matmul(&f32s(&[2, 3, 4]), &f32s(&[4, 5]), false, false).unwrap();
        assert_eq!(p.results[0].dims, [2, 3, 5]);
        let p = matmul(&f32s(&[3, 4]), &f32s(&[6, 2, 4]), false, true).unwrap();
        assert_eq!(p.results[0].dims, [6, 3, 2]);
        let p = matmul(&f32s(&[2, 1, 4, 3]), &f32s(&[5, 4, 2]), true, false).unwrap();
        assert_eq!(p.results[0].dims, [2, 5, 3, 2]);
        assert!(matmul(&f32s(&[3, 4]), &f32s(&[3, 4]), false, false).is_err());
        assert!(matmul(&f32s(&[2, 3, 4]), &f32s(&[3, 4, 5]), false, false).is_err());
    }
}
