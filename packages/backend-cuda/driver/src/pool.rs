//! A caching pool of device memory: freed blocks wait, per rounded size, for the
//! next allocation of that size instead of going back to the driver. All work
//! is on the device's one stream, so a block freed by the host can be handed out
//! again at once: the kernels that used it were enqueued before any that reuse it.

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::driver::{result, sys};

use crate::{Error, Result};

/// Sizes are rounded up to a multiple of 512 bytes below 1 MiB and of 2 MiB above,
/// so that nearby sizes share blocks.
const SMALL_STEP: usize = 512;
const LARGE_STEP: usize = 2 << 20;

/// The size of the block that holds `bytes`.
pub fn rounded(bytes: usize) -> usize {
    let step = if bytes < (1 << 20) {
        SMALL_STEP
    } else {
        LARGE_STEP
    };
    bytes.div_ceil(step).max(1) * step
}

#[derive(Default)]
struct Blocks {
    free: HashMap<usize, Vec<sys::CUdeviceptr>>,
    cached_bytes: usize,
    in_use_bytes: usize,
}

/// The pool of one device (its context must be current when it is used).
#[derive(Default)]
pub struct Pool {
    blocks: Mutex<Blocks>,
}

/// `(bytes in use, bytes cached)`.
pub type PoolStats = (usize, usize);

impl Pool {
    /// A block of at least `bytes` (never managed memory).
    pub fn alloc(&self, bytes: usize) -> Result<(sys::CUdeviceptr, usize)> {
        let size = rounded(bytes);
        let mut b = self.blocks.lock().unwrap();
        if let Some(ptr) = b.free.get_mut(&size).and_then(|v| v.pop()) {
            b.cached_bytes -= size;
            b.in_use_bytes += size;
            return Ok((ptr, size));
        }
        // SAFETY: a plain device allocation in the current context.
        let ptr = match unsafe { result::malloc_sync(size) } {
            Ok(p) => p,
            Err(_) => {
                // Out of memory: give the cached blocks back and try once more.
                Self::release(&mut b)?;
                unsafe { result::malloc_sync(size) }.map_err(|e| {
                    Error(format!(
                        "could not allocate {size} bytes of device memory ({} in use): {}",
                        b.in_use_bytes,
                        Error::from(e)
                    ))
                })?
            }
        };
        b.in_use_bytes += size;
        Ok((ptr, size))
    }

    /// Return a block taken with [`Pool::alloc`] (its rounded size).
    pub fn free(&self, ptr: sys::CUdeviceptr, size: usize) {
        let mut b = self.blocks.lock().unwrap();
        b.in_use_bytes -= size;
        b.cached_bytes += size;
        b.free.entry(size).or_default().push(ptr);
    }

    fn release(b: &mut Blocks) -> Result<()> {
        for (_, ptrs) in b.free.drain() {
            for p in ptrs {
                // SAFETY: cached blocks are not referenced by any storage.
                unsafe { result::free_sync(p) }?;
            }
        }
        b.cached_bytes = 0;
        Ok(())
    }

    /// Give every cached block back to the driver.
    pub fn trim(&self) -> Result<()> {
        Self::release(&mut self.blocks.lock().unwrap())
    }

    pub fn stats(&self) -> PoolStats {
        let b = self.blocks.lock().unwrap();
        (b.in_use_bytes, b.cached_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::rounded;

    #[test]
    fn sizes_round_up_to_their_step() {
        assert_eq!(rounded(0), 512);
        assert_eq!(rounded(1), 512);
        assert_eq!(rounded(512), 512);
        assert_eq!(rounded(513), 1024);
        assert_eq!(rounded((1 << 20) + 1), 2 << 20);
        assert_eq!(rounded(5 << 20), 6 << 20);
    }
}
