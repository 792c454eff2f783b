//! The AVX-512 micro-kernel: an MR x 2NR tile of the output (two adjacent packed
//! column panels) in twelve 512-bit registers. Each output element is the same
//! fused multiply-add chain along the depth as in the AVX2 tile, and is stored by
//! the same arithmetic, so the bits do not depend on the vector width.

// The AVX-512 intrinsics are stable from Rust 1.89 (the crate's MSRV is older).

use std::arch::x86_64::*;

use super::{MR, NR};

/// [`super::tile::tile`] over the two panels at `b0` and `b1` (columns
/// `0..NR` and `NR..2 NR` of the tile, `cols` of them stored), `bias` as there.
#[target_feature(enable = "avx2,fma,avx512f,avx512dq,avx512vl")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile2(
    kc: usize,
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b0: *const f32,
    b1: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    alpha: f32,
    accumulate: bool,
    bias: *const f32,
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let ar: [*const f32; MR] = std::array::from_fn(|r| a.add(r.min(rows - 1) * a_rs));
    for r in 0..rows {
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + 2 * NR - 1) as *const i8);
    }
    for p in 0..kc {
        let x0 = _mm512_loadu_ps(b0.add(p * NR));
        let x1 = _mm512_loadu_ps(b1.add(p * NR));
        let at = p * a_cs;
        for r in 0..MR {
            let ai = _mm512_set1_ps(*ar[r].add(at));
            acc[r][0] = _mm512_fmadd_ps(ai, x0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(ai, x1, acc[r][1]);
        }
    }
    if rows == MR && cols == 2 * NR {
        let scale = _mm512_set1_ps(alpha);
        for (r, halves) in acc.iter().enumerate() {
            for (h, &v) in halves.iter().enumerate() {
                let d = c.add(r * ldc + NR * h);
                let y = if accumulate {
                    _mm512_fmadd_ps(v, scale, _mm512_loadu_ps(d))
                } else {
                    _mm512_mul_ps(v, scale)
                };
                let y = if bias.is_null() {
                    y
                } else {
                    _mm512_add_ps(y, _mm512_loadu_ps(bias.add(NR * h)))
                };
                _mm512_storeu_ps(d, y);
            }
        }
    } else {
        let mut sums = [0.0f32; MR * 2 * NR];
        for (r, halves) in acc.iter().enumerate() {
            _mm512_storeu_ps(sums.as_mut_ptr().add(r * 2 * NR), halves[0]);
            _mm512_storeu_ps(sums.as_mut_ptr().add(r * 2 * NR + NR), halves[1]);
        }
        for r in 0..rows {
            for (j, &v) in sums[r * 2 * NR..r * 2 * NR + cols].iter().enumerate() {
                let d = c.add(r * ldc + j);
                let y = if accumulate {
                    v.mul_add(alpha, *d)
                } else {
                    v * alpha
                };
                *d = if bias.is_null() { y } else { y + *bias.add(j) };
            }
        }
    }
}
