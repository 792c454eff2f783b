//! `riftco.tensor._native`: thin PyO3 bindings over `riftco-kernels`.
//!
//! Arrays arrive as C-contiguous numpy arrays whose shapes and dtypes the
//! Python side has already validated. Every kernel runs through [`run`],
//! which releases the GIL and turns kernel errors and panics into
//! `riftco.tensor.errors.KernelError` (a `RiftcoError`).

mod blockq_ops;
mod convert;
mod decode_ops;
mod decode_spec;
mod nf4_ops;
mod nn_ops;
mod ops;
mod optim_ops;
mod serve_ops;

use pyo3::prelude::*;

/// The build id that the Python side and the wheelhouse check, and the marker
/// (`RIFTCO_BUILD_ID:riftco.tensor._native:<id>`) that lets tools find it, with
/// this module's name, in the compiled binary.
pub const BUILD_ID: &str = env!("RIFTCO_BUILD_ID");
pub const BUILD_ID_MARKER: &str = env!("RIFTCO_BUILD_MARKER");

/// Keep freed large buffers in the C heap instead of returning them to the
/// system (glibc only; `RIFTCO_CPU_KEEP_FREED=0` leaves malloc as it is).
///
/// Every kernel result is a fresh numpy array, and a training step allocates
/// and frees hundreds of megabytes of them. By default glibc maps each buffer
/// over 128 KiB (a threshold it raises only slowly) straight from the system
/// and unmaps it when freed, so every page of every result costs a page fault
/// and a zero fill. Raising the mapping threshold to its 32 MiB maximum and the
/// trim threshold to 1 GiB lets those buffers be reused; the process keeps the
/// peak it reached, as caching allocators do.
fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(
                param: std::os::raw::c_int,
                value: std::os::raw::c_int,
            ) -> std::os::raw::c_int;
        }
        const M_TRIM_THRESHOLD: std::os::raw::c_int = -1;
        const M_MMAP_THRESHOLD: std::os::raw::c_int = -3;
        if std::env::var("RIFTCO_CPU_KEEP_FREED").is_ok_and(|v| v == "0") {
            return false;
        }
        // SAFETY: mallopt only changes allocator parameters; both values are in range.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[pymodule(name = "_native")]
fn riftco_tensor_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("KEEPS_FREED_MEMORY", keep_freed_memory())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_ID", BUILD_ID)?;
    m.add("BUILD_ID_MARKER", BUILD_ID_MARKER)?;
    optim_ops::register(m)?;
    nn_ops::register(m)?;
    serve_ops::register(m)?;
    nf4_ops::register(m)?;
    blockq_ops::register(m)?;
    decode_ops::register(m)?;
    ops::register(m)
}
