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
    /// The blocks, even after a panic while another caller held them (the counts
    /// are updated together with the lists, so a poisoned lock still holds a
    /// consistent pool): no poisoned-mutex panic follows a panic.
    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        self.blocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A block of at least `bytes` (never managed memory).
    pub fn alloc(&self, bytes: usize) -> Result<(sys::CUdeviceptr, usize)> {
        let size = rounded(bytes);
        let mut b = self.lock();
        if let Some(ptr) = b.free.get_mut(&size).and_then(|v| v.pop()) {
            b.cached_bytes -= size;
            b.in_use_bytes += size;
            return Ok((ptr, size));
        }
        // SAFETY: a plain device allocation in the current context.
        let ptr = match unsafe { result::malloc_sync(size) } {
            Ok(p) => p,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                // Out of memory: wait for the stream (cached blocks may still be read
                // by enqueued kernels), give the cached blocks back, try once more.
                result::ctx::synchronize()?;
                let cached = b.cached_bytes;
                Self::release(&mut b)?;
                unsafe { result::malloc_sync(size) }.map_err(|e| {
                    Error(format!(
                        "out of device memory: could not allocate {size} bytes ({} in use, \
                         {cached} cached blocks given back first): {}",
                        b.in_use_bytes,
                        Error::from(e)
                    ))
                })?
            }
            Err(e) => {
                return Err(Error(format!(
                    "could not allocate {size} bytes of device memory: {}",
                    Error::from(e)
                )))
            }
        };
        b.in_use_bytes += size;
        Ok((ptr, size))
    }

    /// Return a block taken with [`Pool::alloc`] (its rounded size).
    pub fn free(&self, ptr: sys::CUdeviceptr, size: usize) {
        let mut b = self.lock();
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
        Self::release(&mut self.lock())
    }

    pub fn stats(&self) -> PoolStats {
        let b = self.lock();
        (b.in_use_bytes, b.cached_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::{rounded, Pool};

    #[test]
    fn a_panic_while_the_pool_is_held_does_not_poison_it() {
        let pool = Pool::default();
        let held = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = pool.lock();
            panic!("while holding the pool");
        }));
        assert!(held.is_err());
        assert!(pool.blocks.is_poisoned());
        assert_eq!(pool.stats(), (0, 0));
        pool.trim().unwrap(); // nothing cached: no driver call
        assert_eq!(pool.stats(), (0, 0));
    }

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
