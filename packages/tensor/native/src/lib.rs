//! `riftco.tensor._native`: thin PyO3 bindings over `riftco-kernels`.
//!
//! Arrays arrive as C-contiguous numpy arrays whose shapes and dtypes the
//! Python side has already validated. Every kernel runs through [`run`],
//! which releases the GIL and turns kernel errors and panics into
//! `riftco.tensor.errors.KernelError` (a `RiftcoError`).

mod convert;
mod nf4_ops;
mod nn_ops;
mod ops;
mod optim_ops;
mod serve_ops;

use pyo3::prelude::*;

/// The build id that the Python side and the wheelhouse check; the marker
/// text lets tools find it in the compiled binary.
pub const BUILD_ID_MARKER: &str = concat!("RIFTCO_BUILD_ID:", env!("RIFTCO_BUILD_ID"));

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_ID", &BUILD_ID_MARKER["RIFTCO_BUILD_ID:".len()..])?;
    m.add("BUILD_ID_MARKER", BUILD_ID_MARKER)?;
    optim_ops::register(m)?;
    nn_ops::register(m)?;
    serve_ops::register(m)?;
    nf4_ops::register(m)?;
    ops::register(m)
}
