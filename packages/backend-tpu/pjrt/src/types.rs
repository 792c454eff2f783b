//! Element types and tensor types, as PJRT buffers and StableHLO text name them.

use std::ffi::c_int;
use std::fmt;

use crate::ffi;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    F32,
    F64,
    I64,
    I32,
    Bool,
    U8,
}

impl ElementType {
    /// The riftco dtype name (`float32`, `int64`, `bool`, `uint8`; `float64`
    /// and `int32` only occur inside programs).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "float32" => Self::F32,
            "float64" => Self::F64,
            "int64" => Self::I64,
            "int32" => Self::I32,
            "bool" => Self::Bool,
            "uint8" => Self::U8,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::F64 => "float64",
            Self::I64 => "int64",
            Self::I32 => "int32",
            Self::Bool => "bool",
            Self::U8 => "uint8",
        }
    }

    /// The element type in MLIR's spelling.
    pub fn mlir(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::I64 => "i64",
            Self::I32 => "i32",
            Self::Bool => "i1",
            Self::U8 => "ui8",
        }
    }

    /// `PJRT_Buffer_Type`.
    pub fn pjrt(self) -> c_int {
        match self {
            Self::F32 => ffi::BUFFER_TYPE_F32,
            Self::F64 => ffi::BUFFER_TYPE_F64,
            Self::I64 => ffi::BUFFER_TYPE_S64,
            Self::I32 => ffi::BUFFER_TYPE_S32,
            Self::Bool => ffi::BUFFER_TYPE_PRED,
            Self::U8 => ffi::BUFFER_TYPE_U8,
        }
    }

    /// Bytes per element on the host (a `bool` is one byte, as in numpy).
    pub fn size(self) -> usize {
        match self {
            Self::F32 | Self::I32 => 4,
            Self::F64 | Self::I64 => 8,
            Self::Bool | Self::U8 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Self::F32 | Self::F64)
    }

    /// The `compare_type` StableHLO wants for this element type.
    pub fn compare_type(self) -> &'static str {
        match self {
            Self::F32 | Self::F64 => "FLOAT",
            Self::I64 | Self::I32 => "SIGNED",
            Self::Bool | Self::U8 => "UNSIGNED",
        }
    }
}

/// Dimensions and element type of a dense, row-major array.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dims: Vec<i64>,
    pub elem: ElementType,
}

impl TensorType {
    pub fn new(dims: &[i64], elem: ElementType) -> Self {
        TensorType {
            dims: dims.to_vec(),
            elem,
        }
    }

    pub fn scalar(elem: ElementType) -> Self {
        TensorType {
            dims: Vec::new(),
            elem,
        }
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    pub fn count(&self) -> i64 {
        self.dims.iter().product()
    }

    pub fn bytes(&self) -> usize {
        self.count() as usize * self.elem.size()
    }

    /// The same dims with another element type.
    pub fn with_elem(&self, elem: ElementType) -> Self {
        TensorType {
            dims: self.dims.clone(),
            elem,
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.dims {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.elem.mlir())
    }
}

/// Check that every dim is non-negative and the element count fits an i64.
pub fn check_dims(what: &str, dims: &[i64]) -> crate::Result<()> {
    let mut count: i64 = 1;
    for &d in dims {
        if d < 0 {
            return crate::invalid!("{what}: negative dimension in {dims:?}");
        }
        count = count.checked_mul(d).ok_or_else(|| {
            crate::Error::Invalid(format!("{what}: {dims:?} has too many elements"))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_types_print_as_mlir() {
        assert_eq!(
            TensorType::new(&[2, 3], ElementType::F32).to_string(),
            "tensor<2x3xf32>"
        );
        assert_eq!(
            TensorType::scalar(ElementType::I64).to_string(),
            "tensor<i64>"
        );
        assert_eq!(
            TensorType::new(&[0], ElementType::Bool).to_string(),
            "tensor<0xi1>"
        );
        assert_eq!(
            TensorType::new(&[4], ElementType::U8).to_string(),
            "tensor<4xui8>"
        );
    }

    #[test]
    fn names_round_trip() {
        for e in [
            ElementType::F32,
            ElementType::I64,
            ElementType::Bool,
            ElementType::U8,
        ] {
            assert_eq!(ElementType::from_name(e.name()), Some(e));
        }
        assert_eq!(ElementType::from_name("complex64"), None);
    }

    #[test]
    fn dims_are_validated() {
        assert!(check_dims("x", &[2, 0, 3]).is_ok());
        assert!(check_dims("x", &[2, -1]).is_err());
        assert!(check_dims("x", &[i64::MAX, 2]).is_err());
    }
}
