//! libriftco: the versioned C ABI of the Riftco engine. See README.md for the interface.

pub mod api;
pub mod error;
pub mod gguf;
pub mod handle;
pub mod json;
pub mod model;
pub mod rift;
pub mod sampler;
pub mod session;
pub mod tensor;
pub mod tokenizer;

pub use error::{guard, set_last_error, Error, Status};
