//! Reductions, argmax and dot_general.

use super::{array, list, Builder, Reducer, Scalar, Value};
use crate::error::Result;
use crate::invalid;
use crate::types::{ElementType, TensorType};

impl Builder {
    // ---- reductions ----------------------------------------------------------------

    /// Reduce `x` over `axes` (removed) with `reducer`, starting from `init`.
    pub fn reduce(
        &mut self,
        x: &Value,
        init: Scalar,
        reducer: Reducer,
        axes: &[i64],
    ) -> Result<Value> {
        if axes.iter().any(|&a| a < 0 || a as usize >= x.rank())
            || axes.windows(2).any(|w| w[0] >= w[1])
        {
            return invalid!("reduce: axes {axes:?} of {}", x.ty);
        }
        let elem = x.elem();
        let init = self.scalar(init, elem)?;
        let scalar = TensorType::scalar(elem);
        let region = self.region(&[scalar.clone(), scalar], |b, args| {
            Ok(vec![b.binary(reducer.op(), &args[0], &args[1])?])
        })?;
        let dims: Vec<i64> = (0..x.rank())
            .filter(|i| !axes.contains(&(*i as i64)))
            .map(|i| x.dims()[i])
            .collect();
        let attrs = format!("dimensions = {}", array(axes));
        Ok(self
            .op(
                "stablehlo.reduce",
                &[x, &init],
                Some(region),
                &attrs,
                &[TensorType::new(&dims, elem)],
            )
            .remove(0))
    }

    /// Index of the first largest element of `x` along `axis` (removed), as i64.
    /// NaN counts as larger than everything, as in numpy.
    pub fn argmax(&mut self, x: &Value, axis: usize) -> Result<Value> {
        if axis >= x.rank() {
            return invalid!("argmax: axis {axis} of {}", x.ty);
        }
        let elem = x.elem();
        let index = self.iota(ElementType::I64, x.dims(), axis)?;
        let lowest = if elem.is_float() {
            Scalar::F(f64::NEG_INFINITY)
        } else {
            Scalar::I(i64::MIN)
        };
        let init_v = self.scalar(lowest, elem)?;
        let init_i = self.scalar(Scalar::I(0), ElementType::I64)?;
        let sv = TensorType::scalar(elem);
        let si = TensorType::scalar(ElementType::I64);
        let region = self.region(&[sv.clone(), si.clone(), sv, si], |b, args| {
            let (va, ia, vb, ib) = (&args[0], &args[1], &args[2], &args[3]);
            // a wins when it is greater, or NaN, or equal with a smaller index.
            let greater = b.compare("GT", va, vb)?;
            let equal = b.compare("EQ", va, vb)?;
            let earlier = b.compare("LT", ia, ib)?;
            let tie = b.binary("stablehlo.and", &equal, &earlier)?;
            let mut a_wins = b.binary("stablehlo.or", &greater, &tie)?;
            if elem.is_float() {
                let a_nan = b.compare("NE", va, va)?;
                let b_nan = b.compare("NE", vb, vb)?;
                let b_not_nan = b.unary("stablehlo.not", &b_nan)?;
                let nan_first = b.binary("stablehlo.and", &a_nan, &b_not_nan)?;
                let both_nan = b.binary("stablehlo.and", &a_nan, &b_nan)?;
                let nan_tie = b.binary("stablehlo.and", &both_nan, &earlier)?;
                let plain = b.binary("stablehlo.and", &a_wins, &b_not_nan)?;
                let nan_wins = b.binary("stablehlo.or", &nan_first, &nan_tie)?;
                a_wins = b.binary("stablehlo.or", &plain, &nan_wins)?;
            }
            let v = b.select(&a_wins, va, vb)?;
            let i = b.select(&a_wins, ia, ib)?;
            Ok(vec![v, i])
        })?;
        let dims: Vec<i64> = x
            .dims()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != axis)
            .map(|(_, d)| *d)
            .collect();
        let attrs = format!("dimensions = {}", array(&[axis as i64]));
        let out = self.op(
            "stablehlo.reduce",
            &[x, &index, &init_v, &init_i],
            Some(region),
            &attrs,
            &[
                TensorType::new(&dims, elem),
                TensorType::new(&dims, ElementType::I64),
            ],
        );
        Ok(out[1].clone())
    }

    // ---- linear algebra ----------------------------------------------------------------

    /// `stablehlo.dot_general` with the given batch and contracting dims, at
    /// the highest precision (float32 passes on TPUs too).
    pub fn dot_general(
        &mut self,
        a: &Value,
        b: &Value,
        batch: (&[i64], &[i64]),
        contract: (&[i64], &[i64]),
    ) -> Result<Value> {
        let (lb, rb) = batch;
        let (lc, rc) = contract;
        let valid =
            |dims: &[i64], v: &Value| dims.iter().all(|&d| d >= 0 && (d as usize) < v.rank());
        if a.elem() != b.elem()
            || lb.len() != rb.len()
            || lc.len() != rc.len()
            || !valid(lb, a)
            || !valid(lc, a)
            || !valid(rb, b)
            || !valid(rc, b)
            || lb
                .iter()
                .zip(rb)
                .any(|(&x, &y)| a.dims()[x as usize] != b.dims()[y as usize])
            || lc
                .iter()
                .zip(rc)
                .any(|(&x, &y)| a.dims()[x as usize] != b.dims()[y as usize])
        {
            return invalid!(
                "dot_general: {} and {} with batch {lb:?}/{rb:?}, contracting {lc:?}/{rc:?}",
                a.ty,
                b.ty
            );
        }
        let free = |v: &Value, used: &[i64]| -> Vec<i64> {
            (0..v.rank() as i64)
                .filter(|d| !used.contains(d))
                .map(|d| v.dims()[d as usize])
                .collect()
        };
        let mut dims: Vec<i64> = lb.iter().map(|&d| a.dims()[d as usize]).collect();
        dims.extend(free(a, &[lb, lc].concat()));
        dims.extend(free(b, &[rb, rc].concat()));
        let mut fields = Vec::new();
        for (name, v) in [
            ("lhs_batching_dimensions", lb),
            ("rhs_batching_dimensions", rb),
            ("lhs_contracting_dimensions", lc),
            ("rhs_contracting_dimensions", rc),
        ] {
            if !v.is_empty() {
                fields.push(format!("{name} = {}", list(v)));
            }
        }
        let attrs = format!(
            "dot_dimension_numbers = #stablehlo.dot<{}>, precision_config = \
             [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]",
            fields.join(", ")
        );
        Ok(self.one(
            "stablehlo.dot_general",
            &[a, b],
            &attrs,
            TensorType::new(&dims, a.elem()),
        ))
    }
}
