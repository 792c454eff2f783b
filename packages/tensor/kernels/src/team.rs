//! A small team of helper threads that stay hot between short kernels.
//!
//! A decode step runs dozens of matrix-vector products of a few tens of
//! microseconds each. Handing each one to the rayon pool wakes sleeping workers
//! and puts the caller to sleep until they finish (a futex round trip per
//! product, which cost more than the product itself). The team instead keeps
//! `threads - 1` helpers spinning for a short while after each job, and the
//! calling thread works on the job too: runs of pieces are claimed from a
//! shared counter, so each piece is computed by exactly one thread, the same
//! way whichever, and results do not depend on the thread count.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// How long an idle helper spins for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(800);
/// `state`'s flag: a job is open for helpers to join.
const OPEN: usize = 1 << (usize::BITS - 1);

type Body = dyn Fn(usize) + Sync;

struct Job {
    body: *const Body,
    pieces: usize,
}

struct Shared {
    /// `OPEN` while a job takes helpers, plus the number of helpers inside it.
    state: AtomicUsize,
    /// Bumped for every job, so that spinning helpers notice one.
    epoch: AtomicUsize,
    /// The next piece to claim.
    next: AtomicUsize,
    /// The helpers and the caller.
    threads: usize,
    /// Written by the caller only while no helper is inside (`state` is 0).
    job: UnsafeCell<Job>,
    panicked: AtomicBool,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only while `state` says no helper is inside, and read
// only by helpers counted in `state` while it is `OPEN` (see `run` and `helper`).
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

impl Shared {
    fn work(&self) {
        // SAFETY: the caller of `work` is counted in `state` (or is the job's owner).
        let job = unsafe { &*self.job.get() };
        // SAFETY: the body outlives the job: `run` returns only after every helper left.
        let body = unsafe { &*job.body };
        while let Some(range) = self.claim(job.pieces) {
            for i in range {
                if catch_unwind(AssertUnwindSafe(|| body(i))).is_err() {
                    self.panicked.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// The next run of pieces for one thread: a share of what is left that
    /// shrinks as the job drains (guided scheduling), so a job of many short
    /// pieces costs a few claims of the shared counter per thread rather than
    /// one a piece (a claim moves the counter's cache line between cores, which
    /// costs more than a piece of a small quantized product), while the last
    /// claims stay one piece long and the threads finish together.
    fn claim(&self, pieces: usize) -> Option<std::ops::Range<usize>> {
        let mut first = self.next.load(Ordering::Relaxed);
        loop {
            if first >= pieces {
                return None;
            }
            let run = ((pieces - first) / (2 * self.threads)).max(1);
            match self.next.compare_exchange_weak(
                first,
                first + run,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(first..first + run),
                Err(now) => first = now,
            }
        }
    }
}

/// A team of `helpers` threads plus the caller.
pub struct Team {
    shared: Arc<Shared>,
    helpers: usize,
    /// One caller at a time; another runs its job alone.
    busy: Mutex<()>,
}

fn helper(shared: Arc<Shared>) {
    let mut seen = shared.epoch.load(Ordering::Acquire);
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        while shared.epoch.load(Ordering::Acquire) == seen {
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                // Let another runnable thread have the core now and then (this
                // machine may be shared), and sleep once the spin is over.
                std::thread::yield_now();
            }
            if spins.is_multiple_of(256) && start.elapsed() > SPIN {
                let guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
                shared.sleepers.fetch_add(1, Ordering::SeqCst);
                let mut guard = guard;
                while shared.epoch.load(Ordering::SeqCst) == seen
                    && !shared.stop.load(Ordering::SeqCst)
                {
                    guard = shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                shared.sleepers.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
            }
        }
        seen = shared.epoch.load(Ordering::Acquire);
        // Join whichever job is open now (if any); its pieces are claimed from
        // `next`, so joining late or twice only finds fewer pieces left.
        if shared.state.fetch_add(1, Ordering::Acquire) & OPEN != 0 {
            shared.work();
        }
        shared.state.fetch_sub(1, Ordering::Release);
    }
}

impl Team {
    fn new(helpers: usize) -> Team {
        let shared = Arc::new(Shared {
            state: AtomicUsize::new(0),
            epoch: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            threads: helpers + 1,
            // Never called: no job is open until `run` stores a real one.
            job: UnsafeCell::new(Job {
                body: std::ptr::null::<fn(usize)>() as *const Body,
                pieces: 0,
            }),
            panicked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        for i in 0..helpers {
            let s = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("riftco-team-{i}"))
                .spawn(move || helper(s))
                .expect("cannot start a riftco kernel helper thread");
        }
        Team {
            shared,
            helpers,
            busy: Mutex::new(()),
        }
    }

    /// Run `body(i)` for every `i in 0..pieces`, each exactly once, on the caller
    /// and the helpers. A panic in a piece panics here once all pieces ran.
    pub fn run(&self, pieces: usize, body: &(dyn Fn(usize) + Sync)) {
        let guard = match self.busy.try_lock() {
            Ok(g) if self.helpers > 0 && pieces > 1 => g,
            _ => {
                (0..pieces).for_each(body);
                return;
            }
        };
        let s = &*self.shared;
        // No helper is inside (the previous job waited for them to leave).
        // SAFETY: `state` is 0 here, so no helper reads `job` until it is OPEN.
        unsafe {
            // The body's lifetime is erased: `run` waits below until no helper can
            // still reach it.
            let body = std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Body>(body);
            *s.job.get() = Job { body, pieces };
        }
        s.next.store(0, Ordering::Relaxed);
        s.state.fetch_or(OPEN, Ordering::Release);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _lock = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        s.work();
        s.state.fetch_and(!OPEN, Ordering::AcqRel);
        // Helpers still inside finish their last piece (or leave at once).
        let mut spins = 0u32;
        while s.state.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                std::thread::yield_now();
            }
        }
        drop(guard);
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a kernel piece panicked on a helper thread");
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _lock = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.wake.notify_all();
    }
}

static TEAM: OnceLock<RwLock<Option<Arc<Team>>>> = OnceLock::new();

/// The team for the pool's current thread count (`threads - 1` helpers),
/// started on first use and replaced when the thread count changes.
pub fn team() -> Arc<Team> {
    let cell = TEAM.get_or_init(|| RwLock::new(None));
    let helpers = crate::pool::num_threads().saturating_sub(1);
    if let Some(t) = cell.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        if t.helpers == helpers {
            return Arc::clone(t);
        }
    }
    let mut slot = cell.write().unwrap_or_else(|e| e.into_inner());
    match slot.as_ref() {
        Some(t) if t.helpers == helpers => Arc::clone(t),
        _ => {
            let t = Arc::new(Team::new(helpers));
            *slot = Some(Arc::clone(&t));
            t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_piece_runs_once() {
        let team = Team::new(3);
        for pieces in [0usize, 1, 2, 7, 64, 1000] {
            let hits: Vec<AtomicUsize> = (0..pieces).map(|_| AtomicUsize::new(0)).collect();
            team.run(pieces, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn claims_shrink_as_the_job_drains() {
        let team = Team::new(1);
        let s = &*team.shared;
        let pieces = 1000;
        s.next.store(0, Ordering::Relaxed);
        let mut runs = Vec::new();
        while let Some(r) = s.claim(pieces) {
            runs.push(r);
        }
        // The runs cover the pieces in order, each once.
        assert_eq!(runs.first().map(|r| r.start), Some(0));
        assert!(runs.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(runs.last().map(|r| r.end), Some(pieces));
        // A quarter of what is left at first, one piece at the end, and far fewer
        // claims than pieces.
        assert_eq!(runs[0].len(), pieces / 4);
        assert!(runs.windows(2).all(|w| w[1].len() <= w[0].len()));
        assert_eq!(runs.last().map(|r| r.len()), Some(1));
        assert!(runs.len() < 40, "{} claims for {pieces} pieces", runs.len());
    }

    #[test]
    fn helpers_wake_after_sleeping() {
        let team = Team::new(1);
        std::thread::sleep(SPIN * 4);
        let total = AtomicUsize::new(0);
        team.run(50, &|i| {
            total.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(total.load(Ordering::Relaxed), 49 * 50 / 2);
    }

    #[test]
    fn a_panicking_piece_panics_the_caller() {
        let team = Team::new(1);
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.run(8, &|i| assert!(i != 5, "piece 5"));
        }));
        assert!(r.is_err());
        // The team still works afterwards.
        let n = AtomicUsize::new(0);
        team.run(8, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 8);
    }
}
