//! Typed errors: each says what was expected, what was found and where.

use std::fmt;

/// What kind of failure an [`Error`] is; the C ABI maps each to a status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The operating system refused to read a file (missing, permission, a folder).
    Io,
    /// A file or document that is not a valid tokenizer (malformed JSON, a bad field).
    Format,
    /// A version or method this build does not read (a newer riftco-text's state).
    Unsupported,
    /// A size over a documented bound (file bytes, ids, merges, token length).
    Limit,
    /// Input the tokenizer cannot take: text that is not UTF-8, a byte outside a byte
    /// vocabulary, an id outside the vocabulary, a chat message with an unknown role.
    Invalid,
}

/// A typed failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn format(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Format, message)
    }
    pub fn limit(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Limit, message)
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }
    /// The same error with `prefix: ` before its message.
    pub fn context(mut self, prefix: &str) -> Self {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
