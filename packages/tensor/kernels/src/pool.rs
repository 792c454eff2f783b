//! The kernels' own thread pool, so the thread count can be set at run time
//! (results do not depend on it) without touching rayon's global pool.

use std::sync::{Arc, OnceLock, RwLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

/// Elements per parallel piece for memory-bound elementwise kernels.
pub const CHUNK: usize = 1 << 15;
/// Below this many elements a kernel runs on the calling thread.
pub const PARALLEL_THRESHOLD: usize = 1 << 17;
/// From this many elements [`for_chunks`] runs on the team: two chunks, each
/// piece long enough for the handoff to a hot helper (about a microsecond) to pay.
pub const CHUNKED_THRESHOLD: usize = 2 * CHUNK;
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
/// The threads are the [`crate::team`]'s: its helpers stay hot between the short
/// kernels of a step, and the caller works too (a rayon handoff puts the caller
/// to sleep and wakes it again: a futex round trip per kernel).
pub fn for_each_task<T: Sync>(tasks: &[T], parallel: bool, body: impl Fn(&T) + Sync + Send) {
    if parallel {
        crate::team::team().run(tasks.len(), &|i| body(&tasks[i]));
    } else {
        tasks.iter().for_each(body);
    }
}

/// [`for_each_task`] over the tasks `0..tasks`.
pub fn for_each_index(tasks: usize, parallel: bool, body: impl Fn(usize) + Sync + Send) {
    if parallel {
        crate::team::team().run(tasks, &body);
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
/// parallel (on the team, see [`for_each_task`]) when `out` is large. Chunk
/// boundaries never depend on threads.
pub fn for_chunks<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let parallel = out.len() >= CHUNKED_THRESHOLD && num_threads() > 1;
    for_each_chunk_mut(out, chunk, parallel, f);
}

/// `f(i, chunk)` for the `chunk`-long pieces of `out` (the last may be shorter),
/// each on one thread: the team's when `parallel`.
pub fn for_each_chunk_mut<T: Send>(
    out: &mut [T],
    chunk: usize,
    parallel: bool,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    if !parallel || chunk == 0 || out.len() <= chunk {
        out.chunks_mut(chunk.max(1))
            .enumerate()
            .for_each(|(i, c)| f(i, c));
        return;
    }
    let (len, base) = (out.len(), SharedMut(out.as_mut_ptr()));
    crate::team::team().run(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        // SAFETY: piece i is `start..start + chunk` clipped to `out`, written by
        // this piece alone while `out` is borrowed for the whole call.
        let part =
            unsafe { std::slice::from_raw_parts_mut(base.at(start), chunk.min(len - start)) };
        f(i, part)
    });
}

/// `f(i, &mut items[i])` for every item, each on one thread: the team's when
/// `parallel`.
pub fn for_each_mut<T: Send>(items: &mut [T], parallel: bool, f: impl Fn(usize, &mut T) + Sync) {
    for_each_chunk_mut(items, 1, parallel, |i, one| f(i, &mut one[0]));
}

/// A pointer to the elements of an output whose disjoint parts parallel pieces
/// write (see each use).
pub(crate) struct SharedMut<T>(*mut T);

impl<T> Clone for SharedMut<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedMut<T> {}

// SAFETY: pieces write disjoint elements through it (see each use).
unsafe impl<T: Send> Send for SharedMut<T> {}
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub(crate) fn new(x: &mut [T]) -> Self {
        SharedMut(x.as_mut_ptr())
    }

    #[inline]
    pub(crate) fn at(self, offset: usize) -> *mut T {
        self.0.wrapping_add(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the team (several threads when the machine has them): every item and
    /// every element of a chunked output is written once, by the piece whose
    /// index it belongs to, a short last chunk included.
    #[test]
    fn parallel_pieces_cover_everything_once() {
        let mut items = vec![0usize; 1001];
        for_each_mut(&mut items, true, |i, x| *x += i + 1);
        assert!(items.iter().enumerate().all(|(i, &x)| x == i + 1));
        let mut out = vec![0usize; 1003];
        for_each_chunk_mut(&mut out, 10, true, |i, c| {
            assert!(c.len() == 10 || (i == 100 && c.len() == 3));
            for (j, x) in c.iter_mut().enumerate() {
                *x += i * 10 + j + 1;
            }
        });
        assert!(out.iter().enumerate().all(|(i, &x)| x == i + 1));
        let mut none: [u8; 0] = [];
        for_each_chunk_mut(&mut none, 0, true, |_, _| panic!("no pieces"));
    }

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
