//! The step's products: linears that share an input, as one job of pieces of
//! weight rows (float32, block-layout or NF4) handed to the team.

use super::{Linear, Weight};
use crate::blockq::{piece_rows, quantize_rows, BlockFormat, QuantizedRows, ROWS};
use crate::f32_rows::dot_tile_f32;
use crate::f32_rows::tiles as f32_tiles;
use crate::nf4_int::{self, Nf4Input};
use crate::nf4_vector::{row_dot as nf4_row_dot, row_dots as nf4_row_dots};
use crate::pool::{parallel, Shared};

// A piece of output rows is one float32 tile.
const _: () = assert!(ROWS == f32_tiles::TILE);

/// Below this many weight elements a job runs on the calling thread.
const PARALLEL_WEIGHTS: usize = 1 << 16;

/// `outs[j] [m, rows_j] = x [m, cols] @ W_j^T (+ bias_j)` for linears sharing their
/// input, as one job of pieces of `ROWS` output rows.
pub(super) fn linears(lins: &[&Linear], x: &[f32], m: usize, outs: &mut [&mut [f32]]) {
    let k = lins[0].cols;
    let needs_codes = lins
        .iter()
        .any(|l| matches!(l.weight, Weight::Block(b) if b.format != BlockFormat::F16));
    let codes: Option<QuantizedRows> = needs_codes.then(|| quantize_rows(x, true));
    // NF4 with 8-bit inputs (when chosen): the input quantized once for every such linear.
    let nf4_codes: Option<Nf4Input> = (nf4_int::decode_int8()
        && lins
            .iter()
            .any(|l| matches!(l.weight, Weight::Nf4(w) if nf4_int::supports(&w))))
    .then(|| nf4_int::quantize_input(x, k));
    let mut pieces = Vec::new();
    for (j, l) in lins.iter().enumerate() {
        pieces.extend((0..l.rows.div_ceil(ROWS)).map(|p| (j, p * ROWS)));
    }
    let dst: Vec<Shared> = outs.iter_mut().map(|o| Shared::new(o)).collect();
    let piece = |p: usize| {
        let (j, first) = pieces[p];
        let l = lins[j];
        let last = (first + ROWS).min(l.rows);
        let width = last - first;
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
            Weight::Block(b) => {
                piece_rows(&b, codes.as_ref(), x, m, first..last, true, |i, r, v| {
                    t[i * width + r - first] = v
                })
            }
            Weight::Nf4(w) if nf4_codes.is_some() && nf4_int::supports(&w) => {
                let xq = nf4_codes.as_ref().expect("quantized above");
                nf4_int::piece_rows(&w, xq, m, first..last, |i, r, v| {
                    t[i * width + r - first] = v
                })
            }
            Weight::Nf4(w) => {
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
            for (c, r) in (first..last).enumerate() {
                let v = t[i * width + c];
                let v = match l.bias {
                    Some(b) => v + b[r],
                    None => v,
                };
                // SAFETY: element (i, r) of output j belongs to this piece alone.
                unsafe { *dst[j].at(i * l.rows + r) = v };
            }
        }
    };
    let work: usize = lins.iter().map(|l| l.size()).sum();
    if parallel(work, PARALLEL_WEIGHTS) {
        crate::team::team().run(pieces.len(), &piece);
    } else {
        (0..pieces.len()).for_each(piece);
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
}
