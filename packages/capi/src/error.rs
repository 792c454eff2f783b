//! Status codes, the thread-local last-error message and the panic guard of the C ABI.
//!
//! Every exported function of libriftco has the shape
//!
//! ```ignore
//! #[no_mangle]
//! pub unsafe extern "C" fn riftco_thing_do(handle: *mut RiftcoThing, out: *mut u32) -> Status {
//!     guard(|| {
//!         let thing = handle::get::<RiftcoThing>(handle)?;   // NULL / wrong tag -> Err
//!         let out = out_ptr(out, "out")?;                     // NULL out pointer -> Err
//!         *out = thing.value()?;
//!         Ok(())
//!     })
//! }
//! ```
//!
//! * `guard` runs the closure under `catch_unwind`: a panic becomes `Status::Internal` with the
//!   panic message as the last error, so no unwind ever crosses the boundary. On `Ok(())` it returns
//!   `Status::Ok` and clears the last error; on `Err(e)` it stores `e.message` as this thread's
//!   last error and returns `e.status`.
//! * Build errors with `Error::new(Status::X, msg)` or the shorthands (`Error::invalid`,
//!   `Error::format`, ...). Messages name what was expected and what was found, e.g.
//!   `"riftco_tokenizer_encode: text is not UTF-8 (invalid byte 0xff at offset 3)"`.
//! * `riftco_last_error()` returns this thread's message (never NULL; "" when the last call
//!   succeeded). The pointer stays valid until the next libriftco call on the same thread.
//! * Opaque handles with type tags live in `handle.rs` (`handle::new`, `get`, `get_mut`, `free`).
//!
//! Status values are part of the ABI: new codes are appended (minor version bump), never
//! renumbered.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The result of every libriftco call. `RIFTCO_STATUS_OK` (0) is success; any other value is an
/// error whose message `riftco_last_error()` returns on the same thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// An argument is out of its range or inconsistent with another (shape, dtype, length, config).
    InvalidArgument = 1,
    /// A required pointer (handle, input or output) is NULL.
    NullHandle = 2,
    /// A handle is not of the type the function takes (or was already freed, where detectable).
    WrongHandle = 3,
    /// The operating system refused a file operation (missing file, permission, short read).
    Io = 4,
    /// A file or buffer is not in the expected format (bad magic, truncated, malformed header).
    Format = 5,
    /// A checksum or content identity does not match the recorded one.
    Checksum = 6,
    /// Well-formed input that this build does not support (tensor type, architecture, version).
    Unsupported = 7,
    /// A size or count is over a documented limit (header size, tensor count, context length).
    Limit = 8,
    /// An allocation failed.
    OutOfMemory = 9,
    /// The call is not valid in the object's current state (e.g. step before prefill).
    State = 10,
    /// A bug in libriftco (a caught panic or a broken invariant); please report it.
    Internal = 11,
}

impl Status {
    /// Stable lower-case name of the status (`"ok"`, `"invalid_argument"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::InvalidArgument => "invalid_argument",
            Status::NullHandle => "null_handle",
            Status::WrongHandle => "wrong_handle",
            Status::Io => "io",
            Status::Format => "format",
            Status::Checksum => "checksum",
            Status::Unsupported => "unsupported",
            Status::Limit => "limit",
            Status::OutOfMemory => "out_of_memory",
            Status::State => "state",
            Status::Internal => "internal",
        }
    }
}

/// A typed failure: the status returned to C and the message kept as the last error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Error {
            status,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Status::InvalidArgument, message)
    }
    pub fn null(what: &str) -> Self {
        Self::new(
            Status::NullHandle,
            format!("{what} is NULL; expected a valid pointer"),
        )
    }
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(Status::Io, message)
    }
    pub fn format(message: impl Into<String>) -> Self {
        Self::new(Status::Format, message)
    }
    pub fn checksum(message: impl Into<String>) -> Self {
        Self::new(Status::Checksum, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(Status::Unsupported, message)
    }
    pub fn limit(message: impl Into<String>) -> Self {
        Self::new(Status::Limit, message)
    }
    pub fn state(message: impl Into<String>) -> Self {
        Self::new(Status::State, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Status::Internal, message)
    }
    /// Prefix the message with context (`"loading model.rift: "` + message).
    pub fn context(mut self, prefix: &str) -> Self {
        self.message = format!("{prefix}: {}", self.message);
        self
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Store `message` as this thread's last error (interior NUL bytes are replaced by `?`).
pub fn set_last_error(message: &str) {
    let bytes: Vec<u8> = message
        .bytes()
        .map(|b| if b == 0 { b'?' } else { b })
        .collect();
    let text = CString::new(bytes).unwrap_or_default();
    LAST_ERROR.with(|cell| *cell.borrow_mut() = text);
}

/// Clear this thread's last error (what `guard` does on success).
pub fn clear_last_error() {
    LAST_ERROR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if !slot.as_bytes().is_empty() {
            *slot = CString::default();
        }
    });
}

/// A copy of this thread's last error message (for Rust-side tests).
pub fn last_error_message() -> String {
    LAST_ERROR.with(|cell| cell.borrow().to_string_lossy().into_owned())
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Run `body` so that nothing unwinds into C: Ok -> `Status::Ok` (last error cleared),
/// Err(e) -> `e.status` (last error = `e.message`), panic -> `Status::Internal`.
pub fn guard<F>(body: F) -> Status
where
    F: FnOnce() -> Result<()>,
{
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            clear_last_error();
            Status::Ok
        }
        Ok(Err(error)) => {
            set_last_error(&error.message);
            error.status
        }
        Err(payload) => {
            let text = panic_text(payload.as_ref());
            set_last_error(&format!("internal error (caught panic): {text}"));
            Status::Internal
        }
    }
}

/// Turn a caller's output pointer into a reference, refusing NULL (and misalignment).
///
/// # Safety
/// `ptr` must be NULL or point to writable memory for one `T`.
pub unsafe fn out_ptr<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T> {
    if ptr.is_null() {
        return Err(Error::null(what));
    }
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(Error::invalid(format!(
            "{what} is not aligned to {} bytes",
            std::mem::align_of::<T>()
        )));
    }
    Ok(&mut *ptr)
}

/// Borrow a caller's input array of `len` elements (NULL allowed only when `len == 0`).
///
/// # Safety
/// `ptr` must be NULL or point to `len` readable `T`s.
pub unsafe fn in_slice<'a, T>(ptr: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::null(what));
    }
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(Error::invalid(format!(
            "{what} is not aligned to {} bytes",
            std::mem::align_of::<T>()
        )));
    }
    Ok(std::slice::from_raw_parts(ptr, len))
}

/// Borrow a caller's output array of `len` elements (NULL allowed only when `len == 0`).
///
/// # Safety
/// `ptr` must be NULL or point to `len` writable `T`s.
pub unsafe fn out_slice<'a, T>(ptr: *mut T, len: usize, what: &str) -> Result<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Error::null(what));
    }
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(Error::invalid(format!(
            "{what} is not aligned to {} bytes",
            std::mem::align_of::<T>()
        )));
    }
    Ok(std::slice::from_raw_parts_mut(ptr, len))
}

/// Read a caller's NUL-terminated UTF-8 string.
///
/// # Safety
/// `ptr` must be NULL or a NUL-terminated string.
pub unsafe fn in_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(Error::null(what));
    }
    let bytes = std::ffi::CStr::from_ptr(ptr).to_bytes();
    std::str::from_utf8(bytes).map_err(|e| {
        Error::invalid(format!(
            "{what} is not UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })
}

/// This thread's last error message: never NULL, "" after a successful call. The pointer is
/// valid until the next libriftco call on this thread.
#[no_mangle]
pub extern "C" fn riftco_last_error() -> *const c_char {
    LAST_ERROR.with(|cell| cell.borrow().as_ptr())
}

/// The stable lower-case name of a status code ("ok", "invalid_argument", ...); a static string.
/// Unknown values give "unknown".
#[no_mangle]
pub extern "C" fn riftco_status_name(status: i32) -> *const c_char {
    let name: &'static [u8] = match status {
        0 => b"ok\0",
        1 => b"invalid_argument\0",
        2 => b"null_handle\0",
        3 => b"wrong_handle\0",
        4 => b"io\0",
        5 => b"format\0",
        6 => b"checksum\0",
        7 => b"unsupported\0",
        8 => b"limit\0",
        9 => b"out_of_memory\0",
        10 => b"state\0",
        11 => b"internal\0",
        _ => b"unknown\0",
    };
    name.as_ptr() as *const c_char
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_maps_ok_err_and_panic() {
        assert_eq!(guard(|| Ok(())), Status::Ok);
        assert_eq!(last_error_message(), "");
        assert_eq!(guard(|| Err(Error::format("bad magic"))), Status::Format);
        assert_eq!(last_error_message(), "bad magic");
        assert_eq!(guard(|| panic!("boom")), Status::Internal);
        assert!(last_error_message().contains("boom"));
        assert_eq!(guard(|| Ok(())), Status::Ok);
        assert_eq!(last_error_message(), "");
    }

    #[test]
    fn status_names_agree() {
        for s in [Status::Ok, Status::Format, Status::Internal, Status::State] {
            let c = unsafe { std::ffi::CStr::from_ptr(riftco_status_name(s as i32)) };
            assert_eq!(c.to_str().unwrap(), s.name());
        }
    }
}
