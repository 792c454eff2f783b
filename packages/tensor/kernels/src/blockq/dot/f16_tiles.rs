//! F16 weights (GGUF rows of IEEE halves) in tiles of [`TILE`] rows laid out for one
//! sequential read, as `crate::f32_rows::tiles` lays out float32 rows: a tile of
//! `h` rows by `k` columns holds, for each group of 32 columns, the 32 halves of
//! every row in turn (`[k / 32][h][32]`, one 64-byte line a row), then the rows'
//! last `k % 32` halves (`[h][k % 32]`). A tile takes the place of its rows in the
//! row-major bytes (it starts at byte `2 * first_row * k`).
//!
//! Eight rows a tile keep the AVX-512 product's sixteen accumulators (two a row)
//! in registers, so a tile is read front to back once per three input rows. Every
//! element is summed as [`dot_f16`](super::dot_f16) sums the row-major row (the
//! four eight-lane sets of [`super`]'s order, then the tail), so the bits are the
//! same on every vector level.

use super::{add8, finish8, half_at};

/// Rows in an F16 tile (two to the decode step's piece of sixteen rows).
pub const TILE: usize = 8;

/// Halves per column group: one line of a row.
const GROUP: usize = 32;

/// Byte offset in a tile of `h` rows of row `r`'s halves of column group `c`.
#[inline(always)]
fn at(h: usize, r: usize, c: usize) -> usize {
    2 * (c * h + r) * GROUP
}

/// Byte offset in a tile of `h` rows of row `r`'s first tail half.
#[inline(always)]
fn tail_at(h: usize, k: usize, r: usize) -> usize {
    2 * (k / GROUP * GROUP * h + r * (k % GROUP))
}

/// The F16 rows `data` (`[rows, k]` halves, row-major bytes) in tiles of [`TILE`]
/// rows (the last one shorter when `TILE` does not divide `rows`), into `out`.
pub fn pack(data: &[u8], rows: usize, k: usize, out: &mut [u8]) {
    let bytes = 2 * rows * k;
    assert!(
        data.len() == bytes && out.len() == bytes,
        "pack: [{rows}, {k}] halves"
    );
    let (groups, whole) = (k / GROUP, k / GROUP * GROUP);
    for first in (0..rows).step_by(TILE) {
        let h = TILE.min(rows - first);
        let tile = &mut out[2 * first * k..2 * (first + h) * k];
        for r in 0..h {
            let row = &data[2 * (first + r) * k..2 * (first + r + 1) * k];
            for c in 0..groups {
                tile[at(h, r, c)..][..2 * GROUP]
                    .copy_from_slice(&row[2 * GROUP * c..][..2 * GROUP]);
            }
            tile[tail_at(h, k, r)..][..2 * (k - whole)].copy_from_slice(&row[2 * whole..]);
        }
    }
}

/// `out[i * n + r] = W[r] . x[i]` for the `n` rows of a piece (consecutive tiles
/// from a row that [`TILE`] divides, `2 * n * k` bytes as [`pack`] lays them out)
/// and the `m` rows of `x` (`[m, k]`), each with the bits of
/// [`dot_f16`](super::dot_f16) over the row-major row.
pub fn dot_piece(piece: &[u8], n: usize, x: &[f32], m: usize, out: &mut [f32]) {
    let k = x.len() / m.max(1);
    assert!(
        piece.len() >= 2 * n * k && x.len() >= m * k && out.len() >= m * n,
        "dot_piece: {n} F16 rows by {k}, {m} inputs"
    );
    for first in (0..n).step_by(TILE) {
        let h = TILE.min(n - first);
        let tile = &piece[2 * first * k..2 * (first + h) * k];
        #[cfg(target_arch = "x86_64")]
        if super::wide() {
            // SAFETY: the CPU has AVX-512 F, DQ, VL and AVX2, FMA, F16C; the sizes are
            // checked above.
            unsafe { avx512::tile(tile, h, x, m, k, n, first, out) };
            continue;
        }
        portable(tile, h, x, m, k, n, first, out);
    }
}

/// The plain-Rust walk of [`super`]'s F16 order (the AVX2 product's bits too).
#[allow(clippy::too_many_arguments)]
fn portable(
    tile: &[u8],
    h: usize,
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    first: usize,
    out: &mut [f32],
) {
    let whole = k / GROUP * GROUP;
    for i in 0..m {
        let xi = &x[i * k..(i + 1) * k];
        for r in 0..h {
            let mut sets = [[0.0f32; 8]; 4];
            for (e, &v) in xi[..whole].iter().enumerate() {
                let w = half_at(&tile[at(h, r, e / GROUP) + 2 * (e % GROUP)..]);
                let lane = &mut sets[(e / 8) % 4][e % 8];
                *lane = w.mul_add(v, *lane);
            }
            let mut rest = 0.0f32;
            for (e, &v) in xi[whole..].iter().enumerate() {
                rest = half_at(&tile[tail_at(h, k, r) + 2 * e..]).mul_add(v, rest);
            }
            let v = add8(&add8(&sets[0], &sets[1]), &add8(&sets[2], &sets[3]));
            out[i * n + first + r] = finish8(&v) + rest;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::avx512_f16::{finish, half, load16};
    use super::{at, tail_at, GROUP, TILE};

    /// Bytes ahead of the read position at which a whole tile is prefetched.
    const AHEAD: usize = 8192;

    /// Rows of one tile by input row `i`: each row's 32 halves of a group are sets
    /// 0-1 and 2-3 of [`super::super`]'s order, in two 512-bit accumulators.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows(
        tile: *const u8,
        h: usize,
        x: *const f32,
        k: usize,
        i: usize,
        n: usize,
        first: usize,
        out: *mut f32,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; TILE];
        for c in 0..k / GROUP {
            if h == TILE {
                let next = tile.wrapping_add(at(h, 0, c) + AHEAD);
                for line in 0..TILE {
                    // A hint only: a prefetch past the allocation does not fault.
                    _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(64 * line) as *const i8);
                }
            }
            let xp = x.add(i * k + GROUP * c);
            let xv = [_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16))];
            for (r, a) in acc.iter_mut().enumerate().take(h) {
                let p = tile.add(at(h, r, c));
                a[0] = _mm512_fmadd_ps(load16(p), xv[0], a[0]);
                a[1] = _mm512_fmadd_ps(load16(p.add(32)), xv[1], a[1]);
            }
        }
        let whole = k / GROUP * GROUP;
        let xi = x.add(i * k);
        for (r, a) in acc.iter().enumerate().take(h) {
            let tail = tile.add(tail_at(h, k, r));
            let mut rest = 0.0f32;
            for e in 0..k - whole {
                rest = half(tail.add(2 * e)).mul_add(*xi.add(whole + e), rest);
            }
            *out.add(i * n + first + r) = finish(a[0], a[1]) + rest;
        }
    }

    /// One tile against every input row in turn (its sixteen accumulators fill half
    /// the registers; the tile stays in cache between inputs).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq,avx512vl")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        tile: &[u8],
        h: usize,
        x: &[f32],
        m: usize,
        k: usize,
        n: usize,
        first: usize,
        out: &mut [f32],
    ) {
        let (t, xp, o) = (tile.as_ptr(), x.as_ptr(), out.as_mut_ptr());
        for i in 0..m {
            rows(t, h, xp, k, i, n, first, o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{dot_f16, dot_f16_portable};
    use super::*;
    use crate::blockq::f32_to_f16;

    fn halves(n: usize, seed: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                f32_to_f16((((i * 43 + seed * 7) % 37) as f32 - 18.0) * 0.027).to_le_bytes()
            })
            .collect()
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 29 + seed * 5) % 23) as f32 - 11.0) * 0.043)
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }

    /// Each element of every piece shape, on the path in use and on the portable
    /// walk, has the bits of the row-major product's (portable and dispatched).
    #[test]
    fn tiled_pieces_give_the_row_products_bits() {
        for (n, m, k) in [
            (16, 1, 384),
            (16, 3, 64),
            (16, 5, 1536),
            (13, 2, 100),
            (8, 4, 40),
            (3, 1, 31),
            (16, 7, 33),
        ] {
            let (w, x) = (halves(n * k, 1), values(m * k, 2));
            let mut tiled = vec![0u8; 2 * n * k];
            pack(&w, n, k, &mut tiled);
            let mut out = vec![f32::NAN; m * n];
            dot_piece(&tiled, n, &x, m, &mut out);
            let mut walked = vec![f32::NAN; m * n];
            for first in (0..n).step_by(TILE) {
                let h = TILE.min(n - first);
                portable(
                    &tiled[2 * first * k..2 * (first + h) * k],
                    h,
                    &x,
                    m,
                    k,
                    n,
                    first,
                    &mut walked,
                );
            }
            let row = |r: usize| &w[2 * r * k..2 * (r + 1) * k];
            let want: Vec<f32> = (0..m * n)
                .map(|e| dot_f16(row(e % n), &x[e / n * k..][..k]))
                .collect();
            let plain: Vec<f32> = (0..m * n)
                .map(|e| dot_f16_portable(row(e % n), &x[e / n * k..][..k]))
                .collect();
            assert_eq!(
                bits(&want),
                bits(&plain),
                "the row products' levels agree: {n} {m} {k}"
            );
            assert_eq!(
                bits(&out),
                bits(&want),
                "dispatched: {n} rows, {m} inputs, k {k}"
            );
            assert_eq!(
                bits(&walked),
                bits(&want),
                "portable: {n} rows, {m} inputs, k {k}"
            );
        }
    }
}
