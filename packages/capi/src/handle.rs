//! Opaque handles with a type tag checked on every call.
//!
//! A handle given to C is a `Box<Slot<T>>` whose first field is a 64-bit tag naming its type; the
//! C-visible type (`RiftcoModel`, `RiftcoSession`, ...) is an empty Rust struct that cbindgen emits
//! as an incomplete `typedef struct X X;`. Each of them implements [`Handle`]:
//!
//! ```ignore
//! pub struct RiftcoThing { _opaque: [u8; 0] }
//! unsafe impl Handle for RiftcoThing { type Inner = Thing; const TAG: u64 = tag(b"thing"); const NAME: &'static str = "RiftcoThing"; }
//! let ptr: *mut RiftcoThing = handle::new(thing);
//! let thing: &Thing = handle::get::<RiftcoThing>(ptr)?;   // NULL -> NullHandle, other tag -> WrongHandle
//! handle::free::<RiftcoThing>(ptr)?;                      // tag set to DEAD before the memory is released
//! ```
//!
//! Passing a handle of another libriftco type is detected (all slots start with the tag). Passing
//! a freed handle is detected only while its memory has not been reused; passing arbitrary
//! memory is undefined behaviour, as in any C library.

use crate::error::{Error, Result, Status};

/// Tag stored in a slot whose handle has been freed.
pub const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// A tag from a short ASCII name ("RIFT" + up to 4 bytes), distinct per handle type.
pub const fn tag(name: &[u8]) -> u64 {
    let mut value: u64 = 0x5249_4654_0000_0000; // "RIFT"
    let mut i = 0;
    while i < name.len() && i < 4 {
        value |= (name[i] as u64) << (8 * (3 - i));
        i += 1;
    }
    value
}

/// # Safety
/// `TAG` must be unique among the crate's handle types.
pub unsafe trait Handle {
    type Inner;
    const TAG: u64;
    const NAME: &'static str;
}

#[repr(C)]
struct Slot<T> {
    tag: u64,
    value: T,
}

/// Box `value` and return it as an opaque handle pointer.
pub fn new<H: Handle>(value: H::Inner) -> *mut H {
    Box::into_raw(Box::new(Slot { tag: H::TAG, value })) as *mut H
}

unsafe fn check<H: Handle>(ptr: *const H) -> Result<*mut Slot<H::Inner>> {
    if ptr.is_null() {
        return Err(Error::null(&format!("the {} handle", H::NAME)));
    }
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<u64>()) {
        return Err(Error::new(
            Status::WrongHandle,
            format!("expected a {} handle, found a misaligned pointer", H::NAME),
        ));
    }
    let tag = *(ptr as *const u64);
    if tag != H::TAG {
        let found = if tag == DEAD {
            "a freed handle".to_string()
        } else {
            describe(tag)
        };
        return Err(Error::new(
            Status::WrongHandle,
            format!("expected a {} handle, found {found}", H::NAME),
        ));
    }
    Ok(ptr as *mut Slot<H::Inner>)
}

fn describe(tag: u64) -> String {
    if tag >> 32 == 0x5249_4654 {
        let name: String = (0..4)
            .map(|i| ((tag >> (8 * (3 - i))) & 0xff) as u8)
            .filter(|&b| b != 0)
            .map(|b| b as char)
            .collect();
        format!("a handle of kind '{name}'")
    } else {
        "a pointer that is not a libriftco handle".to_string()
    }
}

/// Borrow the value behind a handle.
///
/// # Safety
/// `ptr` must be NULL or a pointer returned by [`new`] (of any handle type) not yet freed.
pub unsafe fn get<'a, H: Handle>(ptr: *const H) -> Result<&'a H::Inner> {
    Ok(&(*check(ptr)?).value)
}

/// Borrow the value behind a handle mutably.
///
/// # Safety
/// As [`get`]; the caller must not use the handle from another thread at the same time.
pub unsafe fn get_mut<'a, H: Handle>(ptr: *mut H) -> Result<&'a mut H::Inner> {
    Ok(&mut (*check(ptr)?).value)
}

/// Free a handle. NULL is accepted (a no-op), as `free(NULL)` is.
///
/// # Safety
/// `ptr` must be NULL or a live pointer returned by [`new`].
pub unsafe fn free<H: Handle>(ptr: *mut H) -> Result<()> {
    if ptr.is_null() {
        return Ok(());
    }
    let slot = check(ptr)?;
    (*slot).tag = DEAD;
    let boxed = Box::from_raw(slot);
    // Drop the value but keep the tag readable as DEAD until the allocator reuses the memory.
    drop(boxed);
    Ok(())
}
