use super::*;
use crate::blockq::dot::{rows_q4_0_at, rows_q8_0_at};
use crate::blockq::quantize_rows;
use crate::nf4::Scales;
use crate::nf4_int::{dots_at, quantize_input, Row};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }
}

/// Q8_0 / Q4_0 rows of patterned bytes, some block scales infinite, NaN, zero or subnormal.
fn block_rows(format: BlockFormat, rows: usize, blocks: usize, g: &mut Lcg) -> Vec<u8> {
    let stride = format.row_bytes(QK);
    let mut v: Vec<u8> = (0..rows * blocks * stride)
        .map(|_| g.next() as u8)
        .collect();
    for (i, blk) in v.chunks_exact_mut(stride).enumerate() {
        let h: u16 = match i % 23 {
            0 => 0x7c00,
            1 => 0xfe00,
            2 => 0x0000,
            3 => 0x0003,
            n => (0x2000 + n as u16 * 0x155) | ((i as u16 & 1) << 15),
        };
        blk[..2].copy_from_slice(&h.to_le_bytes());
        if i % 7 == 4 && format == BlockFormat::Q8_0 {
            blk[2..].fill(0x80); // -128, the code whose magnitude needs the ninth bit
        }
    }
    v
}

/// Inputs: plain, with a NaN, with an infinity, all zero.
fn inputs(cols: usize) -> Vec<Vec<f32>> {
    let plain: Vec<f32> = (0..cols)
        .map(|i| ((i * 29 % 41) as f32 - 20.0) / 7.0 * if i % 5 == 0 { 100.0 } else { 1.0 })
        .collect();
    let mut nan = plain.clone();
    nan[cols / 2] = f32::NAN;
    let mut inf = plain.clone();
    inf[cols - 1] = f32::INFINITY;
    vec![plain, nan, inf, vec![0.0; cols]]
}

/// The levels that read tiles on this machine.
fn levels() -> impl Iterator<Item = Isa> {
    Isa::ALL
        .into_iter()
        .filter(|&i| runs(i) && i <= crate::isa::detected())
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn block_tiles_give_the_row_products_bits() {
    if !useful() {
        return;
    }
    let mut g = Lcg(7);
    for format in [BlockFormat::Q8_0, BlockFormat::Q4_0] {
        for (rows, blocks) in [(1, 1), (15, 2), (16, 3), (17, 12), (40, 13)] {
            let cols = blocks * QK;
            let data = block_rows(format, rows, blocks, &mut g);
            let w = BlockWeight {
                format,
                data: &data,
                rows,
                cols,
            };
            let bytes = tile_block(&w).expect("a Q8_0 / Q4_0 weight tiles");
            let kind = match format {
                BlockFormat::Q8_0 => TileKind::Q8_0,
                _ => TileKind::Q4_0,
            };
            let t = Tiles {
                kind,
                data: &bytes,
                rows,
                cols,
            };
            t.check().unwrap();
            for x in inputs(cols) {
                let a = quantize_rows(&x, true);
                let (q, s, sums) = (&a.q[..], &a.scales[..], &a.sums[..]);
                for (isa, tile) in
                    levels().flat_map(|i| (0..rows.div_ceil(TILE)).map(move |t| (i, t)))
                {
                    let mut out = [0.0f32; TILE];
                    tile_dots(isa, &t, tile, q, s, &negated(sums), &mut out);
                    for (lane, &got) in out.iter().enumerate() {
                        let r = tile * TILE + lane;
                        if r >= rows {
                            break;
                        }
                        let want = match format {
                            BlockFormat::Q8_0 => rows_q8_0_at(Isa::Portable, [w.row(r)], q, s)[0],
                            _ => rows_q4_0_at(Isa::Portable, [w.row(r)], q, s, sums)[0],
                        };
                        assert!(
                            same(got, want),
                            "{format:?} [{rows}, {cols}] row {r}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn nf4_tiles_give_the_integer_row_products_bits() {
    if !useful() {
        return;
    }
    let mut g = Lcg(11);
    for (rows, cols, block) in [
        (3usize, 32usize, 32usize),
        (16, 64, 64),
        (21, 96, 32),
        (33, 128, 64),
        (5, 32, 64),
    ] {
        let n = rows * cols;
        let blocks = n.div_ceil(block);
        let codes: Vec<u8> = (0..n / 2).map(|_| g.next() as u8).collect();
        let plain: Vec<f32> = (0..blocks).map(|i| 0.01 + (i % 13) as f32 * 0.03).collect();
        let qscales: Vec<u8> = (0..blocks).map(|_| g.next() as u8).collect();
        let ranges = vec![0.07f32; blocks.div_ceil(crate::nf4::SCALE_GROUP)];
        for double in [false, true] {
            let w = Nf4Weight {
                codes: &codes,
                scales: if double {
                    Scales::Double {
                        codes: &qscales,
                        ranges: &ranges,
                        offset: 0.1,
                    }
                } else {
                    Scales::Plain(&plain)
                },
                rows,
                cols,
                block,
            };
            let bytes = tile_nf4(&w).expect("whole blocks of 32 tile");
            let t = Tiles {
                kind: TileKind::Nf4,
                data: &bytes,
                rows,
                cols,
            };
            t.check().unwrap();
            let all: Vec<f32> = (0..blocks).map(|b| w.scale(b)).collect();
            let log = block.trailing_zeros();
            let shift = log - QK.trailing_zeros();
            for x in inputs(cols) {
                let xq = quantize_input(&x, cols);
                let (q, s, sums) = (&xq.q[..], &xq.scales[..], &xq.sums[..]);
                for (isa, tile) in
                    levels().flat_map(|i| (0..rows.div_ceil(TILE)).map(move |t| (i, t)))
                {
                    let mut out = [0.0f32; TILE];
                    tile_dots(isa, &t, tile, q, s, &negated(sums), &mut out);
                    for (lane, &got) in out.iter().enumerate() {
                        let r = tile * TILE + lane;
                        if r >= rows {
                            break;
                        }
                        let start = r * cols;
                        let row = Row {
                            codes: &codes[start / 2..(start + cols) / 2],
                            scales: &all[start >> log..],
                            phase: (start & (block - 1)) / QK,
                        };
                        let want = dots_at::<1>(Isa::Portable, [row], shift, q, s, sums)[0];
                        assert!(
                            same(got, want),
                            "nf4 [{rows}, {cols}] row {r}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn tiles_are_refused_where_they_do_not_fit() {
    let data = vec![0u8; 2 * 2 * 18];
    let w = BlockWeight {
        format: BlockFormat::Q4_0,
        data: &data,
        rows: 2,
        cols: 64,
    };
    assert!(tile_block(&BlockWeight { rows: 3, ..w }).is_none());
    assert!(tile_block(&BlockWeight {
        format: BlockFormat::F16,
        ..w
    })
    .is_none());
    let bytes = tile_block(&w).unwrap();
    let t = Tiles {
        kind: TileKind::Q4_0,
        data: &bytes,
        rows: 2,
        cols: 64,
    };
    assert!(t.check().is_ok());
    assert!(Tiles { rows: 17, ..t }.check().is_err());
}
