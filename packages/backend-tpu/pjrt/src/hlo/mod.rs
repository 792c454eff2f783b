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

mod index;
mod linalg;
mod ops;

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
