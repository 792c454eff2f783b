//! Time the NF4 linear for one input row against the float32 product.
use riftco_kernels::matmul::{matmul_f32, MatmulSpec};
use riftco_kernels::nf4::{linear, Nf4Weight, Scales};
use std::time::Instant;

fn main() {
    let (n, k, block) = (1536, 384, 64);
    let codes: Vec<u8> = (0..n * k / 2).map(|i| (i * 37 % 251) as u8).collect();
    let scales: Vec<f32> = (0..n * k / block)
        .map(|b| 0.5 + (b % 7) as f32 * 0.1)
        .collect();
    let w = Nf4Weight {
        codes: &codes,
        scales: Scales::Plain(&scales),
        rows: n,
        cols: k,
        block,
    };
    let x: Vec<f32> = (0..k).map(|i| i as f32 / k as f32).collect();
    let qs: Vec<u8> = (0..n * k / block).map(|b| (b % 200) as u8).collect();
    let ranges = vec![0.5f32; (n * k / block).div_ceil(256)];
    let wd = Nf4Weight {
        codes: &codes,
        scales: Scales::Double {
            codes: &qs,
            ranges: &ranges,
            offset: 0.3,
        },
        rows: n,
        cols: k,
        block,
    };
    let mut out = vec![0.0f32; n];
    let t = Instant::now();
    for _ in 0..2000 {
        linear(&wd, &x, 1, None, &mut out).unwrap();
    }
    println!(
        "nf4 double-quantized: {:.1} us",
        t.elapsed().as_secs_f64() / 2000.0 * 1e6
    );
    let dense: Vec<f32> = (0..n * k).map(|i| (i % 13) as f32).collect();
    let mut out = vec![0.0f32; n];
    let reps = 2000;
    let t = Instant::now();
    for _ in 0..reps {
        linear(&w, &x, 1, None, &mut out).unwrap();
    }
    println!(
        "nf4 [1,{k}] x [{n},{k}]^T: {:.1} us",
        t.elapsed().as_secs_f64() / reps as f64 * 1e6
    );
    let spec = MatmulSpec {
        m: 1,
        k,
        n,
        transpose_a: false,
        transpose_b: true,
        a_offsets: &[0],
        b_offsets: &[0],
    };
    let t = Instant::now();
    for _ in 0..reps {
        matmul_f32(&spec, &x, &dense, &mut out).unwrap();
    }
    println!(
        "f32 [1,{k}] x [{n},{k}]^T: {:.1} us",
        t.elapsed().as_secs_f64() / reps as f64 * 1e6
    );
}
