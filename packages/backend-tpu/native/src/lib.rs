//! `riftco.backends.tpu._native`: thin PyO3 bindings over `riftco-pjrt`.
//!
//! A `Device` is an opened plugin with its client and compile cache; a
//! `Storage` is a device buffer read under a tensor shape. Every capability
//! is a module function taking the device and storages: it writes (or finds
//! in the cache) the program for these shapes and runs it, with the GIL
//! released, turning plugin errors and panics into
//! `riftco.backends.tpu.errors.PjrtError` (a `riftco.tensor.KernelError`).

mod attention_ops;
mod device;
mod nn_ops;
mod ops;
mod optim_ops;
mod quantized_ops;
mod storage;

use std::sync::Arc;

use pyo3::prelude::*;
use riftco_pjrt::programs::Target;
use riftco_pjrt::{Buffer, Program};

pub use device::Device;
pub use storage::Storage;

mod py_errors {
    pyo3::import_exception!(riftco.backends.tpu.errors, PjrtError);
}
pub use py_errors::PjrtError;

pub fn error(msg: impl Into<String>) -> PyErr {
    PjrtError::new_err(msg.into())
}

pub fn pjrt_error(e: riftco_pjrt::Error) -> PyErr {
    error(e.to_string())
}

/// Run `f` without the GIL; an error or a panic becomes a `PjrtError`.
pub fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> riftco_pjrt::Result<T> + Send,
) -> PyResult<T> {
    riftco_native_call::detached(py, "the PJRT backend", PjrtError::new_err, f)
}

/// Write the program for `inputs` with `make`, compile it once, run it.
pub fn run(
    py: Python<'_>,
    device: &Device,
    inputs: &[&Storage],
    make: impl FnOnce(&[riftco_pjrt::programs::Input], Target) -> riftco_pjrt::Result<Program> + Send,
) -> PyResult<Vec<Arc<Buffer>>> {
    let described: Vec<_> = inputs.iter().map(|s| s.input()).collect();
    let buffers: Vec<Arc<Buffer>> = inputs.iter().map(|s| s.buffer()).collect();
    let runtime = device.runtime();
    detached(py, move || {
        let target = runtime.target()?;
        let program = make(&described, target)?;
        let refs: Vec<&Buffer> = buffers.iter().map(|b| b.as_ref()).collect();
        let outs = runtime.run(&program, &refs)?;
        Ok(outs.into_iter().map(Arc::new).collect())
    })
}

/// Like [`run`] for a single result, as a new storage.
pub fn run_one(
    py: Python<'_>,
    device: &Device,
    inputs: &[&Storage],
    make: impl FnOnce(&[riftco_pjrt::programs::Input], Target) -> riftco_pjrt::Result<Program> + Send,
) -> PyResult<Storage> {
    let mut outs = run(py, device, inputs, make)?;
    Ok(Storage::new(outs.remove(0)))
}

/// Like [`run`] for a program whose last result is an index check
/// `[position, value]`: raise with `describe(position, value)` when the
/// position is not -1, otherwise return the other results.
pub fn run_checked(
    py: Python<'_>,
    device: &Device,
    inputs: &[&Storage],
    make: impl FnOnce(&[riftco_pjrt::programs::Input], Target) -> riftco_pjrt::Result<Program> + Send,
    describe: impl FnOnce(i64, i64) -> String,
) -> PyResult<Vec<Arc<Buffer>>> {
    let mut outs = run(py, device, inputs, make)?;
    let check = outs
        .pop()
        .ok_or_else(|| error("a checked program returned nothing"))?;
    let check = storage::read_i64s(py, check)?;
    if check[0] >= 0 {
        return Err(error(describe(check[0], check[1])));
    }
    Ok(outs)
}

/// The message of an index out of range, as every backend words it.
pub fn out_of_range(op: &str, size: i64) -> impl FnOnce(i64, i64) -> String + '_ {
    move |pos, value| {
        format!("{op}: index {value} at position {pos} is out of range for an axis of size {size}")
    }
}

/// A 1-D storage of `len` elements of `element` whose bytes are `bytes`, uploaded from the host.
fn upload(
    py: Python<'_>,
    device: &Device,
    len: usize,
    element: riftco_pjrt::ElementType,
    bytes: Vec<u8>,
) -> PyResult<Storage> {
    let runtime = device.runtime();
    let ty = riftco_pjrt::TensorType::new(&[len as i64], element);
    let buffer = detached(py, move || runtime.upload(&bytes, &ty))?;
    Ok(Storage::new(Arc::new(buffer)))
}

/// A 1-D int64 storage holding `values`, uploaded from the host.
pub fn upload_i64(py: Python<'_>, device: &Device, values: &[i64]) -> PyResult<Storage> {
    let bytes = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    upload(
        py,
        device,
        values.len(),
        riftco_pjrt::ElementType::I64,
        bytes,
    )
}

/// A 1-D float32 storage holding `values`, uploaded from the host.
pub fn upload_f32(py: Python<'_>, device: &Device, values: &[f32]) -> PyResult<Storage> {
    let bytes = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
    upload(
        py,
        device,
        values.len(),
        riftco_pjrt::ElementType::F32,
        bytes,
    )
}

/// The build id that the Python side and the wheelhouse check, and the marker
/// (`RIFTCO_BUILD_ID:riftco.backends.tpu._native:<id>`) that lets tools find it,
/// with this module's name, in the compiled binary.
pub const BUILD_ID: &str = env!("RIFTCO_BUILD_ID");
pub const BUILD_ID_MARKER: &str = env!("RIFTCO_BUILD_MARKER");

#[pymodule(name = "_native")]
fn riftco_backend_tpu_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_ID", BUILD_ID)?;
    m.add("BUILD_ID_MARKER", BUILD_ID_MARKER)?;
    m.add("PJRT_API_MAJOR", riftco_pjrt::ffi::API_MAJOR)?;
    m.add("PJRT_API_MINOR", riftco_pjrt::ffi::API_MINOR_WRITTEN)?;
    m.add_class::<Device>()?;
    m.add_class::<Storage>()?;
    ops::register(m)?;
    nn_ops::register(m)?;
    attention_ops::register(m)?;
    quantized_ops::register(m)?;
    optim_ops::register(m)
}
