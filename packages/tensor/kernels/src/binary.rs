//! Elementwise functions of two or three operands with broadcasting.

use crate::lanes::{max_nan, min_nan};
use crate::pool::{for_chunks, CHUNK};
use crate::strided::{Segment, Walk};
use crate::{ensure, multiversion, KernelError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
}

impl BinaryOp {
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "add" => Self::Add,
            "sub" => Self::Sub,
            "mul" => Self::Mul,
            "div" => Self::Div,
            "pow" => Self::Pow,
            "maximum" => Self::Maximum,
            "minimum" => Self::Minimum,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl CompareOp {
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "eq" => Self::Eq,
            "ne" => Self::Ne,
            "lt" => Self::Lt,
            "le" => Self::Le,
            "gt" => Self::Gt,
            "ge" => Self::Ge,
            "logical_and" => Self::And,
            "logical_or" => Self::Or,
            _ => return None,
        })
    }
}

/// Element types the arithmetic kernels accept.
pub trait Arith: Copy + PartialOrd + Send + Sync + 'static {
    /// Apply `op`, or `None` when `op` is not defined for this type.
    fn apply(op: BinaryOp, a: Self, b: Self) -> Self;
    fn supports(op: BinaryOp) -> bool;
    fn truthy(self) -> bool;
}

impl Arith for f32 {
    #[inline(always)]
    fn apply(op: BinaryOp, a: f32, b: f32) -> f32 {
        match op {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Pow => pow(a, b),
            // NaN propagates, as in numpy.
            BinaryOp::Maximum => max_nan(a, b),
            BinaryOp::Minimum => min_nan(a, b),
        }
    }
    fn supports(_: BinaryOp) -> bool {
        true
    }
    #[inline(always)]
    fn truthy(self) -> bool {
        self != 0.0
    }
}

#[inline(always)]
fn pow(a: f32, b: f32) -> f32 {
    if b == 2.0 {
        a * a
    } else if b == 1.0 {
        a
    } else if b == 0.5 {
        a.sqrt()
    } else {
        a.powf(b)
    }
}

impl Arith for i64 {
    #[inline(always)]
    fn apply(op: BinaryOp, a: i64, b: i64) -> i64 {
        match op {
            BinaryOp::Add => a.wrapping_add(b),
            BinaryOp::Sub => a.wrapping_sub(b),
            BinaryOp::Mul => a.wrapping_mul(b),
            BinaryOp::Maximum => a.max(b),
            BinaryOp::Minimum => a.min(b),
            BinaryOp::Div | BinaryOp::Pow => 0,
        }
    }
    fn supports(op: BinaryOp) -> bool {
        !matches!(op, BinaryOp::Div | BinaryOp::Pow)
    }
    #[inline(always)]
    fn truthy(self) -> bool {
        self != 0
    }
}

impl Arith for bool {
    #[inline(always)]
    fn apply(_: BinaryOp, a: bool, _: bool) -> bool {
        a
    }
    fn supports(_: BinaryOp) -> bool {
        false
    }
    #[inline(always)]
    fn truthy(self) -> bool {
        self
    }
}

multiversion! {
    fn run_vv<T: Arith>(op: BinaryOp, a: &[T], b: &[T], out: &mut [T]) {
        macro_rules! lane { ($o:expr) => { for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) { *o = T::apply($o, x, y); } } }
        match op {
            BinaryOp::Add => lane!(BinaryOp::Add),
            BinaryOp::Sub => lane!(BinaryOp::Sub),
            BinaryOp::Mul => lane!(BinaryOp::Mul),
            BinaryOp::Div => lane!(BinaryOp::Div),
            BinaryOp::Pow => lane!(BinaryOp::Pow),
            BinaryOp::Maximum => lane!(BinaryOp::Maximum),
            BinaryOp::Minimum => lane!(BinaryOp::Minimum),
        }
    }
}

multiversion! {
    fn run_vs<T: Arith>(op: BinaryOp, a: &[T], b: T, swap: bool, out: &mut [T]) {
        macro_rules! lane { ($o:expr) => {
            if swap { for (o, &x) in out.iter_mut().zip(a) { *o = T::apply($o, b, x); } }
            else { for (o, &x) in out.iter_mut().zip(a) { *o = T::apply($o, x, b); } }
        } }
        match op {
            BinaryOp::Add => lane!(BinaryOp::Add),
            BinaryOp::Sub => lane!(BinaryOp::Sub),
            BinaryOp::Mul => lane!(BinaryOp::Mul),
            BinaryOp::Div => lane!(BinaryOp::Div),
            BinaryOp::Pow => lane!(BinaryOp::Pow),
            BinaryOp::Maximum => lane!(BinaryOp::Maximum),
            BinaryOp::Minimum => lane!(BinaryOp::Minimum),
        }
    }
}

fn segment_binary<T: Arith>(
    op: BinaryOp,
    a: &[T],
    b: &[T],
    inner: [usize; 2],
    seg: Segment<2>,
    out: &mut [T],
) {
    let [oa, ob] = seg.offsets;
    let n = seg.len;
    match inner {
        [1, 1] => run_vv(op, &a[oa..oa + n], &b[ob..ob + n], out),
        [1, 0] => run_vs(op, &a[oa..oa + n], b[ob], false, out),
        [0, 1] => run_vs(op, &b[ob..ob + n], a[oa], true, out),
        [sa, sb] => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = T::apply(op, a[oa + i * sa], b[ob + i * sb]);
            }
        }
    }
}

/// `out = op(a, b)` over the broadcast walk (operand 0 = a, operand 1 = b).
pub fn binary<T: Arith>(
    op: BinaryOp,
    a: &[T],
    b: &[T],
    walk: &Walk<2>,
    out: &mut [T],
) -> Result<()> {
    ensure!(
        T::supports(op),
        "binary {op:?} is not defined for this dtype"
    );
    ensure!(
        walk.len() == out.len(),
        "binary {op:?}: walk covers {} elements, output has {}",
        walk.len(),
        out.len()
    );
    let inner = walk.inner_strides();
    for_chunks(out, CHUNK, |ci, chunk| {
        let start = ci * CHUNK;
        walk.segments(start, start + chunk.len(), |seg| {
            let o = &mut chunk[seg.out - start..seg.out - start + seg.len];
            segment_binary(op, a, b, inner, seg, o);
        });
    });
    Ok(())
}

#[inline(always)]
fn compare<T: Arith>(op: CompareOp, a: T, b: T) -> bool {
    match op {
        CompareOp::Eq => a == b,
        CompareOp::Ne => a != b,
        CompareOp::Lt => a < b,
        CompareOp::Le => a <= b,
        CompareOp::Gt => a > b,
        CompareOp::Ge => a >= b,
        CompareOp::And => a.truthy() && b.truthy(),
        CompareOp::Or => a.truthy() || b.truthy(),
    }
}

/// `out = a <op> b` as bool, over the broadcast walk.
pub fn compare_op<T: Arith>(
    op: CompareOp,
    a: &[T],
    b: &[T],
    walk: &Walk<2>,
    out: &mut [bool],
) -> Result<()> {
    ensure!(
        walk.len() == out.len(),
        "compare {op:?}: walk covers {} elements, output has {}",
        walk.len(),
        out.len()
    );
    let [sa, sb] = walk.inner_strides();
    for_chunks(out, CHUNK, |ci, chunk| {
        let start = ci * CHUNK;
        walk.segments(start, start + chunk.len(), |seg| {
            let [oa, ob] = seg.offsets;
            let o = &mut chunk[seg.out - start..seg.out - start + seg.len];
            for (i, v) in o.iter_mut().enumerate() {
                *v = compare(op, a[oa + i * sa], b[ob + i * sb]);
            }
        });
    });
    Ok(())
}

/// `out = cond ? a : b` over the broadcast walk (operands: cond, a, b).
pub fn select<T: Copy + Send + Sync>(
    cond: &[bool],
    a: &[T],
    b: &[T],
    walk: &Walk<3>,
    out: &mut [T],
) -> Result<()> {
    if walk.len() != out.len() {
        return Err(KernelError(format!(
            "where: walk covers {} elements, output has {}",
            walk.len(),
            out.len()
        )));
    }
    let [sc, sa, sb] = walk.inner_strides();
    for_chunks(out, CHUNK, |ci, chunk| {
        let start = ci * CHUNK;
        walk.segments(start, start + chunk.len(), |seg| {
            let [oc, oa, ob] = seg.offsets;
            let o = &mut chunk[seg.out - start..seg.out - start + seg.len];
            for (i, v) in o.iter_mut().enumerate() {
                *v = if cond[oc + i * sc] {
                    a[oa + i * sa]
                } else {
                    b[ob + i * sb]
                };
            }
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_row_and_column() {
        // [2,3] + [3] and [2,3] * [2,1]
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let row = [10.0f32, 20.0, 30.0];
        let walk = Walk::new(&[2, 3], [&[3, 1], &[0, 1]], [0, 0], [6, 3]).unwrap();
        let mut out = [0.0f32; 6];
        binary(BinaryOp::Add, &a, &row, &walk, &mut out).unwrap();
        assert_eq!(out, [11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
        let col = [2.0f32, 3.0];
        let walk = Walk::new(&[2, 3], [&[3, 1], &[1, 0]], [0, 0], [6, 2]).unwrap();
        binary(BinaryOp::Mul, &a, &col, &walk, &mut out).unwrap();
        assert_eq!(out, [2.0, 4.0, 6.0, 12.0, 15.0, 18.0]);
    }

    #[test]
    fn out_of_bounds_strides_are_refused() {
        assert!(Walk::new(&[2, 3], [&[3, 1], &[3, 1]], [0, 0], [6, 5]).is_err());
    }

    #[test]
    fn maximum_propagates_nan() {
        let walk = Walk::new(&[2], [&[1], &[1]], [0, 0], [2, 2]).unwrap();
        let mut out = [0.0f32; 2];
        binary(
            BinaryOp::Maximum,
            &[f32::NAN, 1.0],
            &[0.0, f32::NAN],
            &walk,
            &mut out,
        )
        .unwrap();
        assert!(out[0].is_nan() && out[1].is_nan());
    }
}
