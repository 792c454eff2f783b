//! `riftco-cuda`: the CUDA side of riftco-backend-cuda, with no Python in it.
//!
//! - [`libs`]: which of libcuda, libnvrtc, libcublas and libcublasLt the process
//!   can open, asked before cudarc touches them (a missing one panics there).
//! - [`kernels`]: the CUDA C sources (one module per file in `kernels/`), their
//!   cache keys (source, architecture, NVRTC version, options) and the on-disk
//!   CUBIN cache; [`nvrtc`] compiles them, no GPU needed.
//! - [`device`]: one GPU, its stream, its memory [`pool`], kernel launches, and
//!   [`blas`] matrix products, [`cublaslt`] products with fused epilogues;
//!   [`graph`]: stream capture into CUDA graphs.

pub mod blas;
pub mod cublaslt;
pub mod device;
pub mod error;
pub mod event;
pub mod graph;
pub mod kernels;
pub mod libs;
pub mod nvrtc;
pub mod pool;

pub use device::{device_count, Arg, Buffer, Device};
pub use error::{error, Error, Result};
pub use event::Event;
pub use graph::Graph;
