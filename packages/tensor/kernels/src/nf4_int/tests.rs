use super::*;
use crate::isa::Isa;
use crate::nf4::{decode_scale, CODEBOOK};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }
    fn unit(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 31) as f32 - 1.0
    }
}

/// A packed weight's buffers: random codes (or all `fill`), scales plain or
/// double-quantized.
struct Packed {
    codes: Vec<u8>,
    plain: Vec<f32>,
    qscales: Vec<u8>,
    ranges: Vec<f32>,
    rows: usize,
    cols: usize,
    block: usize,
}

impl Packed {
    fn new(rows: usize, cols: usize, block: usize, fill: Option<u8>, g: &mut Lcg) -> Packed {
        let n = rows * cols;
        let blocks = n.div_ceil(block);
        Packed {
            codes: (0..n.div_ceil(2))
                .map(|_| fill.unwrap_or_else(|| g.next() as u8))
                .collect(),
            plain: (0..blocks).map(|_| 0.01 + g.unit().abs() * 0.2).collect(),
            qscales: (0..blocks).map(|_| g.next() as u8).collect(),
            ranges: (0..blocks.div_ceil(SCALE_GROUP))
                .map(|_| 0.05 + g.unit().abs() * 0.05)
                .collect(),
            rows,
            cols,
            block,
        }
    }

    fn weight(&self, double: bool) -> Nf4Weight<'_> {
        Nf4Weight {
            codes: &self.codes,
            scales: if double {
                Scales::Double {
                    codes: &self.qscales,
                    ranges: &self.ranges,
                    offset: 0.1,
                }
            } else {
                Scales::Plain(&self.plain)
            },
            rows: self.rows,
            cols: self.cols,
            block: self.block,
        }
    }
}

fn levels() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|&l| l <= crate::isa::detected())
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Every output of `w` against `xq`, by `dots_at` at level `isa`, `R` rows a call.
fn outputs<const R: usize>(isa: Isa, w: &Nf4Weight, xq: &Nf4Input) -> Vec<f32> {
    let k = w.cols;
    let log = w.block.trailing_zeros();
    let shift = log - QK.trailing_zeros();
    let plain: Vec<f32> = (0..w.blocks()).map(|b| w.scale(b)).collect();
    let row = |r: usize| Row {
        codes: &w.codes[r * k / 2..(r + 1) * k / 2],
        scales: &plain[(r * k) >> log..],
        phase: ((r * k) & (w.block - 1)) / QK,
    };
    let (kb, m) = (k / QK, xq.q.len() / k);
    let mut out = Vec::new();
    for i in 0..m {
        let (q, s, sums) = (
            &xq.q[i * k..(i + 1) * k],
            &xq.scales[i * kb..(i + 1) * kb],
            &xq.sums[i * kb * 8..(i + 1) * kb * 8],
        );
        let mut r = 0;
        while r + R <= w.rows {
            out.extend(dots_at::<R>(
                isa,
                std::array::from_fn(|j| row(r + j)),
                shift,
                q,
                s,
                sums,
            ));
            r += R;
        }
        for r in r..w.rows {
            out.push(dots_at::<1>(isa, [row(r)], shift, q, s, sums)[0]);
        }
    }
    out
}

#[test]
fn the_int8_codebook_rounds_the_nf4_values() {
    for (c, (&v, &q)) in CODEBOOK.iter().zip(&CODEBOOK_I8).enumerate() {
        assert_eq!(q as f32, (127.0 * v).round(), "code {c}");
        assert!((q as f32 / 127.0 - v).abs() <= 0.5 / 127.0);
    }
}

#[test]
fn the_input_is_quantized_in_nibble_order() {
    let x: Vec<f32> = (0..64).map(|i| i as f32 - 20.0).collect();
    let xq = quantize_input(&x, 64);
    // Block 0: max |x| = 20 (element 0); position p < 16 is element 2p.
    let inv = 127.0f32 / 20.0;
    assert_eq!(xq.q[0], -127);
    assert_eq!(xq.q[1], round_even(-18.0 * inv) as i8);
    assert_eq!(xq.q[16], round_even(-19.0 * inv) as i8);
    assert_eq!(xq.scales[0], 20.0 / 127.0);
    let want: i32 = xq.q[4..8].iter().map(|&v| v as i32).sum();
    assert_eq!(xq.sums[1], 128 * want);
    // Ties go to the even integer: 2.5 -> 2, 3.5 -> 4, -0.5 -> 0.
    let mut t = vec![0.0f32; 32];
    t[0] = 127.0;
    t[2] = 2.5;
    t[4] = 3.5;
    t[6] = -0.5;
    let tq = quantize_input(&t, 32);
    assert_eq!(tq.q[..4], [127, 2, 4, 0]);
    // A zero block has codes and scale 0; a NaN block a NaN scale.
    let mut z = vec![0.0f32; 64];
    z[40] = f32::NAN;
    let zq = quantize_input(&z, 64);
    assert_eq!(zq.scales[0], 0.0);
    assert!(zq.scales[1].is_nan());
    assert!(zq.q.iter().all(|&v| v == 0));
}

#[test]
fn every_level_gives_the_portable_bits() {
    let mut g = Lcg(7);
    // (rows, cols, block): whole NF4 blocks, a block of 32, rows that start inside a
    // block (96 and 160 columns with blocks of 64 and 128), odd block counts.
    for &(rows, cols, block) in &[
        (9, 256, 64),
        (7, 96, 64),
        (6, 160, 128),
        (5, 224, 32),
        (4, 32, 32),
        (3, 64, 4096),
    ] {
        for fill in [None, Some(0x00), Some(0xff), Some(0x70)] {
            let p = Packed::new(rows, cols, block, fill, &mut g);
            let mut x: Vec<f32> = (0..3 * cols).map(|_| g.unit() * 4.0).collect();
            x[1] = 9.0; // a code of 127 somewhere
            x[cols + 2] = -9.0;
            let xq = quantize_input(&x, cols);
            for double in [false, true] {
                let w = p.weight(double);
                let want = outputs::<1>(Isa::Portable, &w, &xq);
                for isa in levels() {
                    let one = outputs::<1>(isa, &w, &xq);
                    let four = outputs::<4>(isa, &w, &xq);
                    let at = format!("{isa:?} {rows}x{cols} block {block} {fill:?} {double}");
                    assert_eq!(bits(&one), bits(&want), "{at}");
                    assert_eq!(bits(&four), bits(&want), "{at}, four rows");
                }
            }
        }
    }
}

#[test]
fn the_product_is_within_the_stated_bound_of_the_dequantized_one() {
    let mut g = Lcg(11);
    for &(rows, cols, block, m) in &[
        (37, 384, 64, 3),
        (16, 1536, 64, 1),
        (5, 96, 32, 2),
        (9, 96, 64, 2),
        (6, 160, 128, 1),
    ] {
        let p = Packed::new(rows, cols, block, None, &mut g);
        for double in [false, true] {
            let w = p.weight(double);
            let mut dense = vec![0.0; rows * cols];
            crate::nf4::dequantize(&w, &mut dense).unwrap();
            let x: Vec<f32> = (0..m * cols)
                .map(|i| g.unit() * if i % 97 == 0 { 10.0 } else { 1.0 })
                .collect();
            let bias: Vec<f32> = (0..rows).map(|r| r as f32 * 0.1).collect();
            let mut y = vec![0.0; m * rows];
            linear(&w, &x, m, Some(&bias), &mut y).unwrap();
            let mut worst = 0.0f64;
            for i in 0..m {
                let xi = &x[i * cols..(i + 1) * cols];
                for r in 0..rows {
                    let exact: f64 = (0..cols)
                        .map(|c| dense[r * cols + c] as f64 * xi[c] as f64)
                        .sum::<f64>()
                        + bias[r] as f64;
                    let bound: f64 = (0..cols)
                        .map(|c| {
                            let s = w.scale((r * cols + c) / block).abs() as f64;
                            let a = xi[c / QK * QK..][..QK]
                                .iter()
                                .fold(0.0f32, |a, v| a.max(v.abs()));
                            s * a as f64
                        })
                        .sum::<f64>()
                        * 0.008;
                    let got = y[i * rows + r] as f64;
                    assert!(
                        (got - exact).abs() <= bound,
                        "{rows}x{cols} {double} ({i}, {r}): {got} vs {exact}, bound {bound}"
                    );
                    worst = worst.max((got - exact).abs() / bound);
                }
            }
            // The bound is a worst case; random codes and inputs stay well inside it.
            assert!(worst < 0.5, "{worst}");
        }
    }
}

#[test]
fn batched_rows_and_pieces_give_each_row_the_one_row_bits() {
    let mut g = Lcg(3);
    let (rows, cols) = (45, 192);
    let p = Packed::new(rows, cols, 64, None, &mut g);
    let w = p.weight(true);
    let x: Vec<f32> = (0..4 * cols).map(|_| g.unit()).collect();
    let mut all = vec![0.0; 4 * rows];
    linear(&w, &x, 4, None, &mut all).unwrap();
    for i in 0..4 {
        let mut one = vec![0.0; rows];
        linear(&w, &x[i * cols..(i + 1) * cols], 1, None, &mut one).unwrap();
        assert_eq!(bits(&one), bits(&all[i * rows..(i + 1) * rows]));
    }
    let xq = quantize_input(&x, cols);
    assert_eq!(bits(&outputs::<1>(Isa::Portable, &w, &xq)), bits(&all));
}

#[test]
fn non_finite_inputs_give_nan_and_bad_shapes_are_refused() {
    let mut g = Lcg(5);
    let p = Packed::new(3, 64, 64, None, &mut g);
    let w = p.weight(false);
    let mut x = vec![0.5f32; 64];
    x[9] = f32::INFINITY;
    let mut y = vec![0.0; 3];
    linear(&w, &x, 1, None, &mut y).unwrap();
    assert!(y.iter().all(|v| v.is_nan()));
    assert!(linear(&w, &x[..63], 1, None, &mut y).is_err());
    assert!(linear(&w, &x, 1, None, &mut y[..2]).is_err());
    let p = Packed::new(2, 48, 32, None, &mut g);
    let w = p.weight(false);
    assert!(!supports(&w));
    let err = linear(&w, &[0.0; 48], 1, None, &mut [0.0; 2]).unwrap_err();
    assert!(err.0.contains("whole blocks of 32"), "{}", err.0);
}

#[test]
fn the_decoded_scales_are_the_weights_own() {
    let mut g = Lcg(9);
    let p = Packed::new(40, 512, 32, None, &mut g);
    let w = p.weight(true);
    let first = 250;
    let mut out = vec![0.0; 300];
    decode_scales(&p.qscales, &p.ranges, 0.1, first, &mut out);
    for (j, &v) in out.iter().enumerate() {
        assert_eq!(v.to_bits(), w.scale(first + j).to_bits());
        let b = first + j;
        let want = decode_scale(p.qscales[b], p.ranges[b / SCALE_GROUP], 0.1);
        assert_eq!(v.to_bits(), want.to_bits());
    }
}

#[test]
fn the_vector_quantization_and_scale_decoding_match_the_portable_loops() {
    let mut g = Lcg(13);
    let mut x: Vec<f32> = (0..32 * 12)
        .map(|i| g.unit() * [1.0, 1e-3, 3e-39, 1e30][i / 96])
        .collect();
    // Ties: a block whose largest magnitude is 127 multiplies by 1.
    for (j, v) in x[..32].iter_mut().enumerate() {
        *v = if j == 5 { -127.0 } else { j as f32 - 16.5 };
    }
    x[40] = f32::NAN;
    x[75] = f32::INFINITY;
    x[100] = f32::NEG_INFINITY;
    x[128..160].fill(0.0);
    x[161] = -0.0;
    x[200] = f32::MIN_POSITIVE;
    let fast = quantize_input_with(&x, 32 * 12, true);
    let slow = quantize_input_with(&x, 32 * 12, false);
    assert_eq!(fast.q, slow.q);
    assert_eq!(fast.sums, slow.sums);
    assert_eq!(bits(&fast.scales), bits(&slow.scales));
    assert_eq!(slow.q[..4], [-16, -14, -12, -10]); // -16.5, -14.5, ... to even
    assert!(slow.scales[1].is_nan() && slow.scales[2].is_infinite());
    // Scale bytes 0..=255 with ranges and offsets that clamp at 0 and at f32::MAX, NaN.
    let codes: Vec<u8> = (0..=255u8).chain(0..=255).collect();
    for (range, offset) in [
        (0.3, 0.1),
        (-2.0, 0.0),
        (f32::MAX, f32::MAX),
        (f32::NAN, 1.0),
        (1.0, -0.5),
    ] {
        let ranges = vec![range; 2];
        let mut out = vec![0.0; codes.len() - 3];
        decode_scales(&codes, &ranges, offset, 3, &mut out);
        for (j, &v) in out.iter().enumerate() {
            let want = decode_scale(codes[3 + j], range, offset);
            assert_eq!(v.to_bits(), want.to_bits(), "{range} {offset} {j}");
        }
    }
}
