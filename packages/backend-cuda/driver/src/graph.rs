//! CUDA graphs: the kernels a decode step enqueues, captured once from the stream
//! and replayed with one launch. Capture records launches instead of running them
//! (`CU_STREAM_CAPTURE_MODE_RELAXED`, so a module loaded on first use during the
//! capture is allowed); the graph's kernels read the same device addresses every
//! replay, so the buffers they name must outlive it (the decode plan's static ones)
//! and new inputs are written into those buffers before each launch ([`Device::write`]).

use std::sync::Arc;

use cudarc::driver::{result, sys};

use crate::{error, Buffer, Device, Error, Result};

/// An instantiated graph of one device, destroyed on drop.
pub struct Graph {
    device: Arc<Device>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    nodes: usize,
}

// SAFETY: graph handles are driver objects usable from any thread with the context
// current (every call binds it first).
unsafe impl Send for Graph {}
unsafe impl Sync for Graph {}

impl Graph {
    /// The kernel (and copy) nodes captured.
    pub fn nodes(&self) -> usize {
        self.nodes
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: handles created by `end_capture`, destroyed once.
            unsafe {
                let _ = sys::cuGraphExecDestroy(self.exec);
                let _ = sys::cuGraphDestroy(self.graph);
            }
        }
    }
}

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    r.result()
        .map_err(|e| error(format!("{what}: {}", Error::from(e))))
}

impl Device {
    /// Start recording the stream's work (nothing runs until the graph is launched).
    pub fn begin_capture(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: the device's own stream.
        check(
            unsafe {
                sys::cuStreamBeginCapture_v2(
                    self.raw_stream(),
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                )
            },
            "cuStreamBeginCapture",
        )
    }

    /// Stop recording and instantiate what was recorded.
    pub fn end_capture(self: &Arc<Self>) -> Result<Graph> {
        self.bind()?;
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: out-pointers; the stream is capturing (else the driver says so).
        check(
            unsafe { sys::cuStreamEndCapture(self.raw_stream(), &mut graph) },
            "cuStreamEndCapture",
        )?;
        let mut nodes: usize = 0;
        // SAFETY: a graph just captured; a null node array asks for the count.
        check(
            unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes) },
            "cuGraphGetNodes",
        )?;
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: a captured graph.
        let made = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        if let Err(e) = check(made, "cuGraphInstantiate") {
            // SAFETY: the graph is not used again.
            unsafe {
                let _ = sys::cuGraphDestroy(graph);
            }
            return Err(e);
        }
        Ok(Graph {
            device: self.clone(),
            graph,
            exec,
            nodes,
        })
    }

    /// Enqueue one replay of `graph` on the stream.
    pub fn graph_launch(&self, graph: &Graph) -> Result<()> {
        if !std::ptr::eq(Arc::as_ptr(&graph.device), self) {
            return Err(error("a graph launched on another device than its own"));
        }
        self.bind()?;
        // SAFETY: an instantiated graph of this device.
        check(
            unsafe { sys::cuGraphLaunch(graph.exec, self.raw_stream()) },
            "cuGraphLaunch",
        )
    }

    /// Enqueue a copy of `data` into `dst` at `offset` bytes (the driver stages the
    /// pageable bytes before this returns).
    pub fn write(&self, dst: &Buffer, offset: usize, data: &[u8]) -> Result<()> {
        if offset + data.len() > dst.bytes() {
            return Err(error(format!(
                "writing {} bytes at {offset} of a {}-byte buffer",
                data.len(),
                dst.bytes()
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the range is inside `dst`.
        unsafe { result::memcpy_htod_async(dst.ptr() + offset as u64, data, self.raw_stream()) }
            .map_err(Error::from)
    }
}
