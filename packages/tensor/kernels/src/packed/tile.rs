//! The AVX2 micro-kernel: one MR x NR tile of the output in twelve registers,
//! updated by broadcast fused multiply-adds along the packed depth.

use std::arch::x86_64::*;

use super::{MR, NR};

/// One MR x NR output tile (`rows` x `cols` of it stored) from rows of A and a
/// B panel of depth `kc`: `c = (accumulate ? c : 0) + alpha * a @ b`. Element
/// `(r, p)` of A is at `a + r a_rs + p a_cs`: a packed panel (`1, MR`) or the
/// rows of a row-major operand read in place (`lda, 1`). Rows past `rows` read
/// the last row again and are never stored. A non-null `bias` (the tile's
/// columns) is added to each stored value after that, rounded once more: the
/// bits of adding it to the finished product.
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    kc: usize,
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    alpha: f32,
    accumulate: bool,
    bias: *const f32,
) {
    let z = _mm256_setzero_ps();
    let (mut c00, mut c01, mut c10, mut c11, mut c20, mut c21) = (z, z, z, z, z, z);
    let (mut c30, mut c31, mut c40, mut c41, mut c50, mut c51) = (z, z, z, z, z, z);
    let row = |r: usize| a.add(r.min(rows - 1) * a_rs);
    let (a0, a1, a2, a3, a4, a5) = (row(0), row(1), row(2), row(3), row(4), row(5));
    // The output tile is read (or written) after the loop: ask for it now.
    for r in 0..rows {
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + NR - 1) as *const i8);
    }
    let mut b = b;
    for p in 0..kc {
        let b0 = _mm256_loadu_ps(b);
        let b1 = _mm256_loadu_ps(b.add(8));
        let at = p * a_cs;
        macro_rules! row {
            ($ar:ident, $x0:ident, $x1:ident) => {
                let ai = _mm256_broadcast_ss(&*$ar.add(at));
                $x0 = _mm256_fmadd_ps(ai, b0, $x0);
                $x1 = _mm256_fmadd_ps(ai, b1, $x1);
            };
        }
        row!(a0, c00, c01);
        row!(a1, c10, c11);
        row!(a2, c20, c21);
        row!(a3, c30, c31);
        row!(a4, c40, c41);
        row!(a5, c50, c51);
        b = b.add(NR);
    }
    let acc = [
        [c00, c01],
        [c10, c11],
        [c20, c21],
        [c30, c31],
        [c40, c41],
        [c50, c51],
    ];
    store(&acc, c, ldc, rows, cols, alpha, accumulate, bias);
}

/// `c = (accumulate ? c : 0) + alpha * acc` for the `rows` x `cols` stored part
/// of a tile whose sums are `acc` (row `r` in `acc[r]`, columns 0..8 and 8..16),
/// then `+ bias[j]` where `bias` is not null.
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn store(
    acc: &[[__m256; 2]; MR],
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    alpha: f32,
    accumulate: bool,
    bias: *const f32,
) {
    if rows == MR && cols == NR {
        let scale = _mm256_set1_ps(alpha);
        for (r, halves) in acc.iter().enumerate() {
            for (h, &v) in halves.iter().enumerate() {
                let d = c.add(r * ldc + 8 * h);
                let y = if accumulate {
                    _mm256_fmadd_ps(v, scale, _mm256_loadu_ps(d))
                } else {
                    _mm256_mul_ps(v, scale)
                };
                let y = if bias.is_null() {
                    y
                } else {
                    _mm256_add_ps(y, _mm256_loadu_ps(bias.add(8 * h)))
                };
                _mm256_storeu_ps(d, y);
            }
        }
    } else {
        // The same arithmetic, one lane at a time, for the edge tiles.
        let mut sums = [0.0f32; MR * NR];
        for (r, halves) in acc.iter().enumerate() {
            _mm256_storeu_ps(sums.as_mut_ptr().add(r * NR), halves[0]);
            _mm256_storeu_ps(sums.as_mut_ptr().add(r * NR + 8), halves[1]);
        }
        for r in 0..rows {
            for (j, &v) in sums[r * NR..r * NR + cols].iter().enumerate() {
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
