//! The one error type of the crate: a message saying what failed and why.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// An error whose message is `msg`.
pub fn error(msg: impl Into<String>) -> Error {
    Error(msg.into())
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        let name = e.error_name().map(|c| c.to_string_lossy().into_owned());
        let text = e.error_string().map(|c| c.to_string_lossy().into_owned());
        match (name, text) {
            (Ok(n), Ok(t)) => Error(format!("CUDA driver error {n}: {t}")),
            _ => Error(format!("CUDA driver error {:?}", e.0)),
        }
    }
}
