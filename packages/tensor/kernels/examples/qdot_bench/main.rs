//! Single-thread time of one decode token's weight products (six layers of
//! [1152 x 384], [384 x 384], [1536 x 384] and [384 x 1536]) per weight format,
//! the block-layout kernels that take one weight row at a time against those that
//! take several, and NF4 against the float32 product of its dequantized weights,
//! timed alternately. Run with `RAYON_NUM_THREADS=1 cargo run --release
//! --example qdot_bench [rounds [format]]`
//! (with a format, only it and float32). `nf4i` is NF4's integer product (8-bit
//! inputs, the decode step's with `RIFTCO_NF4_DECODE=int8`) timed against Q4_0's
//! several-row product on the same shapes ("old" is Q4_0: old/new is NF4's speed
//! as a fraction of Q4_0's; its largest difference compares different weights).
//! `QDOT_NF4_PLAIN=1` gives NF4 its double-quantized scales decoded beforehand.
//! With `QDOT_VS_ISA=<level>` (say
//! `avx2`), "old" is the same kernel as "new" at that vector level
//! ([`riftco_kernels::isa::set_cap`] around each product), so the columns compare
//! the levels, which must give the same bits.
use riftco_kernels::blockq::{linear, linear_row_by_row, BlockFormat, BlockWeight};
use riftco_kernels::nf4::{self, Nf4Weight, Scales};
use riftco_kernels::nf4_int;
use std::time::Instant;

mod reference;

const LAYERS: usize = 6;
/// (rows, cols) of each layer's products.
const SHAPES: [(usize, usize); 4] = [(1152, 384), (384, 384), (1536, 384), (384, 1536)];
const NF4_BLOCK: usize = 64;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    fn unit(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 31) as f32 * 2.0 - 1.0
    }
}

/// Bytes of a `format` weight: half scales near 0.01, random codes.
fn block_bytes(format: BlockFormat, rows: usize, cols: usize, g: &mut Lcg) -> Vec<u8> {
    let mut v = Vec::with_capacity(format.row_bytes(cols) * rows);
    for _ in 0..rows {
        match format {
            BlockFormat::F16 => {
                for _ in 0..cols {
                    // Halves in [-0.06, 0.06] or so (exponents 2^-9 .. 2^-5).
                    let h = (0x1800 + (g.next() % 0x1400) as u16) | ((g.next() & 1) << 15) as u16;
                    v.extend(h.to_le_bytes());
                }
            }
            _ => {
                for _ in 0..cols / 32 {
                    v.extend((0x2000u16 + (g.next() % 0x200) as u16).to_le_bytes());
                    let n = if format == BlockFormat::Q8_0 { 32 } else { 16 };
                    v.extend((0..n).map(|_| g.next() as u8));
                }
            }
        }
    }
    v
}

struct Nf4Data {
    codes: Vec<u8>,
    qscales: Vec<u8>,
    ranges: Vec<f32>,
    /// The double-quantized scales decoded, with `QDOT_NF4_PLAIN=1`.
    plain: Option<Vec<f32>>,
    rows: usize,
    cols: usize,
}

impl Nf4Data {
    fn new(rows: usize, cols: usize, g: &mut Lcg) -> Nf4Data {
        let blocks = (rows * cols).div_ceil(NF4_BLOCK);
        let mut d = Nf4Data {
            codes: (0..(rows * cols).div_ceil(2))
                .map(|_| g.next() as u8)
                .collect(),
            qscales: (0..blocks).map(|_| g.next() as u8).collect(),
            ranges: (0..blocks.div_ceil(nf4::SCALE_GROUP))
                .map(|_| 0.01 + g.unit().abs() * 0.01)
                .collect(),
            plain: None,
            rows,
            cols,
        };
        if std::env::var("QDOT_NF4_PLAIN").is_ok_and(|v| v == "1") {
            let w = d.weight();
            d.plain = Some((0..w.blocks()).map(|b| w.scale(b)).collect());
        }
        d
    }
    fn weight(&self) -> Nf4Weight<'_> {
        Nf4Weight {
            codes: &self.codes,
            scales: match &self.plain {
                Some(p) => Scales::Plain(p),
                None => Scales::Double {
                    codes: &self.qscales,
                    ranges: &self.ranges,
                    offset: 0.02,
                },
            },
            rows: self.rows,
            cols: self.cols,
            block: NF4_BLOCK,
        }
    }
}

/// A product: (weight index, input, output).
type Product<'a> = dyn FnMut(usize, &[f32], &mut [f32]) + 'a;

/// One decode token: every product of every layer.
fn token(outs: &mut [Vec<f32>], xs: &[Vec<f32>], f: &mut Product) {
    for (j, out) in outs.iter_mut().enumerate() {
        f(j, &xs[j % SHAPES.len()], out);
    }
}

/// The fastest and the median round.
fn fastest_and_median(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 2])
}

fn main() {
    riftco_kernels::pool::set_num_threads(1);
    let rounds: usize = std::env::args().nth(1).map_or(15, |a| a.parse().unwrap());
    let mut g = Lcg(12345);
    let count = LAYERS * SHAPES.len();
    let shape = |j: usize| SHAPES[j % SHAPES.len()];
    let xs: Vec<Vec<f32>> = SHAPES
        .iter()
        .map(|&(_, c)| (0..c).map(|_| g.unit()).collect())
        .collect();
    let mut outs: Vec<Vec<f32>> = (0..count).map(|j| vec![0.0; shape(j).0]).collect();
    let mut outs2 = outs.clone();

    let formats = [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::F16];
    let block: Vec<Vec<Vec<u8>>> = formats
        .iter()
        .map(|&f| {
            (0..count)
                .map(|j| block_bytes(f, shape(j).0, shape(j).1, &mut g))
                .collect()
        })
        .collect();
    let nf: Vec<Nf4Data> = (0..count)
        .map(|j| Nf4Data::new(shape(j).0, shape(j).1, &mut g))
        .collect();
    let dense: Vec<Vec<f32>> = (0..count)
        .map(|j| {
            (0..shape(j).0 * shape(j).1)
                .map(|_| g.unit() * 0.05)
                .collect()
        })
        .collect();
    // NF4's weights dequantized, for its float32 baseline.
    let unpacked: Vec<Vec<f32>> = nf
        .iter()
        .map(|n| {
            let w = n.weight();
            let mut out = vec![0.0; w.rows * w.cols];
            nf4::dequantize(&w, &mut out).unwrap();
            out
        })
        .collect();
    type Kernel<'a> = Box<Product<'a>>;
    let vs = std::env::var("QDOT_VS_ISA")
        .ok()
        .map(|v| riftco_kernels::isa::Isa::parse(&v).expect("QDOT_VS_ISA: a level name"));
    let top = riftco_kernels::isa::current();
    let at_vs = move |f: &mut dyn FnMut()| {
        if let Some(v) = vs {
            riftco_kernels::isa::set_cap(v);
        }
        f();
        riftco_kernels::isa::set_cap(top);
    };
    let mut cases: Vec<(String, Kernel, Kernel)> = Vec::new();
    for (fi, &format) in formats.iter().enumerate() {
        let data = &block[fi];
        let weight = move |j: usize| BlockWeight {
            format,
            data: &data[j],
            rows: shape(j).0,
            cols: shape(j).1,
        };
        cases.push((
            format.name().to_string(),
            if vs.is_some() {
                Box::new(move |j, x, out| {
                    at_vs(&mut || linear(&weight(j), x, 1, None, out).unwrap())
                })
            } else {
                Box::new(move |j, x, out| linear_row_by_row(&weight(j), x, 1, None, out).unwrap())
            },
            Box::new(move |j, x, out| linear(&weight(j), x, 1, None, out).unwrap()),
        ));
    }
    // NF4 against the float32 product of its dequantized weights (the values agree
    // to float32 rounding; the bytes read are eight times fewer).
    let nf = &nf;
    let unpacked = &unpacked;
    cases.push((
        "nf4".to_string(),
        if vs.is_some() {
            Box::new(move |j, x, out| {
                at_vs(&mut || nf4::linear(&nf[j].weight(), x, 1, None, out).unwrap())
            })
        } else {
            Box::new(move |j, x, out| reference::dot_rows_f32(&unpacked[j], x, out))
        },
        Box::new(move |j, x, out| nf4::linear(&nf[j].weight(), x, 1, None, out).unwrap()),
    ));
    // NF4's integer product against Q4_0's (another weight of the same shapes: the
    // values differ; the bytes read are the same to a scale byte per 64 weights).
    let q4 = &block[1];
    let q4_weight = move |j: usize| BlockWeight {
        format: BlockFormat::Q4_0,
        data: &q4[j],
        rows: shape(j).0,
        cols: shape(j).1,
    };
    cases.push((
        "nf4i".to_string(),
        if vs.is_some() {
            Box::new(move |j, x, out| {
                at_vs(&mut || nf4_int::linear(&nf[j].weight(), x, 1, None, out).unwrap())
            })
        } else {
            Box::new(move |j, x, out| linear(&q4_weight(j), x, 1, None, out).unwrap())
        },
        Box::new(move |j, x, out| nf4_int::linear(&nf[j].weight(), x, 1, None, out).unwrap()),
    ));
    let dense = &dense;
    let f32_kernel =
        move |j: usize, x: &[f32], out: &mut [f32]| reference::dot_rows_f32(&dense[j], x, out);
    cases.push((
        "f32".to_string(),
        Box::new(f32_kernel),
        Box::new(f32_kernel),
    ));

    let reps = 10;
    let mut f32_ms = 0.0;
    println!("ms per token, the fastest of {rounds} rounds of {reps} tokens (the median in brackets), one thread");
    println!(
        "{:6} {:>17} {:>17} {:>7} {:>8}",
        "format", "old", "new", "old/new", "f32/new"
    );
    let mut lines = Vec::new();
    let only = std::env::args().nth(2);
    for (name, old, new) in cases.iter_mut() {
        if only.as_ref().is_some_and(|o| o != name && name != "f32") {
            continue;
        }
        // The results must agree bit for bit (NF4: within float32 rounding).
        token(&mut outs, &xs, old.as_mut());
        token(&mut outs2, &xs, new.as_mut());
        let mut worst = 0.0f64;
        for (a, b) in outs.iter().zip(&outs2) {
            for (&p, &q) in a.iter().zip(b) {
                if (name != "nf4" && name != "nf4i") || vs.is_some() {
                    assert_eq!(p.to_bits(), q.to_bits(), "{name}: {p} vs {q}");
                }
                worst = worst.max(((p - q).abs() / (1e-3 + p.abs())) as f64);
            }
        }
        let (mut to, mut tn) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            for _ in 0..reps {
                token(&mut outs, &xs, old.as_mut());
            }
            to.push(t.elapsed().as_secs_f64() * 1e3 / reps as f64);
            let t = Instant::now();
            for _ in 0..reps {
                token(&mut outs2, &xs, new.as_mut());
            }
            tn.push(t.elapsed().as_secs_f64() * 1e3 / reps as f64);
        }
        let ((o, om), (n, nm)) = (fastest_and_median(&mut to), fastest_and_median(&mut tn));
        if name == "f32" {
            f32_ms = n;
        }
        lines.push((name.clone(), o, n, om, nm, worst));
    }
    for (name, o, n, om, nm, worst) in lines {
        println!(
            "{name:6} {o:7.3} ({om:7.3}) {n:7.3} ({nm:7.3}) {:7.2} {:8.2}   largest relative difference {worst:.1e}",
            o / n,
            f32_ms / n
        );
    }
}
