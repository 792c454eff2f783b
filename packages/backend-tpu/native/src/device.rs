//! `Device`: an opened PJRT plugin, its client, and the compile cache.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use riftco_pjrt::programs::Target;
use riftco_pjrt::Runtime;

use crate::detached;

#[pyclass(frozen, module = "riftco.backends.tpu._native")]
pub struct Device {
    runtime: Arc<Runtime>,
    target: Target,
}

impl Device {
    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.clone()
    }

    pub fn target(&self) -> Target {
        self.target
    }
}

#[pymethods]
impl Device {
    /// Open the PJRT plugin library at `path` (once per process) and create a client.
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let runtime = detached(py, || Runtime::open(&path))?;
        let target = Target::for_platform(runtime.client().platform());
        Ok(Device {
            runtime: Arc::new(runtime),
            target,
        })
    }

    /// The platform name the plugin reports: `cpu`, `cuda`, `tpu`, ...
    #[getter]
    fn platform(&self) -> String {
        self.runtime.client().platform().to_string()
    }

    #[getter]
    fn platform_version(&self) -> String {
        self.runtime.client().platform_version().to_string()
    }

    #[getter]
    fn device_kind(&self) -> String {
        self.runtime.client().device_kind().to_string()
    }

    /// The device programs run on, as the plugin names it (`CpuDevice(id=0)`).
    #[getter]
    fn device(&self) -> String {
        self.runtime.client().device_text().to_string()
    }

    #[getter]
    fn device_count(&self) -> usize {
        self.runtime.client().device_count()
    }

    /// True when the plugin computes on the host's CPU cores.
    #[getter]
    fn is_host(&self) -> bool {
        self.runtime.client().is_host()
    }

    #[getter]
    fn plugin_path(&self) -> PathBuf {
        self.runtime.client().plugin().path().to_path_buf()
    }

    /// The (major, minor) PJRT C API version of the plugin.
    #[getter]
    fn api_version(&self) -> (i32, i32) {
        self.runtime.client().plugin().api_version()
    }

    /// The plugin's attributes (`xla_version`, `stablehlo_current_version`, ...).
    #[getter]
    fn attributes(&self) -> Vec<(String, String)> {
        self.runtime.client().plugin().attributes().to_vec()
    }

    /// `(cached programs, compiles, cache hits)`.
    fn cache_stats(&self) -> (usize, u64, u64) {
        let s = self.runtime.cache_stats();
        (s.entries, s.compiles, s.hits)
    }

    fn clear_cache(&self) {
        self.runtime.clear_cache()
    }
}
