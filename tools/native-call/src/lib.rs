//! The one way a riftco binding crate runs Rust code for Python: without the
//! GIL, with the code's error and any panic turned into the package's own
//! exception (a panic never unwinds into Python).

use std::any::Any;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::{PyErr, PyResult, Python};

/// The message a panic carried (`panic!` with a literal or a formatted string).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Run `f` without the GIL. Its error becomes `raise(error.to_string())`; a
/// panic becomes `raise("internal error in {what}: {message}")`.
pub fn detached<T: Send, E: Display + Send>(
    py: Python<'_>,
    what: &str,
    raise: impl FnOnce(String) -> PyErr,
    f: impl FnOnce() -> Result<T, E> + Send,
) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(raise(e.to_string())),
        Err(panic) => Err(raise(format!(
            "internal error in {what}: {}",
            panic_message(panic.as_ref())
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::panic_message;
    use std::panic::catch_unwind;

    #[test]
    fn panic_messages_are_recovered() {
        let literal = catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(literal.as_ref()), "plain");
        let formatted = catch_unwind(|| panic!("index {} of {}", 3, 2)).unwrap_err();
        assert_eq!(panic_message(formatted.as_ref()), "index 3 of 2");
        let other = catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(panic_message(other.as_ref()), "unknown panic");
    }
}
