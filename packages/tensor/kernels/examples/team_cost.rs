//! What one job on the team costs: `cargo run --release --example team_cost`.
//! Prints the time per job of `pieces` near-empty pieces at 1 and 2 threads.
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

fn main() {
    for threads in [1usize, 2] {
        riftco_kernels::pool::set_num_threads(threads);
        let team = riftco_kernels::team::team();
        let sink = AtomicUsize::new(0);
        for pieces in [2usize, 8, 32, 128] {
            let jobs = 20_000;
            for _ in 0..1000 {
                team.run(pieces, &|i| {
                    sink.fetch_add(black_box(i), Ordering::Relaxed);
                });
            }
            let t = Instant::now();
            for _ in 0..jobs {
                team.run(pieces, &|i| {
                    black_box(i);
                });
            }
            let per = t.elapsed().as_secs_f64() / jobs as f64;
            println!(
                "{threads} threads, {pieces:4} pieces: {:.2} us a job",
                per * 1e6
            );
        }
    }
}
