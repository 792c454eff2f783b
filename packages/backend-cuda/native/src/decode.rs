//! Bindings for whole-step decoding (riftco.backends.cuda.ops.decode): CUDA graphs
//! captured from the device's stream and writes into static buffers.

use std::sync::Arc;

use pyo3::prelude::*;

/// A captured, instantiated CUDA graph (the kernels of one decode step's shape).
#[pyclass(frozen, module = "riftco.backends.cuda._native")]
pub struct Graph {
    pub(crate) inner: Arc<riftco_cuda::Graph>,
}

#[pymethods]
impl Graph {
    /// The nodes captured.
    #[getter]
    fn nodes(&self) -> usize {
        self.inner.nodes()
    }
}
