//! `riftco.backends.metal._native`: thin PyO3 bindings over `riftco-wgpu`.
//!
//! `adapters(api)` lists what wgpu finds without opening anything; a `Device`
//! is one opened adapter with its buffer pool, pipeline cache and pending
//! batch of work; a `Buffer` is a pooled storage buffer; a `Kernel` a compiled
//! WGSL entry point. Every call releases the GIL and turns errors and panics
//! into `riftco.backends.metal.errors.GpuError` (a `riftco.tensor.KernelError`).

use std::sync::Arc;

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use riftco_wgpu::{Api, Context};

mod py_errors {
    pyo3::import_exception!(riftco.backends.metal.errors, GpuError);
}
use py_errors::GpuError;

fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> riftco_wgpu::Result<T> + Send,
) -> PyResult<T> {
    riftco_native_call::detached(py, "the wgpu backend", GpuError::new_err, f)
}

fn api(name: &str) -> PyResult<Api> {
    Api::parse(name).map_err(|e| GpuError::new_err(e.0))
}

/// The adapters wgpu finds for `api` (`vulkan` or `metal`), as dicts; an API this
/// build or platform cannot drive has none.
#[pyfunction]
fn adapters<'py>(py: Python<'py>, api_name: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let which = api(api_name)?;
    let found = detached(py, move || Ok(riftco_wgpu::adapters(which)))?;
    found
        .into_iter()
        .map(|a| {
            let d = PyDict::new(py);
            d.set_item("index", a.index)?;
            d.set_item("name", a.name)?;
            d.set_item("device_type", a.device_type)?;
            d.set_item("driver", a.driver)?;
            d.set_item("driver_info", a.driver_info)?;
            d.set_item("vendor", a.vendor)?;
            d.set_item("device", a.device)?;
            d.set_item("shader_f16", a.shader_f16)?;
            d.set_item("subgroup", a.subgroup)?;
            d.set_item("subgroup_sizes", a.subgroup_sizes)?;
            d.set_item("cooperative_matrix", a.cooperative_matrix)?;
            d.set_item("cooperative_matrices", a.cooperative_matrices)?;
            d.set_item(
                "cooperative_matrix_config",
                a.cooperative_config.map(|c| c.to_string()),
            )?;
            Ok(d)
        })
        .collect()
}

/// Whether this build can drive `api` on this platform at all.
#[pyfunction]
fn compiled_in(api_name: &str) -> PyResult<bool> {
    Ok(api(api_name)?.compiled_in())
}

#[pyclass(frozen, module = "riftco.backends.metal._native")]
struct Buffer {
    inner: riftco_wgpu::Buffer,
}

#[pymethods]
impl Buffer {
    /// Bytes asked for (the pooled allocation may be larger).
    #[getter]
    fn nbytes(&self) -> u64 {
        self.inner.size
    }
}

#[pyclass(frozen, module = "riftco.backends.metal._native")]
struct Kernel {
    inner: Arc<riftco_wgpu::Kernel>,
}

#[pymethods]
impl Kernel {
    #[getter]
    fn entry(&self) -> String {
        self.inner.entry.clone()
    }
}

#[pyclass(frozen, module = "riftco.backends.metal._native")]
struct Device {
    ctx: Arc<Context>,
}

#[pymethods]
impl Device {
    /// Open adapter `index` of `api`, keeping at most `pool_bytes` of free buffers;
    /// with `cooperative_matrix`, with wgpu's cooperative matrices too (the coop
    /// matmul path), refused where the adapter has no configuration it can use.
    #[new]
    #[pyo3(signature = (api_name, index, pool_bytes, cooperative_matrix = false))]
    fn new(
        py: Python<'_>,
        api_name: &str,
        index: usize,
        pool_bytes: u64,
        cooperative_matrix: bool,
    ) -> PyResult<Self> {
        let which = api(api_name)?;
        let ctx = detached(py, move || {
            riftco_wgpu::open(which, index, pool_bytes, cooperative_matrix)
        })?;
        Ok(Device { ctx: Arc::new(ctx) })
    }

    #[getter]
    fn name(&self) -> String {
        self.ctx.description.name.clone()
    }

    #[getter]
    fn device_type(&self) -> String {
        self.ctx.description.device_type.clone()
    }

    #[getter]
    fn driver(&self) -> String {
        let d = &self.ctx.description;
        if d.driver_info.is_empty() {
            d.driver.clone()
        } else {
            format!("{} {}", d.driver, d.driver_info)
        }
    }

    #[getter]
    fn max_binding(&self) -> u64 {
        self.ctx.max_binding
    }

    #[getter]
    fn max_groups(&self) -> u32 {
        self.ctx.max_groups
    }

    /// Whether the device was opened with SHADER_F16 (kernels may `enable f16;`).
    #[getter]
    fn shader_f16(&self) -> bool {
        self.ctx.shader_f16
    }

    /// Whether kernels compile without wgpu's bounds checks (RIFTCO_WGPU_UNCHECKED=1).
    #[getter]
    fn unchecked(&self) -> bool {
        self.ctx.unchecked
    }

    /// The subgroup sizes (min, max) where the device was opened with subgroups, else (0, 0).
    #[getter]
    fn subgroup_sizes(&self) -> (u32, u32) {
        self.ctx.subgroup_sizes
    }

    /// The coop matmul path's configuration where the device was opened with
    /// cooperative matrices: (tile size, input type `f16` or `f32`, workgroup width).
    #[getter]
    fn cooperative_matrix(&self) -> Option<(u32, &'static str, u32)> {
        self.ctx
            .cooperative
            .map(|(c, workgroup)| (c.size, c.input_type(), workgroup))
    }

    /// Counters: dispatches, submits, waits, uploads, reads, bind_groups,
    /// bind_group_hits, allocations, reuses, pipelines, pooled_bytes.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.ctx.stats();
        let d = PyDict::new(py);
        d.set_item("dispatches", s.dispatches)?;
        d.set_item("submits", s.submits)?;
        d.set_item("waits", s.waits)?;
        d.set_item("uploads", s.uploads)?;
        d.set_item("reads", s.reads)?;
        d.set_item("bind_groups", s.bind_groups)?;
        d.set_item("bind_group_hits", s.bind_group_hits)?;
        d.set_item("allocations", s.allocations)?;
        d.set_item("reuses", s.reuses)?;
        d.set_item("pipelines", s.pipelines)?;
        d.set_item("pooled_bytes", s.pooled_bytes)?;
        Ok(d)
    }

    /// A buffer of `nbytes` (contents undefined until written).
    fn alloc(&self, py: Python<'_>, nbytes: u64) -> PyResult<Buffer> {
        let ctx = self.ctx.clone();
        let inner = detached(py, move || ctx.alloc(nbytes))?;
        Ok(Buffer { inner })
    }

    /// A buffer holding the bytes of `data` (1-D uint8).
    fn upload(&self, py: Python<'_>, data: PyReadonlyArray1<'_, u8>) -> PyResult<Buffer> {
        let bytes = data
            .as_slice()
            .map_err(|_| GpuError::new_err("upload: the array is not contiguous"))?;
        let ctx = self.ctx.clone();
        let inner = detached(py, move || ctx.upload(bytes))?;
        Ok(Buffer { inner })
    }

    /// Overwrite bytes of `dst` from `offset` with `data` (1-D uint8), in order.
    fn write(
        &self,
        py: Python<'_>,
        dst: &Bound<'_, Buffer>,
        offset: u64,
        data: PyReadonlyArray1<'_, u8>,
    ) -> PyResult<()> {
        let bytes = data
            .as_slice()
            .map_err(|_| GpuError::new_err("write: the array is not contiguous"))?;
        let ctx = self.ctx.clone();
        let dst = dst.get();
        detached(py, move || ctx.write(&dst.inner, offset, bytes))
    }

    /// Copy `nbytes` from `src` at `src_offset` to `dst` at `dst_offset`, in order.
    fn copy(
        &self,
        py: Python<'_>,
        src: &Bound<'_, Buffer>,
        src_offset: u64,
        dst: &Bound<'_, Buffer>,
        dst_offset: u64,
        nbytes: u64,
    ) -> PyResult<()> {
        let ctx = self.ctx.clone();
        let (src, dst) = (src.get(), dst.get());
        detached(py, move || {
            ctx.copy(&src.inner, src_offset, &dst.inner, dst_offset, nbytes)
        })
    }

    /// The compiled pipeline of `entry` in the WGSL `source` (cached).
    fn kernel(&self, py: Python<'_>, source: &str, entry: &str) -> PyResult<Kernel> {
        let ctx = self.ctx.clone();
        let inner = detached(py, move || ctx.kernel(source, entry))?;
        Ok(Kernel { inner })
    }

    /// Record a dispatch: parameters at binding 0, `buffers` at 1.., `groups` workgroups.
    fn dispatch(
        &self,
        py: Python<'_>,
        kernel: &Bound<'_, Kernel>,
        buffers: Vec<Bound<'_, Buffer>>,
        params: Vec<u32>,
        groups: (u32, u32, u32),
    ) -> PyResult<()> {
        let ctx = self.ctx.clone();
        let kernel = kernel.get().inner.clone();
        let refs: Vec<&riftco_wgpu::Buffer> = buffers.iter().map(|b| &b.get().inner).collect();
        detached(py, move || {
            ctx.dispatch(&kernel, &refs, &params, [groups.0, groups.1, groups.2])
        })
    }

    /// The first `nbytes` of `src` as a new uint8 array, once all recorded work has run.
    fn read<'py>(
        &self,
        py: Python<'py>,
        src: &Bound<'py, Buffer>,
        nbytes: u64,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let ctx = self.ctx.clone();
        let src = src.get();
        let bytes = detached(py, move || ctx.read(&src.inner, nbytes))?;
        Ok(PyArray1::from_vec(py, bytes))
    }

    /// Submit recorded work without waiting.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let ctx = self.ctx.clone();
        detached(py, move || ctx.flush())
    }

    /// Submit recorded work and wait for it.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let ctx = self.ctx.clone();
        detached(py, move || ctx.synchronize())
    }
}

/// The build id that the Python side and the wheelhouse check, and its marker.
pub const BUILD_ID: &str = env!("RIFTCO_BUILD_ID");
pub const BUILD_ID_MARKER: &str = env!("RIFTCO_BUILD_MARKER");

#[pymodule(name = "_native")]
fn riftco_backend_metal_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_ID", BUILD_ID)?;
    m.add("BUILD_ID_MARKER", BUILD_ID_MARKER)?;
    m.add_function(wrap_pyfunction!(adapters, m)?)?;
    m.add_function(wrap_pyfunction!(compiled_in, m)?)?;
    m.add_class::<Device>()?;
    m.add_class::<Buffer>()?;
    m.add_class::<Kernel>()
}
