use riftco_kernels::unary::{unary_f32, UnaryOp};
use std::time::Instant;
fn main() {
    riftco_kernels::pool::set_num_threads(1);
    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.01 - 5.0).collect();
    let mut out = vec![0.0f32; n];
    for (name, op) in [
        ("exp", UnaryOp::Exp),
        ("tanh", UnaryOp::Tanh),
        ("gelu_tanh", UnaryOp::GeluTanh),
        ("gelu", UnaryOp::Gelu),
        ("sigmoid", UnaryOp::Sigmoid),
    ] {
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = Instant::now();
            unary_f32(op, &x, &mut out).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("{name:10} {:.2} ns/element", best / n as f64 * 1e9);
    }
}
