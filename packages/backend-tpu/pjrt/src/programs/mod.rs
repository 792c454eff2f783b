//! The program of each backend capability, for given shapes and dtypes.
//!
//! A storage handle owns a buffer whose dims may differ from the tensor's
//! shape (a reshape never copies), so every program takes its parameters as
//! the buffers are (`Input::physical`) and reshapes them to the tensor shape
//! (`Input::shape`) first; XLA turns those reshapes into no-ops. Results come
//! out in their tensor shape.

pub mod attention;
pub mod elementwise;
pub mod index;
pub mod layout;
pub mod linalg;
pub mod nn;
pub mod optim;
pub mod packed;
pub mod quantized;
pub mod reduce;

use crate::error::Result;
use crate::hlo::{Builder, Value};
use crate::invalid;
use crate::types::{ElementType, TensorType};

/// One operand: the buffer's type and the tensor shape it is read as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Input {
    pub physical: TensorType,
    pub shape: Vec<i64>,
}

impl Input {
    /// An operand whose buffer already has the tensor's shape.
    pub fn dense(dims: &[i64], elem: ElementType) -> Self {
        Input {
            physical: TensorType::new(dims, elem),
            shape: dims.to_vec(),
        }
    }

    pub fn elem(&self) -> ElementType {
        self.physical.elem
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn count(&self) -> i64 {
        self.shape.iter().product()
    }
}

/// What differs between platforms when writing programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Where sums of float32 values accumulate: float64 where the device has
    /// it (CPU, GPU), float32 on TPUs, which have no float64 arithmetic.
    pub wide: ElementType,
}

impl Target {
    pub fn for_platform(platform: &str) -> Self {
        let wide = if platform.eq_ignore_ascii_case("tpu") {
            ElementType::F32
        } else {
            ElementType::F64
        };
        Target { wide }
    }
}

impl Default for Target {
    fn default() -> Self {
        Target {
            wide: ElementType::F64,
        }
    }
}

/// A builder with one parameter per input, each already read under its tensor shape.
pub fn start(inputs: &[&Input]) -> Result<(Builder, Vec<Value>)> {
    let mut b = Builder::new();
    let mut values = Vec::with_capacity(inputs.len());
    for input in inputs {
        if input.physical.count() != input.count() {
            return invalid!(
                "operand {} cannot be read as shape {:?}: element counts differ",
                input.physical,
                input.shape
            );
        }
        let p = b.param(input.physical.clone())?;
        values.push(b.reshape(&p, &input.shape)?);
    }
    Ok((b, values))
}

/// Check an operand's element type.
pub fn expect_elem(op: &str, what: &str, input: &Input, elems: &[ElementType]) -> Result<()> {
    if elems.contains(&input.elem()) {
        return Ok(());
    }
    let names: Vec<&str> = elems.iter().map(|e| e.name()).collect();
    invalid!(
        "{op}: {what} is {}, expected {}",
        input.elem().name(),
        names.join(" or ")
    )
}

/// Check that an axis exists.
pub fn expect_axis(op: &str, axis: usize, input: &Input) -> Result<()> {
    if axis < input.rank() {
        return Ok(());
    }
    invalid!(
        "{op}: axis {axis} is out of range for shape {:?}",
        input.shape
    )
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub fn f32s(dims: &[i64]) -> Input {
        Input::dense(dims, ElementType::F32)
    }

    pub fn i64s(dims: &[i64]) -> Input {
        Input::dense(dims, ElementType::I64)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::f32s;
    use super::*;

    #[test]
    fn inputs_are_reshaped_to_their_tensor_shape() {
        let flat = Input {
            physical: TensorType::new(&[6], ElementType::F32),
            shape: vec![2, 3],
        };
        let (b, v) = start(&[&flat]).unwrap();
        let p = b.finish(&v);
        assert!(p.text.contains("%arg0: tensor<6xf32>"));
        assert!(p
            .text
            .contains("\"stablehlo.reshape\"(%arg0) : (tensor<6xf32>) -> tensor<2x3xf32>"));
        let wrong = Input {
            physical: TensorType::new(&[5], ElementType::F32),
            shape: vec![2, 3],
        };
        assert!(start(&[&wrong]).is_err());
        let (b, v) = start(&[&f32s(&[2, 3])]).unwrap();
        assert!(!b.finish(&v).text.contains("reshape"));
    }

    #[test]
    fn tpus_accumulate_in_float32() {
        assert_eq!(Target::for_platform("tpu").wide, ElementType::F32);
        assert_eq!(Target::for_platform("cpu").wide, ElementType::F64);
        assert_eq!(Target::for_platform("cuda").wide, ElementType::F64);
    }
}
