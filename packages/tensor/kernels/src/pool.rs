//! The kernels' own thread pool, so the thread count can be set at run time
//! (results do not depend on it) without touching rayon's global pool.

use std::sync::{Arc, OnceLock, RwLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

/// Elements per parallel piece for memory-bound elementwise kernels.
pub const CHUNK: usize = 1 << 15;
/// Below this many elements a kernel runs on the calling thread.
pub const PARALLEL_THRESHOLD: usize = 1 << 17;
/// Below this many multiply-adds a compute-bound kernel runs on the calling thread.
pub const PARALLEL_WORK: usize = 1 << 18;

static POOL: OnceLock<RwLock<Arc<ThreadPool>>> = OnceLock::new();

fn default_threads() -> usize {
    std::env::var("RIFTCO_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn build(threads: usize) -> Arc<ThreadPool> {
    let pool = ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("riftco-cpu-{i}"))
        .build()
        .expect("cannot start the riftco CPU thread pool");
    Arc::new(pool)
}

fn cell() -> &'static RwLock<Arc<ThreadPool>> {
    POOL.get_or_init(|| RwLock::new(build(default_threads())))
}

fn current() -> Arc<ThreadPool> {
    cell().read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Number of threads kernels use.
pub fn num_threads() -> usize {
    current().current_num_threads()
}

/// Replace the pool with one of `threads` threads (at least 1).
pub fn set_num_threads(threads: usize) {
    let pool = build(threads.max(1));
    *cell().write().unwrap_or_else(|e| e.into_inner()) = pool;
}

/// Run `f` inside the kernel pool.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    current().install(f)
}

/// Whether the AVX2 + FMA kernel versions may run here (see [`crate::isa`]).
#[inline]
pub fn has_avx2_fma() -> bool {
    crate::isa::current() >= crate::isa::Isa::Avx2
}

/// Whether `work` (of a kernel that needs at least `threshold` of it to gain
/// from threads) runs in parallel: only when there is more than one thread.
#[inline]
pub fn parallel(work: usize, threshold: usize) -> bool {
    work >= threshold && num_threads() > 1
}

/// Run `body` once per task, on the kernel threads when `parallel`. Each task
/// must write only what no other task touches, so the order does not matter.
pub fn for_each_task<T: Sync>(tasks: &[T], parallel: bool, body: impl Fn(&T) + Sync + Send) {
    use rayon::prelude::*;
    if parallel {
        install(|| tasks.par_iter().for_each(body));
    } else {
        tasks.iter().for_each(body);
    }
}

/// [`for_each_task`] over the tasks `0..tasks`.
pub fn for_each_index(tasks: usize, parallel: bool, body: impl Fn(usize) + Sync + Send) {
    use rayon::prelude::*;
    if parallel {
        install(|| (0..tasks).into_par_iter().for_each(body));
    } else {
        (0..tasks).for_each(body);
    }
}

/// A pointer into an output that parallel tasks share; each task writes only
/// elements no other task touches.
#[derive(Clone, Copy)]
pub(crate) struct Shared(*mut f32);

// SAFETY: tasks write disjoint elements through it (see each use).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    pub(crate) fn new(x: &mut [f32]) -> Self {
        Shared(x.as_mut_ptr())
    }

    #[inline]
    pub(crate) fn at(self, offset: usize) -> *mut f32 {
        // SAFETY (of later use): callers keep offsets inside the slice this came from.
        self.0.wrapping_add(offset)
    }
}

/// A thread's kept value: see [`with_kept`].
pub(crate) type Kept<T> = std::cell::Cell<Option<Box<T>>>;

/// Run `f` on this thread's kept `T` (a default one the first time, or while an
/// outer call on this thread holds it) and keep it again for the next call: the
/// buffers of a loop of calls of one size are allocated once.
pub(crate) fn with_kept<T: Default + 'static, R>(
    key: &'static std::thread::LocalKey<Kept<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    let mut kept = key
        .try_with(|c| c.take())
        .ok()
        .flatten()
        .unwrap_or_default();
    let r = f(&mut kept);
    // A thread that is exiting keeps nothing.
    let _ = key.try_with(|c| c.set(Some(kept)));
    r
}

/// Apply `f(chunk_index, out_chunk)` to fixed-size chunks of `out`, in
/// parallel when `out` is large. Chunk boundaries never depend on threads.
pub fn for_chunks<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    if out.len() < PARALLEL_THRESHOLD || num_threads() == 1 {
        out.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    } else {
        install(|| {
            out.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(i, c)| f(i, c))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_everything_once() {
        let mut v = vec![0u32; PARALLEL_THRESHOLD + 17];
        for_chunks(&mut v, CHUNK, |i, c| {
            for (j, x) in c.iter_mut().enumerate() {
                *x += (i * CHUNK + j) as u32;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
    }
}
