//! The AVX-512 versions of the float32 row products, with the bits of the AVX2
//! ones: each 512-bit register holds the eight-lane chains of two weight rows
//! (row `2q` in lanes 0..8, row `2q + 1` in lanes 8..16), so every element keeps
//! its lane (`c % 8`), its fused multiply-add chain and its final order (the
//! eight lanes in order, then the tail). Tiles are twice as tall as on AVX2
//! (eight weight rows), which keeps eight weight streams in flight, and each row
//! is prefetched a fixed distance ahead.

// The AVX-512 intrinsics are stable from Rust 1.89 (the crate's MSRV is older).

use std::arch::x86_64::*;

use super::avx2;

/// Elements ahead of the current position at which each weight row is prefetched.
const AHEAD: usize = 512;

/// `P` pairs of weight rows (`stride` apart, from row `r0`) by `M` input rows (from
/// `i0`, `k` apart) into `out` (`[m, rows]`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pairs<const P: usize, const M: usize>(
    w: &[f32],
    stride: usize,
    x: &[f32],
    k: usize,
    rows: usize,
    r0: usize,
    i0: usize,
    out: &mut [f32],
) {
    let whole = k / 8 * 8;
    let wp: [[*const f32; 2]; P] = std::array::from_fn(|q| {
        let r = r0 + 2 * q;
        [w.as_ptr().add(r * stride), w.as_ptr().add((r + 1) * stride)]
    });
    let xp: [*const f32; M] = std::array::from_fn(|i| x.as_ptr().add((i0 + i) * k));
    let mut acc = [[_mm512_setzero_ps(); M]; P];
    let mut c = 0;
    while c < whole {
        if c % 16 == 0 {
            for q in wp.iter() {
                // A hint only: a prefetch past the allocation does not fault.
                _mm_prefetch::<_MM_HINT_T0>(q[0].wrapping_add(c + AHEAD) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(q[1].wrapping_add(c + AHEAD) as *const i8);
            }
        }
        let xv: [__m512; M] =
            std::array::from_fn(|i| _mm512_broadcast_f32x8(_mm256_loadu_ps(xp[i].add(c))));
        for q in 0..P {
            let lo = _mm512_castps256_ps512(_mm256_loadu_ps(wp[q][0].add(c)));
            let wv = _mm512_insertf32x8::<1>(lo, _mm256_loadu_ps(wp[q][1].add(c)));
            for i in 0..M {
                acc[q][i] = _mm512_fmadd_ps(wv, xv[i], acc[q][i]);
            }
        }
        c += 8;
    }
    if P == 4 && whole == k {
        // Eight rows' sums at once, each row's lanes added in order.
        for i in 0..M {
            let acc: [__m512; 4] = std::array::from_fn(|q| acc[q][i]);
            let sums = lane_sums(acc);
            _mm256_storeu_ps(out.as_mut_ptr().add((i0 + i) * rows + r0), sums);
        }
        return;
    }
    for q in 0..P {
        for i in 0..M {
            let mut lanes = [0.0f32; 16];
            _mm512_storeu_ps(lanes.as_mut_ptr(), acc[q][i]);
            for half in 0..2 {
                let mut s = 0.0f32;
                for &v in &lanes[8 * half..8 * half + 8] {
                    s += v;
                }
                let row = wp[q][half];
                for c in whole..k {
                    s = (*row.add(c)).mul_add(*xp[i].add(c), s);
                }
                out[(i0 + i) * rows + r0 + 2 * q + half] = s;
            }
        }
    }
}

/// [`lane_sums`]' permute indices: `[p][group]` gathers lanes `p` and `p + 4` of
/// rows `4 * group .. 4 * group + 4` into lanes `half * 8 + r` (half 0 for lane
/// `p`). Element (row r, lane j) is lane `(r % 2) * 8 + j` of `acc[r / 2]`, and a
/// two-source permute takes its second source with index bit 4.
const PERMUTES: [[[i32; 16]; 2]; 4] = {
    let mut t = [[[0i32; 16]; 2]; 4];
    let mut p = 0;
    while p < 4 {
        let mut r = 0;
        while r < 8 {
            let mut half = 0;
            while half < 2 {
                t[p][r / 4][half * 8 + r] =
                    (((r / 2) % 2) * 16 + (r % 2) * 8 + p + 4 * half) as i32;
                half += 1;
            }
            r += 1;
        }
        p += 1;
    }
    t
};

/// The sums of eight rows' eight-lane chains, `acc[q]` holding rows `2q` (low
/// half) and `2q + 1` (high half): for each row `((l0 + l1) + l2) + ... + l7`, the
/// order of the row-at-a-time sum, so the same bits. The chains are transposed
/// by two-source permutes into `z[p]` = lane `p` of the eight rows (low half) and
/// lane `p + 4` (high half).
#[inline(always)]
unsafe fn lane_sums(acc: [__m512; 4]) -> __m256 {
    let index = |p: usize, group: usize| _mm512_loadu_si512(PERMUTES[p][group].as_ptr().cast());
    let z: [__m512; 4] = std::array::from_fn(|p| {
        let low = _mm512_permutex2var_ps(acc[0], index(p, 0), acc[1]);
        let high = _mm512_permutex2var_ps(acc[2], index(p, 1), acc[3]);
        _mm512_mask_blend_ps(0xF0F0, low, high)
    });
    let first = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(z[0], z[1]), z[2]), z[3]);
    let mut s = _mm512_castps512_ps256(first);
    for zp in z {
        s = _mm256_add_ps(s, _mm512_extractf32x8_ps::<1>(zp));
    }
    s
}

/// The `m` inputs (in threes) against the `P` row pairs from `r0`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn inputs<const P: usize>(
    w: &[f32],
    stride: usize,
    x: &[f32],
    k: usize,
    rows: usize,
    m: usize,
    r0: usize,
    out: &mut [f32],
) {
    let mut i0 = 0;
    while i0 + 3 <= m {
        pairs::<P, 3>(w, stride, x, k, rows, r0, i0, out);
        i0 += 3;
    }
    match m - i0 {
        2 => pairs::<P, 2>(w, stride, x, k, rows, r0, i0, out),
        1 => pairs::<P, 1>(w, stride, x, k, rows, r0, i0, out),
        _ => {}
    }
}

/// Rows in tiles of up to eight (the weight rows outside, as on AVX2, so a tile
/// stays in cache for every input); the last odd row takes the AVX2 tile (the
/// same bits).
#[inline(always)]
unsafe fn all_rows(
    w: &[f32],
    stride: usize,
    x: &[f32],
    k: usize,
    rows: usize,
    m: usize,
    out: &mut [f32],
) {
    let mut r0 = 0;
    while r0 + 8 <= rows {
        inputs::<4>(w, stride, x, k, rows, m, r0, out);
        r0 += 8;
    }
    while r0 + 2 <= rows {
        inputs::<1>(w, stride, x, k, rows, m, r0, out);
        r0 += 2;
    }
    if r0 < rows {
        for i0 in 0..m {
            avx2::tile_strided::<1, 1>(w, stride, x, k, rows, r0, i0, out);
        }
    }
}

/// `out[r] = w[r * stride..][..x.len()] . x` for `out.len()` rows.
#[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
pub(super) unsafe fn dot_rows_strided(w: &[f32], stride: usize, x: &[f32], out: &mut [f32]) {
    let (k, rows) = (x.len(), out.len());
    assert!(rows == 0 || (rows - 1) * stride + k <= w.len());
    all_rows(w, stride, x, k, rows, 1, out);
}

/// `out[i * rows + r] = w[r] . x[i]` (see [`super::dot_tile_f32`]).
#[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
pub(super) unsafe fn dot_tile_f32(
    w: &[f32],
    rows: usize,
    x: &[f32],
    m: usize,
    k: usize,
    out: &mut [f32],
) {
    assert!(w.len() >= rows * k && x.len() >= m * k && out.len() >= m * rows);
    all_rows(w, k, x, k, rows, m, out);
}
