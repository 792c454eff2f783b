//! `riftco.backends.NAME._native`: thin PyO3 bindings over `riftco-backend-NAME-kernels`.
//!
//! Arrays arrive as C-contiguous numpy arrays whose shapes and dtypes riftco.tensor
//! has already validated. Every kernel runs through [`run`], which releases the GIL
//! and turns kernel errors and panics into `riftco.tensor.errors.KernelError`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use riftco_backend_NAME_kernels as kernels;

mod py_errors {
    pyo3::import_exception!(riftco.tensor.errors, KernelError);
}
use py_errors::KernelError;

/// The build id that the Python side and the wheelhouse check, and the marker
/// (`RIFTCO_BUILD_ID:riftco.backends.NAME._native:<id>`) that names this module.
pub const BUILD_ID: &str = env!("RIFTCO_BUILD_ID");
pub const BUILD_ID_MARKER: &str = env!("RIFTCO_BUILD_MARKER");

/// Run `f` without the GIL; a kernel error or a panic becomes a `KernelError`.
fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> kernels::Result<T> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(KernelError::new_err(e.0)),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(KernelError::new_err(format!(
                "internal error in a NAME kernel: {msg}"
            )))
        }
    }
}

/// (Log-)softmax over the last axis; `causal_queries` > 0 masks as riftco.tensor's softmax.
#[pyfunction]
fn softmax<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
    causal_queries: usize,
    log: bool,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let shape = x.shape().to_vec();
    let n = shape.last().copied().unwrap_or(1);
    let rows = x.len().checked_div(n).unwrap_or(0);
    let values = x
        .as_slice()
        .map_err(|_| KernelError::new_err("softmax: input is not C-contiguous"))?;
    let out = run(py, || {
        kernels::softmax(values, rows, n, causal_queries, log)
    })?;
    out.into_pyarray(py).reshape(shape)
}

#[pymodule(name = "_native")]
fn riftco_backend_NAME_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_ID", BUILD_ID)?;
    m.add("BUILD_ID_MARKER", BUILD_ID_MARKER)?;
    m.add_function(wrap_pyfunction!(softmax, m)?)
}
