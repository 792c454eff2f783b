//! `riftco-pjrt`: run StableHLO programs through any PJRT C API plugin.
//!
//! - [`ffi`]: the C API's structs, written out by hand, with `struct_size`
//!   handshakes and the function table checked against the plugin's version.
//! - [`Plugin`], [`Client`], [`Buffer`], [`Executable`]: safe owners of the
//!   plugin's handles (errors and events are turned into [`Error`]s).
//! - [`hlo`]: a checked writer of StableHLO text; [`programs`]: the program
//!   of each riftco backend capability for given shapes.
//! - [`Runtime`]: a client (created on first use, with named options) plus a
//!   compile cache keyed by program text and, with [`disk_cache`], a
//!   persistent one of serialized executables.
//!
//! No Python here: the PyO3 module of `riftco-backend-tpu` sits on top.

pub mod buffer;
pub mod cache;
pub mod client;
pub mod client_options;
pub mod disk_cache;
pub mod error;
pub mod executable;
pub mod ffi;
pub mod hlo;
pub mod options;
pub mod plugin;
pub mod programs;
pub mod runtime;
pub mod sha256;
pub mod types;

pub use buffer::Buffer;
pub use client::Client;
pub use client_options::{ClientOption, OptionValue, PluginKind};
pub use error::{Error, Result};
pub use executable::Executable;
pub use hlo::{Builder, Program, Value};
pub use options::CompileOptions;
pub use plugin::Plugin;
pub use runtime::{Runtime, RuntimeConfig};
pub use types::{ElementType, TensorType};
