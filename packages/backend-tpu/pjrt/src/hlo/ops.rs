//! Constants, elementwise ops and layout ops.

use super::{array, is_permutation, Builder, Scalar, Value};
use crate::error::Result;
use crate::invalid;
use crate::types::{check_dims, ElementType, TensorType};

impl Builder {
    // ---- constants and iota ------------------------------------------------------

    /// A constant of type `elem` and shape `dims` holding `value` everywhere.
    pub fn splat(&mut self, value: Scalar, elem: ElementType, dims: &[i64]) -> Result<Value> {
        check_dims("constant", dims)?;
        let ty = TensorType::new(dims, elem);
        let attrs = format!("value = dense<{}> : {ty}", value.literal(elem)?);
        Ok(self.one("stablehlo.constant", &[], &attrs, ty))
    }

    pub fn scalar(&mut self, value: Scalar, elem: ElementType) -> Result<Value> {
        self.splat(value, elem, &[])
    }

    pub fn f32(&mut self, value: f64) -> Result<Value> {
        self.scalar(Scalar::F(value), ElementType::F32)
    }

    /// A constant 1-D tensor of `values`.
    pub fn vector_i64(&mut self, values: &[i64]) -> Result<Value> {
        let ty = TensorType::new(&[values.len() as i64], ElementType::I64);
        let body: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let attrs = format!("value = dense<[{}]> : {ty}", body.join(", "));
        Ok(self.one("stablehlo.constant", &[], &attrs, ty))
    }

    /// A constant 1-D float32 tensor of `values` (each rounded to float32).
    pub fn vector_f32(&mut self, values: &[f64]) -> Result<Value> {
        let ty = TensorType::new(&[values.len() as i64], ElementType::F32);
        let body: Vec<String> = values
            .iter()
            .map(|&v| format!("0x{:08X}", (v as f32).to_bits()))
            .collect();
        let attrs = format!("value = dense<[{}]> : {ty}", body.join(", "));
        Ok(self.one("stablehlo.constant", &[], &attrs, ty))
    }

    /// `out[i...] = i[axis]`.
    pub fn iota(&mut self, elem: ElementType, dims: &[i64], axis: usize) -> Result<Value> {
        check_dims("iota", dims)?;
        if axis >= dims.len() {
            return invalid!("iota: axis {axis} of a {}-d shape", dims.len());
        }
        let attrs = format!("iota_dimension = {axis} : i64");
        Ok(self.one("stablehlo.iota", &[], &attrs, TensorType::new(dims, elem)))
    }

    // ---- elementwise ---------------------------------------------------------------

    /// A one-operand op whose result has the operand's type (`stablehlo.exponential`, ...).
    pub fn unary(&mut self, name: &str, x: &Value) -> Result<Value> {
        Ok(self.one(name, &[x], "", x.ty.clone()))
    }

    /// A one-operand elementwise op whose result has element type `elem`.
    pub fn unary_to(&mut self, name: &str, x: &Value, elem: ElementType) -> Result<Value> {
        Ok(self.one(name, &[x], "", x.ty.with_elem(elem)))
    }

    /// A two-operand elementwise op on operands of one type.
    pub fn binary(&mut self, name: &str, a: &Value, b: &Value) -> Result<Value> {
        if a.ty != b.ty {
            return invalid!("{name}: operands {} and {} differ", a.ty, b.ty);
        }
        Ok(self.one(name, &[a, b], "", a.ty.clone()))
    }

    pub fn add(&mut self, a: &Value, b: &Value) -> Result<Value> {
        self.binary("stablehlo.add", a, b)
    }

    pub fn sub(&mut self, a: &Value, b: &Value) -> Result<Value> {
        self.binary("stablehlo.subtract", a, b)
    }

    pub fn mul(&mut self, a: &Value, b: &Value) -> Result<Value> {
        self.binary("stablehlo.multiply", a, b)
    }

    pub fn div(&mut self, a: &Value, b: &Value) -> Result<Value> {
        self.binary("stablehlo.divide", a, b)
    }

    pub fn max(&mut self, a: &Value, b: &Value) -> Result<Value> {
        self.binary("stablehlo.maximum", a, b)
    }

    /// `maximum` or `minimum` (`name`) where a NaN in either operand gives NaN,
    /// whatever min/max instructions the compiler picks (XLA's CPU backend
    /// uses ones that return the second operand).
    pub fn nan_min_max(&mut self, name: &str, a: &Value, b: &Value) -> Result<Value> {
        let plain = self.binary(name, a, b)?;
        if !a.elem().is_float() {
            return Ok(plain);
        }
        let a_nan = self.compare("NE", a, a)?;
        let b_nan = self.compare("NE", b, b)?;
        let any_nan = self.binary("stablehlo.or", &a_nan, &b_nan)?;
        let poisoned = self.add(a, b)?;
        self.select(&any_nan, &poisoned, &plain)
    }

    /// `a <direction> b` (`EQ NE LT LE GT GE`) elementwise, as bool.
    pub fn compare(&mut self, direction: &str, a: &Value, b: &Value) -> Result<Value> {
        if a.ty != b.ty {
            return invalid!("compare: operands {} and {} differ", a.ty, b.ty);
        }
        if !["EQ", "NE", "LT", "LE", "GT", "GE"].contains(&direction) {
            return invalid!("compare: unknown direction {direction}");
        }
        let attrs = format!(
            "comparison_direction = #stablehlo<comparison_direction {direction}>, \
             compare_type = #stablehlo<comparison_type {}>",
            a.elem().compare_type()
        );
        Ok(self.one(
            "stablehlo.compare",
            &[a, b],
            &attrs,
            a.ty.with_elem(ElementType::Bool),
        ))
    }

    /// `pred ? on_true : on_false` elementwise (all one shape).
    pub fn select(&mut self, pred: &Value, on_true: &Value, on_false: &Value) -> Result<Value> {
        if on_true.ty != on_false.ty
            || pred.dims() != on_true.dims()
            || pred.elem() != ElementType::Bool
        {
            return invalid!("select: {} ? {} : {}", pred.ty, on_true.ty, on_false.ty);
        }
        Ok(self.one(
            "stablehlo.select",
            &[pred, on_true, on_false],
            "",
            on_true.ty.clone(),
        ))
    }

    pub fn convert(&mut self, x: &Value, elem: ElementType) -> Result<Value> {
        if x.elem() == elem {
            return Ok(x.clone());
        }
        Ok(self.one("stablehlo.convert", &[x], "", x.ty.with_elem(elem)))
    }

    // ---- layout --------------------------------------------------------------------

    pub fn reshape(&mut self, x: &Value, dims: &[i64]) -> Result<Value> {
        check_dims("reshape", dims)?;
        if x.dims() == dims {
            return Ok(x.clone());
        }
        if dims.iter().product::<i64>() != x.ty.count() {
            return invalid!("reshape: {} has not the element count of {dims:?}", x.ty);
        }
        Ok(self.one(
            "stablehlo.reshape",
            &[x],
            "",
            TensorType::new(dims, x.elem()),
        ))
    }

    /// Operand dim i becomes result dim `map[i]`; sizes agree or the operand's is 1.
    pub fn broadcast_in_dim(&mut self, x: &Value, map: &[i64], dims: &[i64]) -> Result<Value> {
        check_dims("broadcast_in_dim", dims)?;
        let ok = map.len() == x.rank()
            && map.windows(2).all(|w| w[0] < w[1])
            && map.iter().zip(x.dims()).all(|(&m, &d)| {
                m >= 0 && (m as usize) < dims.len() && (d == 1 || d == dims[m as usize])
            });
        if !ok {
            return invalid!("broadcast_in_dim: {} with map {map:?} to {dims:?}", x.ty);
        }
        if x.dims() == dims {
            return Ok(x.clone());
        }
        let attrs = format!("broadcast_dimensions = {}", array(map));
        Ok(self.one(
            "stablehlo.broadcast_in_dim",
            &[x],
            &attrs,
            TensorType::new(dims, x.elem()),
        ))
    }

    /// Numpy broadcasting of `x` to `dims` (trailing dims aligned).
    pub fn broadcast_to(&mut self, x: &Value, dims: &[i64]) -> Result<Value> {
        if x.rank() > dims.len() {
            return invalid!("broadcast: {} to {dims:?}", x.ty);
        }
        let lead = (dims.len() - x.rank()) as i64;
        let map: Vec<i64> = (0..x.rank() as i64).map(|i| i + lead).collect();
        self.broadcast_in_dim(x, &map, dims)
    }

    pub fn transpose(&mut self, x: &Value, perm: &[i64]) -> Result<Value> {
        if !is_permutation(perm, x.rank()) {
            return invalid!(
                "transpose: {perm:?} is not a permutation of {} axes",
                x.rank()
            );
        }
        if perm.iter().enumerate().all(|(i, &p)| i as i64 == p) {
            return Ok(x.clone());
        }
        let dims: Vec<i64> = perm.iter().map(|&p| x.dims()[p as usize]).collect();
        let attrs = format!("permutation = {}", array(perm));
        Ok(self.one(
            "stablehlo.transpose",
            &[x],
            &attrs,
            TensorType::new(&dims, x.elem()),
        ))
    }

    /// `x[start:limit:stride]` on every axis (positive strides).
    pub fn slice(
        &mut self,
        x: &Value,
        start: &[i64],
        limit: &[i64],
        stride: &[i64],
    ) -> Result<Value> {
        let r = x.rank();
        let ok = start.len() == r
            && limit.len() == r
            && stride.len() == r
            && (0..r).all(|i| {
                start[i] >= 0 && start[i] <= limit[i] && limit[i] <= x.dims()[i] && stride[i] > 0
            });
        if !ok {
            return invalid!("slice: {} [{start:?}:{limit:?}:{stride:?}]", x.ty);
        }
        let dims: Vec<i64> = (0..r)
            .map(|i| (limit[i] - start[i] + stride[i] - 1) / stride[i])
            .collect();
        if dims == x.dims() {
            return Ok(x.clone());
        }
        let attrs = format!(
            "start_indices = {}, limit_indices = {}, strides = {}",
            array(start),
            array(limit),
            array(stride)
        );
        Ok(self.one(
            "stablehlo.slice",
            &[x],
            &attrs,
            TensorType::new(&dims, x.elem()),
        ))
    }

    /// `x[starts : starts + sizes]` with the starts given as i64 scalar values
    /// (clamped into range by XLA).
    pub fn dynamic_slice(&mut self, x: &Value, starts: &[Value], sizes: &[i64]) -> Result<Value> {
        let ok = starts.len() == x.rank()
            && sizes.len() == x.rank()
            && starts
                .iter()
                .all(|s| s.rank() == 0 && s.elem() == ElementType::I64)
            && sizes.iter().zip(x.dims()).all(|(&n, &d)| n >= 0 && n <= d);
        if !ok {
            return invalid!("dynamic_slice: {} of sizes {sizes:?}", x.ty);
        }
        let mut operands = vec![x];
        operands.extend(starts.iter());
        let attrs = format!("slice_sizes = {}", array(sizes));
        Ok(self.one(
            "stablehlo.dynamic_slice",
            &operands,
            &attrs,
            TensorType::new(sizes, x.elem()),
        ))
    }

    /// `x[..., start:start+size, ...]` along `axis`.
    pub fn narrow(&mut self, x: &Value, axis: usize, start: i64, size: i64) -> Result<Value> {
        let mut lo = vec![0; x.rank()];
        let mut hi = x.dims().to_vec();
        let ones = vec![1; x.rank()];
        if axis >= x.rank() {
            return invalid!("narrow: axis {axis} of {}", x.ty);
        }
        lo[axis] = start;
        hi[axis] = start + size;
        self.slice(x, &lo, &hi, &ones)
    }

    pub fn concatenate(&mut self, xs: &[Value], axis: usize) -> Result<Value> {
        let Some(first) = xs.first() else {
            return invalid!("concatenate: no operands");
        };
        if axis >= first.rank() {
            return invalid!("concatenate: axis {axis} of {}", first.ty);
        }
        let mut dims = first.dims().to_vec();
        dims[axis] = 0;
        for x in xs {
            let same = x.elem() == first.elem()
                && x.rank() == first.rank()
                && (0..x.rank()).all(|i| i == axis || x.dims()[i] == first.dims()[i]);
            if !same {
                return invalid!(
                    "concatenate: {} and {} differ off axis {axis}",
                    first.ty,
                    x.ty
                );
            }
            dims[axis] += x.dims()[axis];
        }
        if xs.len() == 1 {
            return Ok(first.clone());
        }
        let refs: Vec<&Value> = xs.iter().collect();
        let attrs = format!("dimension = {axis} : i64");
        Ok(self.one(
            "stablehlo.concatenate",
            &refs,
            &attrs,
            TensorType::new(&dims, first.elem()),
        ))
    }
}
