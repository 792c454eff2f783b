//! A small writer of StableHLO programs as MLIR text.
//!
//! Every op is printed in MLIR's generic form (`"stablehlo.add"(%a, %b) :
//! (T, T) -> T`), which every StableHLO version parses the same way. Each
//! method checks its operands' shapes first and returns `Error::Invalid`
//! rather than text that XLA might reject by aborting the process.

use std::fmt::Write;

use crate::error::Result;
use crate::invalid;
use crate::types::{check_dims, ElementType, TensorType};

/// An SSA value of the program being written.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    name: String,
    pub ty: TensorType,
}

impl Value {
    pub fn dims(&self) -> &[i64] {
        &self.ty.dims
    }

    pub fn elem(&self) -> ElementType {
        self.ty.elem
    }

    pub fn rank(&self) -> usize {
        self.ty.rank()
    }
}

/// A finished program: its text (also the compile-cache key) and its signature.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub text: String,
    pub params: Vec<TensorType>,
    pub results: Vec<TensorType>,
}

/// A constant's value, printed in the element type it is used with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    F(f64),
    I(i64),
    B(bool),
}

impl Scalar {
    fn literal(self, elem: ElementType) -> Result<String> {
        Ok(match (self, elem) {
            // Bit patterns: exact, and the only spelling of inf and nan.
            (Scalar::F(v), ElementType::F32) => format!("0x{:08X}", (v as f32).to_bits()),
            (Scalar::F(v), ElementType::F64) => format!("0x{:016X}", v.to_bits()),
            (Scalar::I(v), ElementType::I64 | ElementType::I32 | ElementType::U8) => v.to_string(),
            (Scalar::B(v), ElementType::Bool) => v.to_string(),
            (s, e) => return invalid!("constant {s:?} cannot be a {}", e.name()),
        })
    }
}

/// The reduction a `reduce` region applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reducer {
    Add,
    Max,
    Min,
    And,
    Or,
}

impl Reducer {
    fn op(self) -> &'static str {
        match self {
            Reducer::Add => "stablehlo.add",
            Reducer::Max => "stablehlo.maximum",
            Reducer::Min => "stablehlo.minimum",
            Reducer::And => "stablehlo.and",
            Reducer::Or => "stablehlo.or",
        }
    }
}

fn list(items: &[i64]) -> String {
    let parts: Vec<String> = items.iter().map(|i| i.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

fn array(items: &[i64]) -> String {
    if items.is_empty() {
        return "array<i64>".into();
    }
    let parts: Vec<String> = items.iter().map(|i| i.to_string()).collect();
    format!("array<i64: {}>", parts.join(", "))
}

fn is_permutation(perm: &[i64], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    perm.len() == rank
        && perm.iter().all(|&p| {
            let ok = p >= 0 && (p as usize) < rank && !seen[p as usize];
            if ok {
                seen[p as usize] = true;
            }
            ok
        })
}

/// Numpy broadcasting of two shapes, or None.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, slot) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        *slot = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

pub struct Builder {
    body: String,
    indent: usize,
    next: usize,
    params: Vec<TensorType>,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            body: String::new(),
            indent: 2,
            next: 0,
            params: Vec::new(),
        }
    }

    /// A new parameter of the program's `main`.
    pub fn param(&mut self, ty: TensorType) -> Result<Value> {
        check_dims("parameter", &ty.dims)?;
        let name = format!("%arg{}", self.params.len());
        self.params.push(ty.clone());
        Ok(Value { name, ty })
    }

    /// Close the program, returning `results`.
    pub fn finish(self, results: &[Value]) -> Program {
        let mut text = String::from("module @riftco {\n  func.func public @main(");
        let params: Vec<String> = self
            .params
            .iter()
            .enumerate()
            .map(|(i, t)| format!("%arg{i}: {t}"))
            .collect();
        text.push_str(&params.join(", "));
        let types: Vec<String> = results.iter().map(|v| v.ty.to_string()).collect();
        let _ = writeln!(text, ") -> ({}) {{", types.join(", "));
        text.push_str(&self.body);
        let names: Vec<&str> = results.iter().map(|v| v.name.as_str()).collect();
        let _ = writeln!(
            text,
            "    \"func.return\"({}) : ({}) -> ()\n  }}\n}}",
            names.join(", "),
            types.join(", ")
        );
        Program {
            text,
            params: self.params,
            results: results.iter().map(|v| v.ty.clone()).collect(),
        }
    }

    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("%v{}", self.next)
    }

    /// Write one op in generic form and return its results.
    fn op(
        &mut self,
        name: &str,
        operands: &[&Value],
        region: Option<String>,
        attrs: &str,
        results: &[TensorType],
    ) -> Vec<Value> {
        let base = self.fresh();
        let line_start = " ".repeat(self.indent * 2);
        let names: Vec<&str> = operands.iter().map(|v| v.name.as_str()).collect();
        let in_types: Vec<String> = operands.iter().map(|v| v.ty.to_string()).collect();
        let out_types: Vec<String> = results.iter().map(|t| t.to_string()).collect();
        let lhs = if results.len() == 1 {
            base.clone()
        } else {
            format!("{base}:{}", results.len())
        };
        let mut line = format!("{line_start}{lhs} = \"{name}\"({})", names.join(", "));
        if let Some(region) = region {
            let _ = write!(line, " ({{\n{region}{line_start}}})");
        }
        if !attrs.is_empty() {
            let _ = write!(line, " {{{attrs}}}");
        }
        let out = if results.len() == 1 {
            out_types[0].clone()
        } else {
            format!("({})", out_types.join(", "))
        };
        let _ = writeln!(line, " : ({}) -> {out}", in_types.join(", "));
        self.body.push_str(&line);
        if results.len() == 1 {
            return vec![Value {
                name: base,
                ty: results[0].clone(),
            }];
        }
        results
            .iter()
            .enumerate()
            .map(|(i, ty)| Value {
                name: format!("{base}#{i}"),
                ty: ty.clone(),
            })
            .collect()
    }

    fn one(&mut self, name: &str, operands: &[&Value], attrs: &str, result: TensorType) -> Value {
        self.op(name, operands, None, attrs, &[result]).remove(0)
    }

    /// The text of a one-block region with `args`, whose ops `body` writes;
    /// the values it returns are the region's results.
    fn region(
        &mut self,
        args: &[TensorType],
        body: impl FnOnce(&mut Builder, &[Value]) -> Result<Vec<Value>>,
    ) -> Result<String> {
        let outer = std::mem::take(&mut self.body);
        self.indent += 1;
        let values: Vec<Value> = args
            .iter()
            .map(|t| Value {
                name: self.fresh(),
                ty: t.clone(),
            })
            .collect();
        let header: Vec<String> = values
            .iter()
            .map(|v| format!("{}: {}", v.name, v.ty))
            .collect();
        let block = " ".repeat(self.indent * 2 - 2);
        let _ = writeln!(self.body, "{block}^bb0({}):", header.join(", "));
        let outcome = body(self, &values);
        let text = match outcome {
            Ok(results) => {
                let names: Vec<&str> = results.iter().map(|v| v.name.as_str()).collect();
                let types: Vec<String> = results.iter().map(|v| v.ty.to_string()).collect();
                let _ = writeln!(
                    self.body,
                    "{}\"stablehlo.return\"({}) : ({}) -> ()",
                    " ".repeat(self.indent * 2),
                    names.join(", "),
                    types.join(", ")
                );
                Ok(std::mem::replace(&mut self.body, outer))
            }
            Err(e) => {
                self.body = outer;
                Err(e)
            }
        };
        self.indent -= 1;
        text
    }

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

    // ---- indexing ------------------------------------------------------------------

    /// Gather single elements: `indices` is `[..., rank(x)]` of i64 coordinates
    /// (each in range), the result has `indices`' leading shape.
    pub fn gather_points(&mut self, x: &Value, indices: &Value) -> Result<Value> {
        let r = x.rank() as i64;
        let Some((&last, lead)) = indices.dims().split_last() else {
            return invalid!("gather: indices {} have no coordinate axis", indices.ty);
        };
        if last != r || indices.elem() != ElementType::I64 {
            return invalid!("gather: indices {} for an operand {}", indices.ty, x.ty);
        }
        if x.ty.count() == 0 && indices.ty.count() != 0 {
            return invalid!("gather: indices into an empty operand {}", x.ty);
        }
        let all: Vec<i64> = (0..r).collect();
        let attrs = format!(
            "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = {}, start_index_map = {}, \
             index_vector_dim = {}>, indices_are_sorted = false, slice_sizes = {}",
            list(&all),
            list(&all),
            lead.len(),
            array(&vec![1; r as usize])
        );
        Ok(self.one(
            "stablehlo.gather",
            &[x, indices],
            &attrs,
            TensorType::new(lead, x.elem()),
        ))
    }

    /// `x.take(indices, axis)` for 1-D i64 `indices` (each in range).
    pub fn take(&mut self, x: &Value, indices: &Value, axis: usize) -> Result<Value> {
        if axis >= x.rank() || indices.rank() != 1 || indices.elem() != ElementType::I64 {
            return invalid!("take: {} along axis {axis} at {}", x.ty, indices.ty);
        }
        let count = indices.dims()[0];
        if x.dims()[axis] == 0 && count != 0 {
            return invalid!("take: indices into an empty axis of {}", x.ty);
        }
        let mut dims = x.dims().to_vec();
        dims[axis] = count;
        if count == 0 || x.ty.count() == 0 {
            return self.splat(zero(x.elem()), x.elem(), &dims);
        }
        let column = self.reshape(indices, &[count, 1])?;
        let offset: Vec<i64> = (0..x.rank() as i64).filter(|&d| d != axis as i64).collect();
        let mut sizes = x.dims().to_vec();
        sizes[axis] = 1;
        let attrs = format!(
            "dimension_numbers = #stablehlo.gather<offset_dims = {}, collapsed_slice_dims = [{axis}], \
             start_index_map = [{axis}], index_vector_dim = 1>, indices_are_sorted = false, \
             slice_sizes = {}",
            list(&offset),
            array(&sizes)
        );
        // The offset dims fill every result position but `axis`, where the indices go.
        Ok(self.one(
            "stablehlo.gather",
            &[x, &column],
            &attrs,
            TensorType::new(&dims, x.elem()),
        ))
    }

    /// `base` with `updates` added at single-element coordinates `indices`
    /// (`[..., rank(base)]`, each in range; `updates` has the leading shape).
    pub fn scatter_add_points(
        &mut self,
        base: &Value,
        indices: &Value,
        updates: &Value,
    ) -> Result<Value> {
        let r = base.rank() as i64;
        let Some((&last, lead)) = indices.dims().split_last() else {
            return invalid!("scatter: indices {} have no coordinate axis", indices.ty);
        };
        if last != r
            || lead != updates.dims()
            || updates.elem() != base.elem()
            || indices.elem() != ElementType::I64
        {
            return invalid!(
                "scatter: {} at {} with updates {}",
                base.ty,
                indices.ty,
                updates.ty
            );
        }
        if updates.ty.count() == 0 {
            return Ok(base.clone());
        }
        let all: Vec<i64> = (0..r).collect();
        let attrs = format!(
            "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<\
             inserted_window_dims = {}, scatter_dims_to_operand_dims = {}, index_vector_dim = {}>, \
             unique_indices = false",
            list(&all),
            list(&all),
            lead.len()
        );
        self.scatter(base, indices, updates, &attrs)
    }

    /// `base` plus `updates` slices added at `indices` along `axis` (index_add).
    pub fn index_add(
        &mut self,
        base: &Value,
        indices: &Value,
        updates: &Value,
        axis: usize,
    ) -> Result<Value> {
        if axis >= base.rank() || indices.rank() != 1 || indices.elem() != ElementType::I64 {
            return invalid!("index_add: {} along axis {axis} at {}", base.ty, indices.ty);
        }
        let count = indices.dims()[0];
        let mut want = base.dims().to_vec();
        want[axis] = count;
        if updates.dims() != want || updates.elem() != base.elem() {
            return invalid!(
                "index_add: updates {} for {} at {}",
                updates.ty,
                base.ty,
                indices.ty
            );
        }
        if updates.ty.count() == 0 {
            return Ok(base.clone());
        }
        let column = self.reshape(indices, &[count, 1])?;
        let window: Vec<i64> = (0..base.rank() as i64)
            .filter(|&d| d != axis as i64)
            .collect();
        let attrs = format!(
            "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<\
             update_window_dims = {}, inserted_window_dims = [{axis}], \
             scatter_dims_to_operand_dims = [{axis}], index_vector_dim = 1>, unique_indices = false",
            list(&window)
        );
        self.scatter(base, &column, updates, &attrs)
    }

    /// `base` with rows `rows[i]` (axis 0, 1-D i64) replaced by `updates[i]`;
    /// out-of-range rows are skipped (XLA's scatter semantics).
    pub fn replace_rows(&mut self, base: &Value, rows: &Value, updates: &Value) -> Result<Value> {
        if base.rank() == 0 || rows.rank() != 1 || rows.elem() != ElementType::I64 {
            return invalid!("replace_rows: {} at {}", base.ty, rows.ty);
        }
        let n = rows.dims()[0];
        let mut want = base.dims().to_vec();
        want[0] = n;
        if updates.dims() != want || updates.elem() != base.elem() {
            return invalid!(
                "replace_rows: updates {} for {} at {}",
                updates.ty,
                base.ty,
                rows.ty
            );
        }
        if n == 0 || base.ty.count() == 0 {
            return Ok(base.clone());
        }
        let column = self.reshape(rows, &[n, 1])?;
        let window: Vec<i64> = (1..base.rank() as i64).collect();
        let attrs = format!(
            "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<\
             update_window_dims = {}, inserted_window_dims = [0], \
             scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false",
            list(&window)
        );
        let scalar = TensorType::scalar(base.elem());
        let region = self.region(&[scalar.clone(), scalar], |_, args| {
            Ok(vec![args[1].clone()])
        })?;
        Ok(self
            .op(
                "stablehlo.scatter",
                &[base, &column, updates],
                Some(region),
                &attrs,
                std::slice::from_ref(&base.ty),
            )
            .remove(0))
    }

    fn scatter(
        &mut self,
        base: &Value,
        indices: &Value,
        updates: &Value,
        attrs: &str,
    ) -> Result<Value> {
        let scalar = TensorType::scalar(base.elem());
        let region = self.region(&[scalar.clone(), scalar], |b, args| {
            Ok(vec![b.add(&args[0], &args[1])?])
        })?;
        Ok(self
            .op(
                "stablehlo.scatter",
                &[base, indices, updates],
                Some(region),
                attrs,
                std::slice::from_ref(&base.ty),
            )
            .remove(0))
    }
}

/// The zero of an element type.
pub fn zero(elem: ElementType) -> Scalar {
    match elem {
        ElementType::F32 | ElementType::F64 => Scalar::F(0.0),
        ElementType::Bool => Scalar::B(false),
        _ => Scalar::I(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(dims: &[i64]) -> TensorType {
        TensorType::new(dims, ElementType::F32)
    }

    #[test]
    fn a_program_has_main_and_returns_its_results() {
        let mut b = Builder::new();
        let x = b.param(f32s(&[2, 3])).unwrap();
        let y = b.param(f32s(&[2, 3])).unwrap();
        let s = b.add(&x, &y).unwrap();
        let p = b.finish(&[s]);
        assert!(p.text.contains("func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>) -> (tensor<2x3xf32>)"));
        assert!(p.text.contains("%v1 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>"));
        assert!(p
            .text
            .contains("\"func.return\"(%v1) : (tensor<2x3xf32>) -> ()"));
        assert_eq!(p.results, vec![f32s(&[2, 3])]);
    }

    #[test]
    fn constants_are_exact_bit_patterns() {
        let mut b = Builder::new();
        let one = b.f32(1.0).unwrap();
        let inf = b
            .splat(Scalar::F(f64::NEG_INFINITY), ElementType::F32, &[2])
            .unwrap();
        let p = b.finish(&[one, inf]);
        assert!(p.text.contains("dense<0x3F800000> : tensor<f32>"));
        assert!(p.text.contains("dense<0xFF800000> : tensor<2xf32>"));
        assert!(Builder::new()
            .scalar(Scalar::B(true), ElementType::F32)
            .is_err());
    }

    #[test]
    fn shapes_are_checked_before_any_text_is_written() {
        let mut b = Builder::new();
        let x = b.param(f32s(&[2, 3])).unwrap();
        let y = b.param(f32s(&[3, 2])).unwrap();
        assert!(b.add(&x, &y).is_err());
        assert!(b.reshape(&x, &[5]).is_err());
        assert!(b.transpose(&x, &[0, 0]).is_err());
        assert!(b.broadcast_in_dim(&x, &[0, 1], &[2, 4]).is_err());
        assert!(b.slice(&x, &[0, 0], &[3, 3], &[1, 1]).is_err());
        assert!(b.dot_general(&x, &x, (&[], &[]), (&[1], &[1])).is_ok());
        assert!(b.dot_general(&x, &y, (&[], &[]), (&[1], &[1])).is_err());
        assert!(b.concatenate(&[x.clone(), y.clone()], 1).is_err());
        assert!(b.reduce(&x, Scalar::F(0.0), Reducer::Add, &[2]).is_err());
    }

    #[test]
    fn reductions_carry_a_region() {
        let mut b = Builder::new();
        let x = b.param(f32s(&[2, 3])).unwrap();
        let s = b.reduce(&x, Scalar::F(0.0), Reducer::Add, &[1]).unwrap();
        assert_eq!(s.dims(), &[2]);
        let p = b.finish(&[s]);
        assert!(p.text.contains("^bb0(%v2: tensor<f32>, %v3: tensor<f32>):"));
        assert!(p
            .text
            .contains("\"stablehlo.return\"(%v4) : (tensor<f32>) -> ()"));
        assert!(p.text.contains(
            "{dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>"
        ));
    }

    #[test]
    fn dot_general_puts_batch_then_free_dims() {
        let mut b = Builder::new();
        let x = b.param(f32s(&[4, 2, 3])).unwrap();
        let y = b.param(f32s(&[4, 3, 5])).unwrap();
        let z = b.dot_general(&x, &y, (&[0], &[0]), (&[2], &[1])).unwrap();
        assert_eq!(z.dims(), &[4, 2, 5]);
        let p = b.finish(&[z]);
        assert!(p.text.contains("#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>"));
    }

    #[test]
    fn numpy_broadcasting_of_shapes() {
        assert_eq!(broadcast_shapes(&[3, 1], &[4]), Some(vec![3, 4]));
        assert_eq!(broadcast_shapes(&[], &[2, 3]), Some(vec![2, 3]));
        assert_eq!(broadcast_shapes(&[2, 0, 3], &[3]), Some(vec![2, 0, 3]));
        assert_eq!(broadcast_shapes(&[3, 4], &[2, 4]), None);
    }

    #[test]
    fn empty_attribute_arrays_print_without_a_colon() {
        assert_eq!(array(&[]), "array<i64>");
        assert_eq!(array(&[1, 0]), "array<i64: 1, 0>");
    }
}
