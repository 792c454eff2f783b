//! Single-thread GFLOP/s of the packed kernel on a transformer layer's shapes.
use riftco_kernels::packed::{gemm_into, Mat};
use std::time::Instant;

fn main() {
    let m = 2048;
    // (name, m, k, n, transpose_a, transpose_b)
    let cases = [
        ("x@Wt qkv", m, 384, 1152, false, true),
        ("x@Wt out", m, 1536, 384, false, true),
        ("dX fc", m, 1536, 384, false, false),
        ("dX out", m, 384, 1536, false, false),
        ("dW qkv", 1152, m, 384, true, false),
        ("dW out", 384, m, 1536, true, false),
    ];
    let mut total = 0.0;
    for (name, m, k, n, ta, tb) in cases {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut c = vec![0.0f32; m * n];
        let lhs = if ta {
            Mat(a.as_ptr(), 1, m)
        } else {
            Mat(a.as_ptr(), k, 1)
        };
        let rhs = if tb {
            Mat(b.as_ptr(), 1, k)
        } else {
            Mat(b.as_ptr(), n, 1)
        };
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = Instant::now();
            unsafe { gemm_into(m, n, k, c.as_mut_ptr(), n, false, lhs, rhs, 1.0) };
            best = best.min(t.elapsed().as_secs_f64());
        }
        total += best;
        println!(
            "{name:10} {m}x{k}x{n} {:6.1} GF/s",
            2.0 * (m * n * k) as f64 / best / 1e9
        );
    }
    println!("total {:.1} ms", total * 1e3);
}
