//! The step's products: linears that share an input, as one job of pieces of
//! weight rows (float32, block-layout or NF4) handed to the team.

use super::{Linear, Weight};
use crate::blockq::f16_tiles;
use crate::blockq::tiles::{self, tile_dots, TileKind, Tiles, TILE};
use crate::blockq::{piece_rows, quantize_rows_into, BlockFormat, QuantizedRows, ROWS};
use crate::f32_rows::dot_tile_f32;
use crate::f32_rows::tiles as f32_tiles;
use crate::nf4_int::{self, Nf4Input};
use crate::nf4_vector::{row_dot as nf4_row_dot, row_dots as nf4_row_dots};
use crate::pool::{parallel, with_kept, Kept, Shared};

// A piece of output rows is one float32 tile, and whole F16 tiles.
const _: () = assert!(ROWS == f32_tiles::TILE && ROWS.is_multiple_of(f16_tiles::TILE));

/// Below this many weight elements a job runs on the calling thread.
const PARALLEL_WEIGHTS: usize = 1 << 16;

/// `outs[j] [m, rows_j] = x [m, cols] @ W_j^T (+ bias_j)` for linears sharing their
/// input, as one job of pieces of `ROWS` output rows.
pub(super) fn linears(lins: &[&Linear], x: &[f32], m: usize, outs: &mut [&mut [f32]]) {
    linears_then(lins, x, m, outs, None);
}

/// What a job applies to each output slice after its bias (see [`linears_then`]).
pub(super) type Then<'a> = dyn Fn(&mut [f32]) + Sync + 'a;

/// The most linears one job takes (query, key and value).
const MAX_LINEARS: usize = 4;

/// The input's quantizations and the job's pieces, kept for the next job on the
/// same thread (a decode step asks for the same sizes layer after layer).
#[derive(Default)]
struct Inputs {
    codes: QuantizedRows,
    nf4: Nf4Input,
    neg_sums: Vec<i32>,
    nf4_neg_sums: Vec<i32>,
    pieces: Vec<(usize, usize)>,
}

thread_local! {
    static INPUTS: Kept<Inputs> = const { Kept::new(None) };
}

/// [`linears`], with `then` applied to every output slice after its bias, by the
/// thread that computed it (an elementwise activation, so the bits are those of
/// applying it to the whole output afterwards).
pub(super) fn linears_then(
    lins: &[&Linear],
    x: &[f32],
    m: usize,
    outs: &mut [&mut [f32]],
    then: Option<&Then<'_>>,
) {
    assert!(lins.len() <= MAX_LINEARS && outs.len() == lins.len());
    with_kept(&INPUTS, |inputs| job(lins, x, m, outs, then, inputs));
}

fn job(
    lins: &[&Linear],
    x: &[f32],
    m: usize,
    outs: &mut [&mut [f32]],
    then: Option<&Then<'_>>,
    inputs: &mut Inputs,
) {
    let k = lins[0].cols;
    let needs_codes = lins.iter().any(|l| match l.weight {
        Weight::Block(b) | Weight::TiledBlock(b, _) => b.format != BlockFormat::F16,
        _ => false,
    });
    if needs_codes {
        quantize_rows_into(x, true, &mut inputs.codes);
    }
    // NF4 with 8-bit inputs (when chosen): the input quantized once for every such linear.
    let needs_nf4 = nf4_int::decode_int8()
        && lins.iter().any(|l| match l.weight {
            Weight::Nf4(w) | Weight::TiledNf4(w, _) => nf4_int::supports(&w),
            _ => false,
        });
    if needs_nf4 {
        nf4_int::quantize_input_into(x, k, &mut inputs.nf4);
    }
    // Tiles are read at this level only (the row products give the same bits).
    let isa = crate::isa::current();
    let tiled = tiles::runs(isa);
    let any_tiled = tiled
        && lins
            .iter()
            .any(|l| matches!(l.weight, Weight::TiledBlock(..) | Weight::TiledNf4(..)));
    // What the tiles take: minus the group sums, once for every linear.
    if any_tiled && needs_codes {
        tiles::negated_into(&inputs.codes.sums, &mut inputs.neg_sums);
    }
    if any_tiled && needs_nf4 {
        tiles::negated_into(&inputs.nf4.sums, &mut inputs.nf4_neg_sums);
    }
    let Inputs {
        codes,
        nf4,
        neg_sums,
        nf4_neg_sums,
        pieces,
    } = inputs;
    let codes = needs_codes.then_some(&*codes);
    let nf4_codes = needs_nf4.then_some(&*nf4);
    let neg_sums = (any_tiled && needs_codes).then_some(&neg_sums[..]);
    let nf4_neg_sums = (any_tiled && needs_nf4).then_some(&nf4_neg_sums[..]);
    pieces.clear();
    for (j, l) in lins.iter().enumerate() {
        pieces.extend((0..l.rows.div_ceil(ROWS)).map(|p| (j, p * ROWS)));
    }
    let pieces = &pieces[..];
    let mut none: [f32; 0] = [];
    let mut dst = [Shared::new(&mut none); MAX_LINEARS];
    for (d, o) in dst.iter_mut().zip(outs.iter_mut()) {
        *d = Shared::new(o);
    }
    let piece = |p: usize| {
        let (j, first) = pieces[p];
        let l = lins[j];
        let last = (first + ROWS).min(l.rows);
        let width = last - first;
        if let Some((tl, q, s, sums)) = tiled_input(
            l.weight,
            tiled,
            (codes, neg_sums),
            (nf4_codes, nf4_neg_sums),
        ) {
            // One tile: each input row's sixteen products straight to the output.
            let kb = k / crate::blockq::QK;
            let per = sums.len() / (m * kb).max(1);
            let mut y = [0.0f32; TILE];
            for i in 0..m {
                let (qi, si) = (&q[i * k..(i + 1) * k], &s[i * kb..(i + 1) * kb]);
                let sums = &sums[i * kb * per..(i + 1) * kb * per];
                tile_dots(isa, &tl, first / TILE, qi, si, sums, &mut y);
                // SAFETY: row i's outputs first..last of output j belong to this piece alone.
                unsafe { store(dst[j], i * l.rows, first..last, &y[..width], l.bias, then) };
            }
            return;
        }
        // The piece's products before the bias: on the stack for up to 16 input rows.
        let mut stack = [0.0f32; ROWS * 16];
        let mut heap = Vec::new();
        let t: &mut [f32] = if m * width <= stack.len() {
            &mut stack[..m * width]
        } else {
            heap.resize(m * width, 0.0);
            &mut heap
        };
        match l.weight {
            Weight::F32(w) => dot_tile_f32(&w[first * k..last * k], width, x, m, t),
            Weight::F32Tiled(w) => f32_tiles::dot_tile(&w[first * k..last * k], width, x, m, t),
            Weight::F16Tiled(w) => {
                f16_tiles::dot_piece(&w[2 * first * k..2 * last * k], width, x, m, t)
            }
            Weight::Block(b) | Weight::TiledBlock(b, _) => {
                piece_rows(&b, codes, x, m, first..last, true, |i, r, v| {
                    t[i * width + r - first] = v
                })
            }
            Weight::Nf4(w) | Weight::TiledNf4(w, _)
                if nf4_codes.is_some() && nf4_int::supports(&w) =>
            {
                let xq = nf4_codes.expect("quantized above");
                nf4_int::piece_rows(&w, xq, m, first..last, |i, r, v| {
                    t[i * width + r - first] = v
                })
            }
            Weight::Nf4(w) | Weight::TiledNf4(w, _) => {
                // Four rows at a time (the input's loads shared), each with the bits
                // of the one-row product.
                for i in 0..m {
                    let xi = &x[i * k..(i + 1) * k];
                    let mut r = first;
                    while r + 4 <= last {
                        let y = nf4_row_dots::<4>(&w, std::array::from_fn(|j| (r + j) * k), xi);
                        t[i * width + r - first..][..4].copy_from_slice(&y);
                        r += 4;
                    }
                    for r in r..last {
                        t[i * width + r - first] = nf4_row_dot(&w, r * k, xi);
                    }
                }
            }
        }
        for i in 0..m {
            let ti = &t[i * width..(i + 1) * width];
            // SAFETY: row i's outputs first..last of output j belong to this piece alone.
            unsafe { store(dst[j], i * l.rows, first..last, ti, l.bias, then) };
        }
    };
    let work: usize = lins.iter().map(|l| l.size()).sum();
    if parallel(work, PARALLEL_WEIGHTS) {
        crate::team::team().run(pieces.len(), &piece);
    } else {
        (0..pieces.len()).for_each(piece);
    }
}

/// `out[row + r] = v[r - first] (+ bias[r])` for `r` in `cols`, then `then` of the
/// slice: a piece's products of one input row, written as one slice.
///
/// # Safety
/// `out[row + cols]` must be in bounds and written by no other thread meanwhile.
unsafe fn store(
    out: Shared,
    row: usize,
    cols: std::ops::Range<usize>,
    v: &[f32],
    bias: Option<&[f32]>,
    then: Option<&Then<'_>>,
) {
    let o = std::slice::from_raw_parts_mut(out.at(row + cols.start), v.len());
    match bias {
        Some(b) => {
            for ((o, &v), &b) in o.iter_mut().zip(v).zip(&b[cols]) {
                *o = v + b;
            }
        }
        None => o.copy_from_slice(v),
    }
    if let Some(f) = then {
        f(o);
    }
}

/// A piece is one tile.
const _: () = assert!(ROWS == TILE);

/// The input of a tiled weight where its tiles are read (`tiled`): the tiles,
/// and the input's codes, scales and negated group sums (Q8_0 takes none).
type TiledInput<'w, 'c> = (Tiles<'w>, &'c [i8], &'c [f32], &'c [i32]);

fn tiled_input<'w, 'c>(
    w: Weight<'w>,
    tiled: bool,
    codes: (Option<&'c QuantizedRows>, Option<&'c [i32]>),
    nf4: (Option<&'c Nf4Input>, Option<&'c [i32]>),
) -> Option<TiledInput<'w, 'c>> {
    match (w, codes, nf4) {
        (Weight::TiledBlock(_, tl), (Some(a), Some(neg)), _) if tiled => {
            let sums: &[i32] = if tl.kind == TileKind::Q8_0 { &[] } else { neg };
            Some((tl, &a.q[..], &a.scales[..], sums))
        }
        (Weight::TiledNf4(_, tl), _, (Some(a), Some(neg))) if tiled => {
            Some((tl, &a.q[..], &a.scales[..], neg))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::dot8;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 37 + seed * 11) % 29) as f32 - 14.0) * 0.031)
            .collect()
    }

    #[test]
    fn linears_add_the_bias_and_ignore_the_other_rows() {
        let (n, k, m) = (37, 40, 3);
        let w = values(n * k, 3);
        let bias = values(n, 4);
        let x = values(m * k, 5);
        let lin = Linear {
            weight: Weight::F32(&w),
            rows: n,
            cols: k,
            bias: Some(&bias),
        };
        let mut all = vec![0.0; m * n];
        linears(&[&lin], &x, m, &mut [&mut all]);
        for i in 0..m {
            let mut one = vec![0.0; n];
            linears(&[&lin], &x[i * k..(i + 1) * k], 1, &mut [&mut one]);
            assert_eq!(&all[i * n..(i + 1) * n], &one[..]);
            for r in 0..n {
                let want = dot8(&w[r * k..(r + 1) * k], &x[i * k..(i + 1) * k]) + bias[r];
                assert_eq!(one[r].to_bits(), want.to_bits());
            }
        }
    }
    #[test]
    fn tiled_weights_give_the_bits_of_their_row_products() {
        use crate::blockq::tiles::{tile_block, tile_nf4, Tiles};
        use crate::blockq::BlockWeight;
        use crate::nf4::{Nf4Weight, Scales};
        let (n, k, m) = (37, 96, 3);
        let x = values(m * k, 5);
        let bias = values(n, 4);
        let bytes: Vec<u8> = (0..2 * n * k)
            .map(|i| ((i * 131 + 7) % 251) as u8)
            .collect();
        let scale_bytes = crate::blockq::f32_to_f16(0.01).to_le_bytes();
        let mut all = Vec::new();
        for (format, stride) in [(BlockFormat::Q8_0, 34), (BlockFormat::Q4_0, 18)] {
            let mut data = bytes[..n * k / 32 * stride].to_vec();
            for blk in data.chunks_exact_mut(stride) {
                blk[..2].copy_from_slice(&scale_bytes);
            }
            all.push((format, data));
        }
        let codes = &bytes[..n * k / 2];
        let absmax = values((n * k).div_ceil(64), 9);
        let nf4 = Nf4Weight {
            codes,
            scales: Scales::Plain(&absmax),
            rows: n,
            cols: k,
            block: 64,
        };
        let nf4_tiles = tile_nf4(&nf4).unwrap();
        let before = nf4_int::set_decode_int8(true);
        for (format, data) in &all {
            let b = BlockWeight {
                format: *format,
                data,
                rows: n,
                cols: k,
            };
            let tl = tile_block(&b).unwrap();
            let kind = if *format == BlockFormat::Q8_0 {
                TileKind::Q8_0
            } else {
                TileKind::Q4_0
            };
            let t = Tiles {
                kind,
                data: &tl,
                rows: n,
                cols: k,
            };
            let nf4_t = Tiles {
                kind: TileKind::Nf4,
                data: &nf4_tiles,
                rows: n,
                cols: k,
            };
            for (plain, tiled) in [
                (Weight::Block(b), Weight::TiledBlock(b, t)),
                (Weight::Nf4(nf4), Weight::TiledNf4(nf4, nf4_t)),
            ] {
                let lin = |weight| Linear {
                    weight,
                    rows: n,
                    cols: k,
                    bias: Some(&bias),
                };
                let (mut want, mut got) = (vec![0.0; m * n], vec![0.0; m * n]);
                linears(&[&lin(plain)], &x, m, &mut [&mut want]);
                linears(&[&lin(tiled)], &x, m, &mut [&mut got]);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{format:?}");
            }
        }
        nf4_int::set_decode_int8(before);
    }
}
