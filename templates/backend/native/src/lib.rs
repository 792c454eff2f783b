//! `riftco.backends.NAME._native`: thin PyO3 bindings over `riftco-backend-NAME-kernels`.
//!
//! Arrays arrive as C-contiguous numpy arrays whose shapes and dtypes riftco.tensor
//! has already validated. Every kernel runs through [`run`]: the workspace's one
//! GIL-and-panic boundary (`riftco-native-call`), which releases the GIL and turns
//! kernel errors and panics into `riftco.tensor.plugin.KernelError`.

use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use riftco_backend_NAME_kernels as kernels;

mod py_errors {
    pyo3::import_exception!(riftco.tensor.plugin, KernelError);
}
use py_errors::KernelError;

/// The build id that the Python side and the wheelhouse check, and the marker
/// (`RIFTCO_BUILD_ID:riftco.backends.NAME._native:<id>`) that names this module.
pub const BUILD_ID: &str = env!("RIFTCO_BUILD_ID");
pub const BUILD_ID_MARKER: &str = env!("RIFTCO_BUILD_MARKER");

/// Run `f` without the GIL; a kernel error or a panic becomes a `KernelError`.
fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> kernels::Result<T> + Send) -> PyResult<T> {
    riftco_native_call::detached(py, "a NAME kernel", KernelError::new_err, f)
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
