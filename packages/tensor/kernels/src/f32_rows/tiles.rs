//! Float32 weights in tiles of [`TILE`] rows laid out for one sequential read: a
//! tile of `h` rows by `k` columns holds, for each group of eight columns, the
//! eight values of every row in turn (`[k / 8][h][8]`), then the rows' last
//! `k % 8` values (`[h][k % 8]`). A tile takes the place of its rows in a
//! row-major matrix (it starts at `first_row * k`), so a piece of rows is a
//! slice of either layout.
//!
//! Read in row order, a tile of sixteen rows is sixteen streams 1.5 KB long at
//! `k = 384`, interleaved with the other rows' streams: the hardware prefetcher
//! follows a few of them and the decode step's float32 products ran at about 10
//! GB/s on one AVX-512 core against 31 GB/s for a plain sequential read
//! (`bench/bench_stream.py`). Tiled, the same products read each tile front to
//! back, prefetched a fixed distance ahead.
//!
//! [`dot_tile`] sums every element exactly as [`dot8`](crate::lanes::dot8) sums
//! the row-major row (lane `j` takes columns `j, j + 8, …` in one fused
//! multiply-add chain, the lanes added in order from 0, the tail last), so the
//! bits are those of the row-major products on every vector path.

/// Rows in a tile: the decode step's piece of output rows.
pub const TILE: usize = 16;

/// Offset in a tile of `h` rows of row `r`'s eight values of column group `c`.
#[inline(always)]
fn at(h: usize, r: usize, c: usize) -> usize {
    (c * h + r) * 8
}

/// Offset in a tile of `h` rows of row `r`'s first tail value.
#[inline(always)]
fn tail_at(h: usize, k: usize, r: usize) -> usize {
    k / 8 * 8 * h + r * (k % 8)
}

/// `w` (`[rows, k]`, row-major) in tiles of [`TILE`] rows (the last one shorter
/// when `TILE` does not divide `rows`), into `out` (`rows * k` floats).
pub fn pack(w: &[f32], rows: usize, k: usize, out: &mut [f32]) {
    assert!(
        w.len() == rows * k && out.len() == rows * k,
        "pack: [{rows}, {k}]"
    );
    let (groups, whole) = (k / 8, k / 8 * 8);
    for first in (0..rows).step_by(TILE) {
        let h = TILE.min(rows - first);
        let tile = &mut out[first * k..(first + h) * k];
        for r in 0..h {
            let row = &w[(first + r) * k..(first + r + 1) * k];
            for c in 0..groups {
                tile[at(h, r, c)..][..8].copy_from_slice(&row[8 * c..8 * c + 8]);
            }
            tile[tail_at(h, k, r)..][..k - whole].copy_from_slice(&row[whole..]);
        }
    }
}

/// `out[i * h + r] = W[r] . x[i]` for the `h` rows of one tile (`h * k` floats, as
/// [`pack`] lays it out) and the `m` rows of `x` (`[m, k]`), each element with the
/// bits of [`dot8`](crate::lanes::dot8) over the row-major row.
pub fn dot_tile(tile: &[f32], h: usize, x: &[f32], m: usize, out: &mut [f32]) {
    let k = x.len() / m.max(1);
    assert!(
        tile.len() >= h * k && x.len() >= m * k && out.len() >= m * h,
        "dot_tile: a tile of {h} rows by {k}, {m} inputs"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::isa::current() >= crate::isa::Isa::Avx512 {
        // SAFETY: the CPU has AVX-512 F, DQ and VL (and AVX2 and FMA); the sizes are
        // checked above.
        return unsafe { avx512::dot_tile(tile, h, x, m, k, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA; the sizes are checked above.
        return unsafe { avx2::dot_tile(tile, h, x, m, k, out) };
    }
    portable(tile, h, x, m, k, out);
}

/// The plain-Rust order every vector path keeps.
fn portable(tile: &[f32], h: usize, x: &[f32], m: usize, k: usize, out: &mut [f32]) {
    let (groups, whole) = (k / 8, k / 8 * 8);
    for i in 0..m {
        let xi = &x[i * k..(i + 1) * k];
        for r in 0..h {
            let mut lanes = [0.0f32; 8];
            for c in 0..groups {
                let w = &tile[at(h, r, c)..][..8];
                for j in 0..8 {
                    lanes[j] = w[j].mul_add(xi[8 * c + j], lanes[j]);
                }
            }
            let mut s = 0.0f32;
            for v in lanes {
                s += v;
            }
            let tail = &tile[tail_at(h, k, r)..][..k - whole];
            for (w, v) in tail.iter().zip(&xi[whole..]) {
                s = w.mul_add(*v, s);
            }
            out[i * h + r] = s;
        }
    }
}

/// Lane sums in order, then row `r`'s tail against input row `xi` (the end of
/// every path's sum).
///
/// # Safety
/// `tile` holds a tile of `h` rows by `k`; `xi` holds `k` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn finish(
    lanes: &[f32],
    tile: *const f32,
    h: usize,
    k: usize,
    r: usize,
    xi: *const f32,
) -> f32 {
    let mut s = 0.0f32;
    for &v in lanes {
        s += v;
    }
    let whole = k / 8 * 8;
    let tail = tile.add(tail_at(h, k, r));
    for c in 0..k - whole {
        s = (*tail.add(c)).mul_add(*xi.add(whole + c), s);
    }
    s
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{at, finish};

    /// Rows `r0..r0 + R` of the tile by inputs `i0..i0 + M`: one eight-lane chain an element.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn rows<const R: usize, const M: usize>(
        tile: *const f32,
        h: usize,
        x: *const f32,
        k: usize,
        r0: usize,
        i0: usize,
        out: *mut f32,
    ) {
        let mut acc = [[_mm256_setzero_ps(); M]; R];
        for c in 0..k / 8 {
            let xv: [__m256; M] =
                std::array::from_fn(|i| _mm256_loadu_ps(x.add((i0 + i) * k + 8 * c)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = _mm256_loadu_ps(tile.add(at(h, r0 + r, c)));
                for i in 0..M {
                    acc[i] = _mm256_fmadd_ps(wv, xv[i], acc[i]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (i, a) in acc.iter().enumerate() {
                let mut lanes = [0.0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), *a);
                let xi = x.add((i0 + i) * k);
                *out.add((i0 + i) * h + r0 + r) = finish(&lanes, tile, h, k, r0 + r, xi);
            }
        }
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn inputs<const R: usize>(
        tile: *const f32,
        h: usize,
        x: *const f32,
        m: usize,
        k: usize,
        r0: usize,
        out: *mut f32,
    ) {
        let mut i0 = 0;
        while i0 + 3 <= m {
            rows::<R, 3>(tile, h, x, k, r0, i0, out);
            i0 += 3;
        }
        match m - i0 {
            2 => rows::<R, 2>(tile, h, x, k, r0, i0, out),
            1 => rows::<R, 1>(tile, h, x, k, r0, i0, out),
            _ => {}
        }
    }

    /// [`super::dot_tile`] on AVX2: four rows at a time.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn dot_tile(
        tile: &[f32],
        h: usize,
        x: &[f32],
        m: usize,
        k: usize,
        out: &mut [f32],
    ) {
        let (t, xp, o) = (tile.as_ptr(), x.as_ptr(), out.as_mut_ptr());
        let mut r0 = 0;
        while r0 + 4 <= h {
            inputs::<4>(t, h, xp, m, k, r0, o);
            r0 += 4;
        }
        while r0 < h {
            inputs::<1>(t, h, xp, m, k, r0, o);
            r0 += 1;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::{at, finish, TILE};

    /// Floats ahead of the read position at which a whole tile is prefetched: far
    /// enough to cover the memory latency at the core's read rate, one line a load.
    const AHEAD: usize = 2048;

    /// Row pairs `r0..r0 + 2P` of the tile by inputs `i0..i0 + M`: each 512-bit
    /// register holds the two rows' eight-lane chains (the pair's 16 values of a
    /// column group are adjacent). A whole tile (`2P == h`) is one sequential
    /// read, prefetched `AHEAD` floats ahead.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn pairs<const P: usize, const M: usize>(
        tile: *const f32,
        h: usize,
        x: *const f32,
        k: usize,
        r0: usize,
        i0: usize,
        out: *mut f32,
    ) {
        let whole_tile = 2 * P == h;
        let mut acc = [[_mm512_setzero_ps(); M]; P];
        for c in 0..k / 8 {
            if whole_tile {
                let next = tile.wrapping_add(at(h, 0, c) + AHEAD);
                for line in 0..P {
                    // A hint only: a prefetch past the allocation does not fault.
                    _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(16 * line) as *const i8);
                }
            }
            let xv: [__m512; M] = std::array::from_fn(|i| {
                _mm512_broadcast_f32x8(_mm256_loadu_ps(x.add((i0 + i) * k + 8 * c)))
            });
            for (q, acc) in acc.iter_mut().enumerate() {
                let wv = _mm512_loadu_ps(tile.add(at(h, r0 + 2 * q, c)));
                for i in 0..M {
                    acc[i] = _mm512_fmadd_ps(wv, xv[i], acc[i]);
                }
            }
        }
        for (q, acc) in acc.iter().enumerate() {
            for (i, a) in acc.iter().enumerate() {
                let mut lanes = [0.0f32; 16];
                _mm512_storeu_ps(lanes.as_mut_ptr(), *a);
                let xi = x.add((i0 + i) * k);
                for half in 0..2 {
                    let r = r0 + 2 * q + half;
                    *out.add((i0 + i) * h + r) = finish(&lanes[8 * half..][..8], tile, h, k, r, xi);
                }
            }
        }
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn inputs<const P: usize>(
        tile: *const f32,
        h: usize,
        x: *const f32,
        m: usize,
        k: usize,
        r0: usize,
        out: *mut f32,
    ) {
        let mut i0 = 0;
        while i0 + 3 <= m {
            pairs::<P, 3>(tile, h, x, k, r0, i0, out);
            i0 += 3;
        }
        match m - i0 {
            2 => pairs::<P, 2>(tile, h, x, k, r0, i0, out),
            1 => pairs::<P, 1>(tile, h, x, k, r0, i0, out),
            _ => {}
        }
    }

    /// [`super::dot_tile`] on AVX-512: a whole tile as eight row pairs, a short one in
    /// fours, pairs and a last row (the AVX2 chain, the same bits).
    #[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
    pub(crate) unsafe fn dot_tile(
        tile: &[f32],
        h: usize,
        x: &[f32],
        m: usize,
        k: usize,
        out: &mut [f32],
    ) {
        let (t, xp, o) = (tile.as_ptr(), x.as_ptr(), out.as_mut_ptr());
        if h == TILE {
            return inputs::<{ TILE / 2 }>(t, h, xp, m, k, 0, o);
        }
        let mut r0 = 0;
        while r0 + 8 <= h {
            inputs::<4>(t, h, xp, m, k, r0, o);
            r0 += 8;
        }
        while r0 + 2 <= h {
            inputs::<1>(t, h, xp, m, k, r0, o);
            r0 += 2;
        }
        if r0 < h {
            for i0 in 0..m {
                super::avx2::rows::<1, 1>(t, h, xp, k, r0, i0, o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::dot8;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 41 + seed * 13) % 31) as f32 - 15.0) * 0.029)
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }

    const SHAPES: [(usize, usize, usize); 8] = [
        (16, 1, 384),
        (16, 3, 64),
        (16, 5, 13),
        (7, 2, 100),
        (9, 1, 8),
        (1, 4, 3),
        (16, 16, 1536),
        (2, 7, 17),
    ];

    /// Every element of a packed tile has the bits of `dot8` over its row-major row.
    fn check(run: impl Fn(&[f32], usize, &[f32], usize, usize, &mut [f32]), what: &str) {
        for (h, m, k) in SHAPES {
            let (w, x) = (values(h * k, 1), values(m * k, 2));
            let mut tile = vec![0.0; h * k];
            pack(&w, h, k, &mut tile);
            let mut out = vec![f32::NAN; m * h];
            run(&tile, h, &x, m, k, &mut out);
            let want: Vec<f32> = (0..m * h)
                .map(|e| {
                    let (i, r) = (e / h, e % h);
                    dot8(&w[r * k..(r + 1) * k], &x[i * k..(i + 1) * k])
                })
                .collect();
            assert_eq!(
                bits(&out),
                bits(&want),
                "{what}: {h} rows, {m} inputs, k {k}"
            );
        }
    }

    #[test]
    fn the_portable_order_is_dot8s() {
        check(portable, "portable");
    }

    #[test]
    fn the_dispatched_path_is_dot8s() {
        check(|t, h, x, m, _, o| dot_tile(t, h, x, m, o), "dispatched");
    }

    /// Every vector path the CPU runs (the others are said to be skipped).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_vector_path_is_dot8s() {
        use crate::isa::{detected, Isa};
        if detected() >= Isa::Avx2 {
            // SAFETY: the CPU has AVX2 and FMA.
            check(
                |t, h, x, m, k, o| unsafe { avx2::dot_tile(t, h, x, m, k, o) },
                "avx2",
            );
        } else {
            eprintln!("no AVX2 here: its tiled path is not run");
        }
        if detected() >= Isa::Avx512 {
            // SAFETY: the CPU has AVX-512 F, DQ and VL.
            check(
                |t, h, x, m, k, o| unsafe { avx512::dot_tile(t, h, x, m, k, o) },
                "avx512",
            );
        } else {
            eprintln!("no AVX-512 here: its tiled path is not run");
        }
    }

    #[test]
    fn a_matrix_packs_tile_by_tile_in_place_of_its_rows() {
        let (rows, k) = (37, 20);
        let w = values(rows * k, 3);
        let mut packed = vec![0.0; rows * k];
        pack(&w, rows, k, &mut packed);
        for first in (0..rows).step_by(TILE) {
            let h = TILE.min(rows - first);
            let mut alone = vec![0.0; h * k];
            pack(&w[first * k..(first + h) * k], h, k, &mut alone);
            assert_eq!(bits(&packed[first * k..(first + h) * k]), bits(&alone));
        }
        let mut sorted_in = bits(&w);
        let mut sorted_out = bits(&packed);
        sorted_in.sort_unstable();
        sorted_out.sort_unstable();
        assert_eq!(
            sorted_in, sorted_out,
            "packing moves values, it changes none"
        );
    }
}
