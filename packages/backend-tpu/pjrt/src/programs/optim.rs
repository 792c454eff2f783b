//! The fused Adam / AdamW update of one parameter, all-or-nothing.
//!
//! Scalars are rounded to float32 on the host (see [`AdamScalars`]) and
//! passed as a small input, so a schedule changing the learning rate never
//! recompiles. The program returns the candidate parameter and moments and
//! whether all of them are finite; the caller writes them only when every
//! parameter's candidates are.

use super::{expect_elem, start, Input};
use crate::error::Result;
use crate::hlo::{Builder, Program, Reducer, Scalar, Value};
use crate::invalid;
use crate::types::ElementType::{Bool, F32};

/// The float32 scalars of one step of one parameter, in the order the program reads them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamScalars {
    pub grad_scale: f32,
    pub weight_decay: f32,
    pub decay_factor: f32,
    pub one_minus_beta1: f32,
    pub beta2: f32,
    pub one_minus_beta2: f32,
    pub sqrt_bias2: f32,
    pub eps: f32,
    pub neg_step: f32,
}

impl AdamScalars {
    pub const COUNT: i64 = 9;

    /// From float64 hyperparameters, each rounded once to float32.
    pub fn new(
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
        step: i64,
        grad_scale: f64,
    ) -> Self {
        let t = step as f64;
        AdamScalars {
            grad_scale: grad_scale as f32,
            weight_decay: weight_decay as f32,
            decay_factor: (1.0 - lr * weight_decay) as f32,
            one_minus_beta1: (1.0 - beta1) as f32,
            beta2: beta2 as f32,
            one_minus_beta2: (1.0 - beta2) as f32,
            sqrt_bias2: (1.0 - beta2.powf(t)).powf(0.5) as f32,
            eps: eps as f32,
            neg_step: (-(lr / (1.0 - beta1.powf(t)))) as f32,
        }
    }

    pub fn to_vec(self) -> Vec<f32> {
        vec![
            self.grad_scale,
            self.weight_decay,
            self.decay_factor,
            self.one_minus_beta1,
            self.beta2,
            self.one_minus_beta2,
            self.sqrt_bias2,
            self.eps,
            self.neg_step,
        ]
    }
}

/// Lengths of the pages of a moment of `size` elements.
pub fn page_lengths(size: i64, page_size: i64) -> Vec<i64> {
    if size == 0 {
        return vec![0];
    }
    let mut out = Vec::new();
    let mut start = 0;
    while start < size {
        out.push(page_size.min(size - start));
        start += page_size;
    }
    out
}

fn scalar_at(b: &mut Builder, scalars: &Value, i: i64, n: i64) -> Result<Value> {
    let one = b.slice(scalars, &[i], &[i + 1], &[1])?;
    let one = b.reshape(&one, &[])?;
    b.broadcast_in_dim(&one, &[], &[n])
}

fn all_finite(b: &mut Builder, xs: &[&Value]) -> Result<Value> {
    let mut ok = b.scalar(Scalar::B(true), Bool)?;
    for x in xs {
        let finite = b.unary_to("stablehlo.is_finite", x, Bool)?;
        let all = b.reduce(&finite, Scalar::B(true), Reducer::And, &[0])?;
        ok = b.binary("stablehlo.and", &ok, &all)?;
    }
    Ok(ok)
}

/// Inputs: the parameter, its gradient, m and v as flat `[n]` vectors, the
/// scalars `[9]`. Results: the new parameter `[n]`, m, v, and a bool scalar
/// that is true when every candidate value is finite. The same program runs
/// whatever the page layout, so paged and contiguous moments agree bitwise.
pub fn adam_update(
    param: &Input,
    grad: &Input,
    m: &Input,
    v: &Input,
    scalars: &Input,
    decay: bool,
    decoupled: bool,
) -> Result<Program> {
    let n = param.count();
    expect_elem("adam_update", "a parameter", param, &[F32])?;
    expect_elem("adam_update", "a gradient", grad, &[F32])?;
    if grad.count() != n
        || m.count() != n
        || v.count() != n
        || scalars.shape != [AdamScalars::COUNT]
    {
        return invalid!(
            "adam_update: a parameter of {n} elements with a gradient of {} and moments of {} and {}",
            grad.count(),
            m.count(),
            v.count()
        );
    }
    let flat = |x: &Input| Input {
        physical: x.physical.clone(),
        shape: vec![x.count()],
    };
    let inputs = [flat(param), flat(grad), flat(m), flat(v), scalars.clone()];
    let refs: Vec<&Input> = inputs.iter().collect();
    let (mut b, x) = start(&refs)?;
    let s = &x[4];
    let k = |b: &mut Builder, i: i64| scalar_at(b, s, i, n);
    let (p, g, m0, v0) = (&x[0], &x[1], &x[2], &x[3]);
    let scale = k(&mut b, 0)?;
    let mut g0 = b.mul(g, &scale)?;
    let mut p0 = p.clone();
    if decay && !decoupled {
        let wd = k(&mut b, 1)?;
        let wp = b.mul(&wd, p)?;
        g0 = b.add(&g0, &wp)?;
    }
    if decay && decoupled {
        let f = k(&mut b, 2)?;
        p0 = b.mul(p, &f)?;
    }
    let c1 = k(&mut b, 3)?;
    let diff = b.sub(&g0, m0)?;
    let step_m = b.mul(&c1, &diff)?;
    let m1 = b.add(m0, &step_m)?;
    let b2 = k(&mut b, 4)?;
    let c2 = k(&mut b, 5)?;
    let decayed = b.mul(v0, &b2)?;
    let fresh = b.mul(&c2, &g0)?;
    let fresh = b.mul(&fresh, &g0)?;
    let v1 = b.add(&decayed, &fresh)?;
    let root = b.unary("stablehlo.sqrt", &v1)?;
    let bias = k(&mut b, 6)?;
    let eps = k(&mut b, 7)?;
    let denom = b.div(&root, &bias)?;
    let denom = b.add(&denom, &eps)?;
    let neg = k(&mut b, 8)?;
    let num = b.mul(&neg, &m1)?;
    let delta = b.div(&num, &denom)?;
    let p1 = b.add(&p0, &delta)?;
    let ok = all_finite(&mut b, &[&p1, &m1, &v1])?;
    Ok(b.finish(&[p1, m1, v1, ok]))
}

/// The most operands or results a page-packing program has.
pub const PAGES_PER_PROGRAM: usize = 8;

/// Concatenate 1-D pages (at most [`PAGES_PER_PROGRAM`]) into one vector.
pub fn pack(pages: &[Input]) -> Result<Program> {
    if pages.is_empty() || pages.len() > PAGES_PER_PROGRAM {
        return invalid!(
            "pack: {} pages (1 to {PAGES_PER_PROGRAM} per program)",
            pages.len()
        );
    }
    let flat: Vec<Input> = pages
        .iter()
        .map(|x| Input {
            physical: x.physical.clone(),
            shape: vec![x.count()],
        })
        .collect();
    super::layout::concat(&flat, 0)
}

/// Split a 1-D vector into consecutive pieces of `lengths` (at most [`PAGES_PER_PROGRAM`]).
pub fn unpack(flat: &Input, lengths: &[i64]) -> Result<Program> {
    if lengths.is_empty()
        || lengths.len() > PAGES_PER_PROGRAM
        || lengths.iter().sum::<i64>() != flat.count()
    {
        return invalid!("unpack: {:?} from {} elements", lengths, flat.count());
    }
    let whole = Input {
        physical: flat.physical.clone(),
        shape: vec![flat.count()],
    };
    let (mut b, x) = start(&[&whole])?;
    let mut results = Vec::with_capacity(lengths.len());
    let mut at = 0;
    for &len in lengths {
        results.push(b.narrow(&x[0], 0, at, len)?);
        at += len;
    }
    Ok(b.finish(&results))
}

/// Consecutive pieces of `lengths` of `flat` starting at `offset`, an int64
/// scalar input, so every run of pages of one layout shares a program.
pub fn pages_at(flat: &Input, offset: &Input, lengths: &[i64]) -> Result<Program> {
    expect_elem(
        "pages_at",
        "the offset",
        offset,
        &[crate::types::ElementType::I64],
    )?;
    let total: i64 = lengths.iter().sum();
    if offset.count() != 1
        || lengths.is_empty()
        || lengths.len() > PAGES_PER_PROGRAM
        || total > flat.count()
    {
        return invalid!(
            "pages_at: {lengths:?} of {} elements at an offset shaped {:?}",
            flat.count(),
            offset.shape
        );
    }
    let whole = Input {
        physical: flat.physical.clone(),
        shape: vec![flat.count()],
    };
    let at = Input {
        physical: offset.physical.clone(),
        shape: vec![],
    };
    let (mut b, x) = start(&[&whole, &at])?;
    let run = b.dynamic_slice(&x[0], &[x[1].clone()], &[total])?;
    let mut results = Vec::with_capacity(lengths.len());
    let mut from = 0;
    for &len in lengths {
        results.push(b.narrow(&run, 0, from, len)?);
        from += len;
    }
    Ok(b.finish(&results))
}

#[cfg(test)]
mod tests {
    use super::super::testing::f32s;
    use super::*;

    #[test]
    fn pages_split_the_moment() {
        assert_eq!(page_lengths(10, 4), [4, 4, 2]);
        assert_eq!(page_lengths(0, 4), [0]);
        assert_eq!(page_lengths(3, 4096), [3]);
    }

    #[test]
    fn scalars_are_rounded_once() {
        let s = AdamScalars::new(1e-2, 0.9, 0.999, 1e-8, 0.5, 1, 1.0);
        assert_eq!(s.decay_factor, (1.0 - 1e-2 * 0.5) as f32);
        assert_eq!(s.neg_step, (-(1e-2 / (1.0 - 0.9))) as f32);
        assert_eq!(s.to_vec().len() as i64, AdamScalars::COUNT);
    }

    #[test]
    fn the_update_returns_candidates_and_a_flag() {
        let p = adam_update(
            &f32s(&[2, 5]),
            &f32s(&[2, 5]),
            &f32s(&[10]),
            &f32s(&[10]),
            &f32s(&[9]),
            true,
            true,
        )
        .unwrap();
        assert_eq!(p.results.len(), 4);
        assert_eq!(p.results[3].elem, Bool);
        assert!(adam_update(
            &f32s(&[2, 5]),
            &f32s(&[2, 5]),
            &f32s(&[10]),
            &f32s(&[9]),
            &f32s(&[9]),
            true,
            true
        )
        .is_err());
    }

    #[test]
    fn pages_pack_and_unpack() {
        let p = pack(&[f32s(&[4]), f32s(&[4]), f32s(&[2])]).unwrap();
        assert_eq!(p.results[0].dims, [10]);
        let p = unpack(&f32s(&[10]), &[4, 4, 2]).unwrap();
        assert_eq!(p.results.len(), 3);
        assert!(unpack(&f32s(&[10]), &[4, 4]).is_err());
        let offset = Input::dense(&[1], crate::types::ElementType::I64);
        let p = pages_at(&f32s(&[10]), &offset, &[4, 4]).unwrap();
        assert_eq!(p.results.len(), 2);
        assert!(p.text.contains("stablehlo.dynamic_slice"));
    }
}
