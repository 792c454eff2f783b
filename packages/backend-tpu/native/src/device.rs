//! `Device`: an opened PJRT plugin, its client (created on first use) and
//! the compile caches.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};
use riftco_pjrt::{ClientOption, OptionValue, Runtime, RuntimeConfig};

use crate::detached;

#[pyclass(frozen, module = "riftco.backends.tpu._native")]
pub struct Device {
    runtime: Arc<Runtime>,
}

impl Device {
    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.clone()
    }

    fn client<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&riftco_pjrt::Client) -> T + Send,
    ) -> PyResult<T> {
        let runtime = self.runtime.clone();
        detached(py, move || runtime.client().map(|c| f(c)))
    }
}

fn option_value(name: &str, value: &Bound<'_, PyAny>) -> PyResult<OptionValue> {
    // bool before int: Python's bools are ints.
    if value.is_instance_of::<PyBool>() {
        return Ok(OptionValue::Bool(value.extract()?));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(OptionValue::Int(value.extract()?));
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(OptionValue::Float(value.extract::<f64>()? as f32));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(OptionValue::Str(value.extract()?));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'_, PyAny>> = value.try_iter()?.collect::<PyResult<_>>()?;
        let mut ints = Vec::with_capacity(items.len());
        for item in items {
            if item.is_instance_of::<PyBool>() || !item.is_instance_of::<PyInt>() {
                return Err(PyTypeError::new_err(format!(
                    "PJRT client option {name}: expected a list of integers, found an item {}",
                    item.repr()?
                )));
            }
            ints.push(item.extract()?);
        }
        return Ok(OptionValue::IntList(ints));
    }
    Err(PyTypeError::new_err(format!(
        "PJRT client option {name}: expected a bool, int, float, str or list of ints, found {}",
        value.get_type().name()?
    )))
}

#[pymethods]
impl Device {
    /// Open the PJRT plugin library at `path` (once per process); the client is
    /// created, with `options`, on first use. `cache_dir` keeps compiled
    /// programs on disk (at most `cache_max_bytes`); `deterministic` asks XLA
    /// for deterministic ops on GPUs.
    #[new]
    #[pyo3(signature = (path, options=None, *, deterministic=true, cache_dir=None, cache_max_bytes=1073741824))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        options: Option<Vec<(String, Bound<'_, PyAny>)>>,
        deterministic: bool,
        cache_dir: Option<PathBuf>,
        cache_max_bytes: u64,
    ) -> PyResult<Self> {
        let mut client_options = Vec::new();
        for (name, value) in options.unwrap_or_default() {
            let value = option_value(&name, &value)?;
            client_options.push(ClientOption::new(&name, value));
        }
        let config = RuntimeConfig {
            client_options,
            deterministic,
            disk_cache: cache_dir.map(|d| (d, cache_max_bytes)),
        };
        let runtime = detached(py, || Runtime::open_with(&path, config))?;
        Ok(Device {
            runtime: Arc::new(runtime),
        })
    }

    /// The platform name the plugin reports: `cpu`, `cuda`, `tpu`, ... (creates the client).
    #[getter]
    fn platform(&self, py: Python<'_>) -> PyResult<String> {
        self.client(py, |c| c.platform().to_string())
    }

    #[getter]
    fn platform_version(&self, py: Python<'_>) -> PyResult<String> {
        self.client(py, |c| c.platform_version().to_string())
    }

    #[getter]
    fn device_kind(&self, py: Python<'_>) -> PyResult<String> {
        self.client(py, |c| c.device_kind().to_string())
    }

    /// The device programs run on, as the plugin names it (`CpuDevice(id=0)`).
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<String> {
        self.client(py, |c| c.device_text().to_string())
    }

    #[getter]
    fn device_count(&self, py: Python<'_>) -> PyResult<usize> {
        self.client(py, |c| c.device_count())
    }

    /// True when the plugin computes on the host's CPU cores (from the plugin's
    /// file name until the client exists; never creates it).
    #[getter]
    fn is_host(&self) -> bool {
        self.runtime.is_host()
    }

    /// `cpu`, `gpu`, `tpu` or `unknown`: what the plugin's file name says.
    #[getter]
    fn plugin_kind(&self) -> &'static str {
        self.runtime.kind().name()
    }

    /// True once the PJRT client exists (the first op, or a property that needs it).
    #[getter]
    fn client_created(&self) -> bool {
        self.runtime.client_created()
    }

    /// The client options, as `name=value` texts (the user's and the defaults).
    #[getter]
    fn client_options(&self) -> Vec<String> {
        self.runtime
            .client_options()
            .iter()
            .map(|o| o.to_string())
            .collect()
    }

    /// The serialized `CompileOptionsProto` every program is compiled with
    /// (creates the client: it depends on the platform).
    fn compile_options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let runtime = self.runtime.clone();
        let bytes = detached(py, move || runtime.compile_options()?.to_bytes())?;
        Ok(PyBytes::new(py, &bytes))
    }

    #[getter]
    fn plugin_path(&self) -> PathBuf {
        self.runtime.plugin().path().to_path_buf()
    }

    /// The (major, minor) PJRT C API version of the plugin.
    #[getter]
    fn api_version(&self) -> (i32, i32) {
        self.runtime.plugin().api_version()
    }

    /// The plugin's attributes (`xla_version`, `stablehlo_current_version`, ...).
    #[getter]
    fn attributes(&self) -> Vec<(String, String)> {
        self.runtime.plugin().attributes().to_vec()
    }

    /// `(cached programs, compiles, cache hits)` of the in-memory cache; a
    /// compile there may be a load from the disk cache.
    fn cache_stats(&self) -> (usize, u64, u64) {
        let s = self.runtime.cache_stats();
        (s.entries, s.compiles, s.hits)
    }

    /// The disk cache's folder, or None when it is off.
    #[getter]
    fn disk_cache_dir(&self) -> Option<PathBuf> {
        self.runtime.disk_cache().map(|(d, _)| d.to_path_buf())
    }

    /// `(hits, misses, stores, rejected, failed)` of the disk cache (zeros when it is off).
    fn disk_cache_stats(&self) -> (u64, u64, u64, u64, u64) {
        match self.runtime.disk_cache() {
            Some((_, s)) => (s.hits, s.misses, s.stores, s.rejected, s.failed),
            None => (0, 0, 0, 0, 0),
        }
    }

    fn clear_cache(&self) {
        self.runtime.clear_cache()
    }
}
