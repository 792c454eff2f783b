//! One error type for everything that can go wrong between us and a plugin.

use std::fmt;

/// Why a call failed. Messages name the step, and for plugin errors the
/// status code the plugin gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The plugin library could not be opened, lacks `GetPjrtApi`, or speaks
    /// an API version we cannot use.
    Load(String),
    /// The plugin returned a `PJRT_Error` from `step`.
    Plugin {
        step: &'static str,
        code: i32,
        message: String,
    },
    /// Arguments we refuse before they reach the plugin (XLA aborts the whole
    /// process on some malformed inputs, so shapes are checked here first).
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Names of the `PJRT_Error_Code` values (absl status codes).
pub fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "UNKNOWN_CODE",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Load(msg) | Error::Invalid(msg) => f.write_str(msg),
            Error::Plugin {
                step,
                code,
                message,
            } => {
                write!(f, "{step} failed ({}): {message}", code_name(*code))
            }
        }
    }
}

impl std::error::Error for Error {}

/// `Err(Error::Invalid(..))` from a format string.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => {
        Err($crate::Error::Invalid(format!($($arg)*)))
    };
}
