//! Dtype dispatch, output allocation and the GIL-releasing kernel runner.

use numpy::{
    Element, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use riftco_kernels::KernelError;

mod py_errors {
    pyo3::import_exception!(riftco.tensor.errors, KernelError);
}
use py_errors::KernelError as PyKernelError;

/// Run `f` without the GIL; a kernel error or a panic becomes a `KernelError`.
pub fn run<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, KernelError> + Send,
) -> PyResult<T> {
    riftco_native_call::detached(py, "a CPU kernel", PyKernelError::new_err, f)
}

pub fn error(msg: impl Into<String>) -> PyErr {
    PyKernelError::new_err(msg.into())
}

/// The element types kernels see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    F32,
    I64,
    Bool,
    U8,
    /// bfloat16 bit patterns (the Python side hands them over as a uint16 view).
    U16,
}

pub fn kind(a: &Bound<'_, PyUntypedArray>) -> PyResult<Kind> {
    let py = a.py();
    let d = a.dtype();
    if d.is_equiv_to(&numpy::dtype::<f32>(py)) {
        Ok(Kind::F32)
    } else if d.is_equiv_to(&numpy::dtype::<i64>(py)) {
        Ok(Kind::I64)
    } else if d.is_equiv_to(&numpy::dtype::<bool>(py)) {
        Ok(Kind::Bool)
    } else if d.is_equiv_to(&numpy::dtype::<u8>(py)) {
        Ok(Kind::U8)
    } else if d.is_equiv_to(&numpy::dtype::<u16>(py)) {
        Ok(Kind::U16)
    } else {
        Err(error(format!("unsupported dtype {d}")))
    }
}

/// A contiguous, read-only view of `a` as `&[T]` (valid while `a` lives).
pub fn slice<'a, T: Element>(a: &'a Bound<'_, PyUntypedArray>) -> PyResult<&'a [T]> {
    let typed = a
        .cast::<PyArrayDyn<T>>()
        .map_err(|_| error("array dtype disagrees with the kernel"))?;
    // SAFETY: the Python side hands kernels private, C-contiguous arrays that
    // nothing mutates while the call runs.
    unsafe { typed.as_slice() }.map_err(|_| error("kernel input is not C-contiguous"))
}

/// A fresh uninitialized array of `shape`, and its storage as a mutable slice.
pub fn alloc<'py, T: Element>(
    py: Python<'py>,
    shape: &[usize],
) -> (Bound<'py, PyArrayDyn<T>>, &'py mut [T]) {
    // SAFETY: every kernel writes each output element before the array is
    // returned; on error the array is dropped unseen.
    let arr = unsafe { PyArrayDyn::<T>::new(py, shape.to_vec(), false) };
    let data = unsafe { std::slice::from_raw_parts_mut(arr.data(), arr.len()) };
    (arr, data)
}

pub fn shape_of(a: &Bound<'_, PyUntypedArray>) -> Vec<usize> {
    a.shape().to_vec()
}

/// Strides (in elements) that read an array of `shape` broadcast to `out`.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> PyResult<Vec<usize>> {
    if shape.len() > out.len() {
        return Err(error(format!("cannot broadcast {shape:?} to {out:?}")));
    }
    let lead = out.len() - shape.len();
    let mut strides = vec![0usize; out.len()];
    let mut step = 1usize;
    for d in (0..shape.len()).rev() {
        let (n, o) = (shape[d], out[lead + d]);
        if n == o {
            strides[lead + d] = if n == 1 { 0 } else { step };
        } else if n != 1 {
            return Err(error(format!("cannot broadcast {shape:?} to {out:?}")));
        }
        step *= n;
    }
    Ok(strides)
}

/// Product of dims before, at and after `axis`.
pub fn split_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}
