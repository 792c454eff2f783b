//! `riftco.backends.cuda._native`: thin PyO3 bindings over `riftco-cuda`.
//!
//! A `Device` is one GPU (its stream, memory pool, kernel modules, cuBLAS);
//! a `Buffer` is device memory from its pool, tagged with the dtype name it
//! holds. Kernels are launched by module and name with a list of arguments;
//! which kernel an op runs, and with what, is decided by the Python side
//! (`riftco.backends.cuda.ops`). Every call releases the GIL and turns errors
//! and panics into `riftco.backends.cuda.errors.CudaError`.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyList, PyTuple};
use riftco_cuda::blas::{self, Compute, Element, Operand};
use riftco_cuda::cublaslt::{self, Epilogue};
use riftco_cuda::kernels::{self, CubinCache};
use riftco_cuda::libs::Library;
use riftco_cuda::{nvrtc, Arg};

mod decode;

mod py_errors {
    pyo3::import_exception!(riftco.backends.cuda.errors, CudaError);
}
use py_errors::CudaError;

fn error(msg: impl Into<String>) -> PyErr {
    CudaError::new_err(msg.into())
}

/// Run `f` without the GIL; an error or a panic becomes a `CudaError`.
fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> riftco_cuda::Result<T> + Send,
) -> PyResult<T> {
    riftco_native_call::detached(py, "the CUDA backend", CudaError::new_err, f)
}

/// Device memory of one GPU, returned to its pool when the last reference goes.
#[pyclass(frozen, module = "riftco.backends.cuda._native")]
pub struct Buffer {
    inner: Arc<riftco_cuda::Buffer>,
    dtype: String,
}

#[pymethods]
impl Buffer {
    /// The size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.bytes()
    }

    /// The device address (for kernel arguments; valid while this buffer lives).
    #[getter]
    fn ptr(&self) -> u64 {
        self.inner.ptr()
    }

    /// The name of the dtype it holds (`float32`, `bfloat16`, ...).
    #[getter]
    fn dtype(&self) -> &str {
        &self.dtype
    }
}

/// A point in a device's stream whose time the GPU records (`Device.record_event`).
#[pyclass(frozen, module = "riftco.backends.cuda._native")]
pub struct Event {
    inner: Arc<riftco_cuda::Event>,
}

#[pymethods]
impl Event {
    /// Milliseconds the GPU spent between this event and `later`, waiting for `later`.
    fn elapsed_ms(&self, py: Python<'_>, later: &Event) -> PyResult<f32> {
        let (a, b) = (self.inner.clone(), later.inner.clone());
        detached(py, move || a.elapsed_ms(&b))
    }
}

/// One GPU.
#[pyclass(frozen, module = "riftco.backends.cuda._native")]
pub struct Device {
    inner: Arc<riftco_cuda::Device>,
}

impl Device {
    fn buffer(&self, inner: riftco_cuda::Buffer, dtype: &str) -> Buffer {
        Buffer {
            inner: Arc::new(inner),
            dtype: dtype.to_string(),
        }
    }
}

fn argument(item: &Bound<'_, PyAny>) -> PyResult<Arg> {
    if item.is_none() {
        return Ok(Arg::Ptr(0));
    }
    if let Ok(b) = item.cast::<Buffer>() {
        return Ok(Arg::Ptr(b.get().inner.ptr()));
    }
    if item.is_instance_of::<PyFloat>() {
        return Ok(Arg::F32(item.extract::<f64>()? as f32));
    }
    if item.is_instance_of::<PyTuple>() || item.is_instance_of::<PyList>() {
        return Ok(Arg::I64s(item.extract::<Vec<i64>>()?));
    }
    if let Ok(v) = item.extract::<i64>() {
        return Ok(Arg::I64(v));
    }
    if let Ok(v) = item.extract::<u64>() {
        return Ok(Arg::Ptr(v));
    }
    Err(error(format!(
        "a kernel argument must be a Buffer, None, an int, a float or a tuple of ints, found {}",
        item.get_type().name()?
    )))
}

#[pymethods]
impl Device {
    /// Open GPU `ordinal`, caching compiled kernels in `cache_dir` (None: nothing on disk).
    #[new]
    #[pyo3(signature = (ordinal, cache_dir))]
    fn new(py: Python<'_>, ordinal: i32, cache_dir: Option<PathBuf>) -> PyResult<Self> {
        let inner = detached(py, || {
            riftco_cuda::Device::open(ordinal, CubinCache::new(cache_dir))
        })?;
        Ok(Device { inner })
    }

    #[getter]
    fn ordinal(&self) -> i32 {
        self.inner.ordinal()
    }
    #[getter]
    fn name(&self) -> String {
        self.inner.name().to_string()
    }
    /// The architecture kernels are compiled for (`sm_90`).
    #[getter]
    fn arch(&self) -> String {
        self.inner.arch().to_string()
    }
    #[getter]
    fn total_memory(&self) -> usize {
        self.inner.total_memory()
    }
    #[getter]
    fn cache_dir(&self) -> Option<PathBuf> {
        self.inner.cache().dir().map(|p| p.to_path_buf())
    }

    /// `(bytes in use, bytes cached)` of the memory pool.
    fn pool_stats(&self) -> (usize, usize) {
        self.inner.pool_stats()
    }

    /// `(modules loaded, compiled by NVRTC, read from the disk cache)`.
    fn cache_stats(&self) -> (usize, u64, u64) {
        self.inner.cache_stats()
    }

    /// Compile (or read from the cache) and load every kernel module now.
    fn load_all(&self, py: Python<'_>) -> PyResult<()> {
        let d = self.inner.clone();
        detached(py, move || d.load_all())
    }

    /// Wait for everything enqueued so far.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let d = self.inner.clone();
        detached(py, move || d.synchronize())
    }

    /// Give the pool's cached blocks back to the driver.
    fn trim(&self, py: Python<'_>) -> PyResult<()> {
        let d = self.inner.clone();
        detached(py, move || d.trim())
    }

    /// Uninitialized device memory of `nbytes` bytes holding `dtype`.
    fn alloc(&self, py: Python<'_>, nbytes: usize, dtype: &str) -> PyResult<Buffer> {
        let d = self.inner.clone();
        let b = detached(py, move || d.alloc(nbytes))?;
        Ok(self.buffer(b, dtype))
    }

    /// Device memory holding `data` (the bytes of an array of `dtype`).
    fn upload(
        &self,
        py: Python<'_>,
        data: PyReadonlyArray1<'_, u8>,
        dtype: &str,
    ) -> PyResult<Buffer> {
        let bytes = data.as_slice().map_err(|e| error(e.to_string()))?;
        let d = self.inner.clone();
        let b = detached(py, move || d.upload(bytes))?;
        Ok(self.buffer(b, dtype))
    }

    /// `nbytes` bytes of `src` from `offset`, as uint8 (waits for the stream).
    fn download<'py>(
        &self,
        py: Python<'py>,
        src: &Buffer,
        offset: usize,
        nbytes: usize,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let d = self.inner.clone();
        let s = src.inner.clone();
        let out = detached(py, move || d.download(&s, offset, nbytes))?;
        Ok(out.into_pyarray(py))
    }

    /// Enqueue a copy of `nbytes` bytes from `src` at `src_offset` to `dst` at `dst_offset`.
    fn copy(
        &self,
        py: Python<'_>,
        dst: &Buffer,
        dst_offset: usize,
        src: &Buffer,
        src_offset: usize,
        nbytes: usize,
    ) -> PyResult<()> {
        let (d, a, b) = (self.inner.clone(), dst.inner.clone(), src.inner.clone());
        detached(py, move || d.copy(&a, dst_offset, &b, src_offset, nbytes))
    }

    /// Enqueue writing the bytes `data` into `dst` at `offset` (a static buffer's new
    /// contents, e.g. a decode step's indices).
    fn write(
        &self,
        py: Python<'_>,
        dst: &Buffer,
        offset: usize,
        data: PyReadonlyArray1<'_, u8>,
    ) -> PyResult<()> {
        let bytes = data.as_slice().map_err(|e| error(e.to_string()))?;
        let (d, a) = (self.inner.clone(), dst.inner.clone());
        detached(py, move || d.write(&a, offset, bytes))
    }

    /// Start capturing the stream's launches into a graph.
    fn begin_capture(&self, py: Python<'_>) -> PyResult<()> {
        let d = self.inner.clone();
        detached(py, move || d.begin_capture())
    }

    /// Stop capturing: the instantiated graph.
    fn end_capture(&self, py: Python<'_>) -> PyResult<decode::Graph> {
        let d = self.inner.clone();
        let g = detached(py, move || d.end_capture())?;
        Ok(decode::Graph { inner: Arc::new(g) })
    }

    /// Enqueue one replay of `graph`.
    fn graph_launch(&self, py: Python<'_>, graph: &decode::Graph) -> PyResult<()> {
        let (d, g) = (self.inner.clone(), graph.inner.clone());
        detached(py, move || d.graph_launch(&g))
    }

    /// An event recorded on the stream after everything enqueued so far.
    fn record_event(&self, py: Python<'_>) -> PyResult<Event> {
        let d = self.inner.clone();
        let e = detached(py, move || d.record_event())?;
        Ok(Event { inner: Arc::new(e) })
    }

    /// Enqueue zeroing `dst`.
    fn zero(&self, py: Python<'_>, dst: &Buffer) -> PyResult<()> {
        let (d, a) = (self.inner.clone(), dst.inner.clone());
        detached(py, move || d.zero(&a))
    }

    /// Enqueue `module::kernel` over `grid` blocks of `block` threads.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (module, kernel, grid, block, shared_bytes, args))]
    fn launch(
        &self,
        py: Python<'_>,
        module: &str,
        kernel: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &Bound<'_, PyList>,
    ) -> PyResult<()> {
        let args: Vec<Arg> = args.iter().map(|a| argument(&a)).collect::<PyResult<_>>()?;
        let d = self.inner.clone();
        let (module, kernel) = (module.to_string(), kernel.to_string());
        detached(py, move || {
            d.launch(&module, &kernel, grid, block, shared_bytes, &args)
        })
    }

    /// Enqueue a batched column-major product `c[m, n] = op(a)[m, k] op(b)[k, n]`
    /// (cuBLAS's convention); operands `(buffer, element offset, ld, batch stride,
    /// transposed)`, `element` is `float32` or `bfloat16`, `c` float32. `compute`
    /// `"bfloat16"` multiplies float32 operands as their bfloat16 roundings
    /// (`CUBLAS_COMPUTE_32F_FAST_16BF`); `"float32"` (the default) as they are.
    /// `accumulate` adds the product to `c` (`beta = 1`) instead of overwriting it.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (element, m, n, k, a, b, c, batch, compute="float32", accumulate=false))]
    fn gemm(
        &self,
        py: Python<'_>,
        element: &str,
        m: i64,
        n: i64,
        k: i64,
        a: (PyRef<'_, Buffer>, usize, i64, i64, bool),
        b: (PyRef<'_, Buffer>, usize, i64, i64, bool),
        c: (PyRef<'_, Buffer>, usize, i64, i64, bool),
        batch: i64,
        compute: &str,
        accumulate: bool,
    ) -> PyResult<()> {
        let compute = match compute {
            "float32" => Compute::F32,
            "bfloat16" => Compute::Bf16Products,
            other => {
                return Err(error(format!(
                    "gemm: expected a float32 or bfloat16 compute type, found {other}"
                )))
            }
        };
        let element = match element {
            "float32" => Element::F32,
            "bfloat16" => Element::Bf16,
            other => {
                return Err(error(format!(
                    "gemm: expected float32 or bfloat16 operands, found {other}"
                )))
            }
        };
        let d = self.inner.clone();
        let (ab, bb, cb) = (a.0.inner.clone(), b.0.inner.clone(), c.0.inner.clone());
        let (a, b, c) = (
            (a.1, a.2, a.3, a.4),
            (b.1, b.2, b.3, b.4),
            (c.1, c.2, c.3, c.4),
        );
        detached(py, move || {
            fn op(buf: &riftco_cuda::Buffer, o: (usize, i64, i64, bool)) -> Operand<'_> {
                Operand {
                    buffer: buf,
                    offset: o.0,
                    ld: o.1,
                    stride: o.2,
                    transpose: o.3,
                }
            }
            blas::gemm_compute(
                &d,
                element,
                compute,
                m,
                n,
                k,
                op(&ab, a),
                op(&bb, b),
                op(&cb, c),
                batch,
                accumulate,
            )
        })
    }

    /// Enqueue one column-major product `c[m, n] = op(a)[m, k] op(b)[k, n]` through
    /// cuBLASLt with a fused epilogue: `"none"`, `"bias"` (`c += bias[m]` after the
    /// float32 sums), `"bgrada"` (`bias[i] = sum_k op(a)[i, k]`) or `"bgradb"`
    /// (`bias[j] = sum_k op(b)[k, j]`); operands `(buffer, element offset, ld,
    /// transposed)`, `bias` `(buffer, element offset)` float32. The algorithm of a
    /// shape is chosen once and never splits `k` (riftco_cuda::cublaslt). `compute`
    /// `"bfloat16"` multiplies float32 operands as their bfloat16 roundings.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (element, m, n, k, a, b, c, epilogue, bias=None, compute="float32"))]
    fn gemm_epilogue(
        &self,
        py: Python<'_>,
        element: &str,
        m: i64,
        n: i64,
        k: i64,
        a: (PyRef<'_, Buffer>, usize, i64, bool),
        b: (PyRef<'_, Buffer>, usize, i64, bool),
        c: (PyRef<'_, Buffer>, usize, i64, bool),
        epilogue: &str,
        bias: Option<(PyRef<'_, Buffer>, usize)>,
        compute: &str,
    ) -> PyResult<()> {
        let compute = match compute {
            "float32" => Compute::F32,
            "bfloat16" => Compute::Bf16Products,
            other => {
                return Err(error(format!(
                    "gemm_epilogue: expected a float32 or bfloat16 compute dtype, found {other}"
                )))
            }
        };
        let element = match element {
            "float32" => Element::F32,
            "bfloat16" => Element::Bf16,
            other => {
                return Err(error(format!(
                    "gemm_epilogue: expected float32 or bfloat16 operands, found {other}"
                )))
            }
        };
        let epilogue = Epilogue::parse(epilogue).map_err(|e| error(e.0))?;
        let d = self.inner.clone();
        let (ab, bb, cb) = (a.0.inner.clone(), b.0.inner.clone(), c.0.inner.clone());
        let (a, b, c) = ((a.1, a.2, a.3), (b.1, b.2, b.3), (c.1, c.2, c.3));
        let bias = bias.map(|(buf, offset)| (buf.inner.clone(), offset));
        detached(py, move || {
            fn op(buf: &riftco_cuda::Buffer, o: (usize, i64, bool)) -> Operand<'_> {
                Operand {
                    buffer: buf,
                    offset: o.0,
                    ld: o.1,
                    stride: 0,
                    transpose: o.2,
                }
            }
            cublaslt::gemm_epilogue_compute(
                &d,
                element,
                compute,
                m,
                n,
                k,
                op(&ab, a),
                op(&bb, b),
                op(&cb, c),
                epilogue,
                bias.as_ref().map(|(buf, offset)| (&**buf, *offset)),
            )
        })
    }
}

/// `[(library stem, opens, file names dlopen tries)]` for libcuda, libnvrtc,
/// libcublas and libcublasLt, asked exactly as cudarc will (never panics).
#[pyfunction]
fn probe_libraries(py: Python<'_>) -> Vec<(String, bool, Vec<String>)> {
    py.detach(|| {
        Library::ALL
            .iter()
            .map(|l| (l.stem().to_string(), l.present(), l.candidates()))
            .collect()
    })
}

/// The number of GPUs the driver sees (raises when the driver is missing).
#[pyfunction]
fn device_count(py: Python<'_>) -> PyResult<usize> {
    detached(py, riftco_cuda::device_count)
}

/// NVRTC's version, `"major.minor"` (raises when libnvrtc cannot be opened).
#[pyfunction]
fn nvrtc_version(py: Python<'_>) -> PyResult<String> {
    detached(py, nvrtc::version)
}

/// The architectures this NVRTC compiles for (`["sm_75", ..., "sm_120"]`).
#[pyfunction]
fn nvrtc_archs(py: Python<'_>) -> PyResult<Vec<String>> {
    detached(py, nvrtc::supported_archs)
}

/// The kernel modules, in order.
#[pyfunction]
fn kernel_modules() -> Vec<&'static str> {
    kernels::modules().collect()
}

/// The text NVRTC compiles for `module` (the shared header, then its source).
#[pyfunction]
fn program_text(module: &str) -> PyResult<String> {
    kernels::program_text(module).map_err(|e| error(e.0))
}

/// Compile `module` for `arch` with the options the device uses: `(cubin, log)`.
#[pyfunction]
fn compile_module<'py>(
    py: Python<'py>,
    module: &str,
    arch: &str,
) -> PyResult<(Bound<'py, PyBytes>, String)> {
    let text = program_text(module)?;
    let (module, arch) = (module.to_string(), arch.to_string());
    let out = detached(py, move || nvrtc::compile(&text, &module, &arch))?;
    Ok((PyBytes::new(py, &out.cubin), out.log))
}

/// Compile any CUDA C `text` (named `name` in messages) for `arch`: `(cubin, log)`.
#[pyfunction]
fn compile_source<'py>(
    py: Python<'py>,
    text: String,
    name: String,
    arch: String,
) -> PyResult<(Bound<'py, PyBytes>, String)> {
    let out = detached(py, move || nvrtc::compile(&text, &name, &arch))?;
    Ok((PyBytes::new(py, &out.cubin), out.log))
}

/// The disk-cache key of `module` compiled for `arch` by NVRTC `nvrtc_version`.
#[pyfunction]
fn cache_key(module: &str, arch: &str, nvrtc_version: &str) -> PyResult<String> {
    let text = program_text(module)?;
    Ok(kernels::cache_key(
        &text,
        arch,
        nvrtc_version,
        nvrtc::OPTIONS,
    ))
}

/// The default CUBIN cache folder (`RIFTCO_CUDA_CACHE`, else under `~/.cache`).
#[pyfunction]
fn default_cache_dir() -> Option<PathBuf> {
    kernels::default_cache_dir()
}

/// The build id that the Python side and the wheelhouse check, and its marker.
pub const BUILD_ID: &str = env!("RIFTCO_BUILD_ID");
pub const BUILD_ID_MARKER: &str = env!("RIFTCO_BUILD_MARKER");

#[pymodule(name = "_native")]
fn riftco_backend_cuda_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("BUILD_ID", BUILD_ID)?;
    m.add("BUILD_ID_MARKER", BUILD_ID_MARKER)?;
    m.add("NVRTC_OPTIONS", nvrtc::OPTIONS.to_vec())?;
    m.add_class::<Device>()?;
    m.add_class::<Buffer>()?;
    m.add_class::<decode::Graph>()?;
    m.add_class::<Event>()?;
    m.add_function(wrap_pyfunction!(probe_libraries, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(nvrtc_version, m)?)?;
    m.add_function(wrap_pyfunction!(nvrtc_archs, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_modules, m)?)?;
    m.add_function(wrap_pyfunction!(program_text, m)?)?;
    m.add_function(wrap_pyfunction!(compile_module, m)?)?;
    m.add_function(wrap_pyfunction!(compile_source, m)?)?;
    m.add_function(wrap_pyfunction!(cache_key, m)?)?;
    m.add_function(wrap_pyfunction!(default_cache_dir, m)?)
}
