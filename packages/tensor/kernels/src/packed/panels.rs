//! Packing of the operands into the panels the register tile reads (see
//! [`super`]): the left operand into MR-row panels, the right one into
//! NR-column panels, each zero-padded past the matrix's edge.

use super::{Mat, MR, NR};

/// Rows `i0..i0 + mc`, columns `p0..p0 + kc` of `a` as MR-row panels: panel
/// `q` holds `[p][r]` = `a[i0 + q MR + r][p0 + p]`, zero past the last row.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn pack_a(a: Mat, i0: usize, mc: usize, p0: usize, kc: usize, dst: &mut [f32]) {
    let Mat(ptr, rs, cs) = a;
    for (q, panel) in dst
        .chunks_exact_mut(MR * kc)
        .take(mc.div_ceil(MR))
        .enumerate()
    {
        let r0 = i0 + q * MR;
        let rows = MR.min(i0 + mc - r0);
        if rows < MR {
            panel.fill(0.0);
        }
        if cs == 1 {
            for r in 0..rows {
                let src = std::slice::from_raw_parts(ptr.add((r0 + r) * rs + p0), kc);
                for (p, &v) in src.iter().enumerate() {
                    panel[p * MR + r] = v;
                }
            }
        } else if rs == 1 && rows == MR {
            // A transposed operand (a weight gradient's `g.T`): each p's MR rows
            // are adjacent, one fixed-size move (a loop of a run-time length is
            // scalar, and cost a third of the product when n is a few hundred).
            for (p, dst) in panel.chunks_exact_mut(MR).enumerate() {
                let src = ptr.add(r0 + (p0 + p) * cs).cast::<[f32; MR]>();
                dst.as_mut_ptr()
                    .cast::<[f32; MR]>()
                    .write_unaligned(src.read_unaligned());
            }
        } else {
            for (p, dst) in panel.chunks_exact_mut(MR).enumerate() {
                let src = ptr.add(r0 * rs + (p0 + p) * cs);
                for (r, d) in dst.iter_mut().take(rows).enumerate() {
                    *d = *src.add(r * rs);
                }
            }
        }
    }
}

/// Rows `p0..p0 + kc`, columns `j0..j0 + nc` of `b` as NR-column panels: panel
/// `q` holds `[p][c]` = `b[p0 + p][j0 + q NR + c]`, zero past the last column.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn pack_b(b: Mat, p0: usize, kc: usize, j0: usize, nc: usize, dst: &mut [f32]) {
    let Mat(ptr, rs, cs) = b;
    for (q, panel) in dst
        .chunks_exact_mut(NR * kc)
        .take(nc.div_ceil(NR))
        .enumerate()
    {
        let c0 = j0 + q * NR;
        let cols = NR.min(j0 + nc - c0);
        if cols < NR {
            panel.fill(0.0);
        }
        if cs == 1 && cols == NR {
            // Whole panels row by row as fixed-size moves (a slice copy of a length
            // known only at run time is a call to memcpy per 64 bytes).
            for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
                let src = ptr.add((p0 + p) * rs + c0).cast::<[f32; NR]>();
                dst.as_mut_ptr()
                    .cast::<[f32; NR]>()
                    .write_unaligned(src.read_unaligned());
            }
        } else if cs == 1 {
            for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
                let src = std::slice::from_raw_parts(ptr.add((p0 + p) * rs + c0), cols);
                dst[..cols].copy_from_slice(src);
            }
        } else if rs == 1 {
            // A transposed operand (a linear's weight): each column is contiguous
            // along p, so 8 x 8 blocks go through the registers transposed.
            transpose_into(ptr.add(c0 * cs + p0), cs, cols, kc, panel);
        } else {
            for c in 0..cols {
                let src = ptr.add(c0 * cs + c * cs + p0 * rs);
                for p in 0..kc {
                    panel[p * NR + c] = *src.add(p * rs);
                }
            }
        }
    }
}

/// `panel[p * NR + c] = src[c * stride + p]` for `c < cols`, `p < kc`: the
/// columns of a panel gathered from `cols` rows of `stride` elements, a plain copy
/// (the bits of the scalar loop), 8 x 8 at a time in AVX registers.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn transpose_into(
    src: *const f32,
    stride: usize,
    cols: usize,
    kc: usize,
    panel: &mut [f32],
) {
    use std::arch::x86_64::*;
    let dst = panel.as_mut_ptr();
    let mut c = 0;
    while c + 8 <= cols {
        let mut p = 0;
        while p + 8 <= kc {
            let r: [__m256; 8] =
                std::array::from_fn(|i| _mm256_loadu_ps(src.add((c + i) * stride + p)));
            // Interleave pairs, then quads, then swap the 128-bit halves.
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let rows = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            for (i, v) in rows.into_iter().enumerate() {
                _mm256_storeu_ps(dst.add((p + i) * NR + c), v);
            }
            p += 8;
        }
        for p in p..kc {
            for i in 0..8 {
                *dst.add(p * NR + c + i) = *src.add((c + i) * stride + p);
            }
        }
        c += 8;
    }
    for c in c..cols {
        for p in 0..kc {
            *dst.add(p * NR + c) = *src.add(c * stride + p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The register transpose packs exactly what the element-by-element loop
    /// packs, at every edge: partial column groups, depths off a multiple of 8,
    /// and a strided (row stride other than one) operand beside it.
    #[test]
    fn transposed_panels_match_the_scalar_pack() {
        if !crate::pool::has_avx2_fma() {
            return;
        }
        for &(k, n, p0, kc, j0, nc) in &[
            (40usize, 37usize, 0usize, 40usize, 0usize, 37usize),
            (45, 16, 3, 29, 0, 16),
            (384, 70, 0, 384, 5, 65),
            (9, 8, 1, 7, 0, 8),
        ] {
            let b: Vec<f32> = (0..n * k).map(|v| v as f32 * 0.5 - 3.0).collect();
            // b stored transposed: element (p, j) at j * k + p.
            let panels = nc.div_ceil(NR);
            let mut fast = vec![f32::NAN; panels * NR * kc];
            unsafe { pack_b(Mat(b.as_ptr(), 1, k), p0, kc, j0, nc, &mut fast) };
            let mut want = vec![0.0f32; panels * NR * kc];
            for q in 0..panels {
                for p in 0..kc {
                    for c in 0..NR {
                        let j = j0 + q * NR + c;
                        if j < j0 + nc {
                            want[q * NR * kc + p * NR + c] = b[j * k + p0 + p];
                        }
                    }
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&fast),
                bits(&want),
                "k={k} n={n} p0={p0} kc={kc} j0={j0} nc={nc}"
            );
        }
    }

    /// Row-major panels (whole ones copied as fixed-size rows, the last partial
    /// one by slice and zero-filled) are exactly the elements of the operand.
    #[test]
    fn row_major_panels_match_the_scalar_pack() {
        if !crate::pool::has_avx2_fma() {
            return;
        }
        for &(k, n, p0, kc, j0, nc) in &[
            (40usize, 37usize, 0usize, 40usize, 0usize, 37usize),
            (45, 48, 3, 29, 16, 32),
            (384, 70, 0, 384, 5, 65),
        ] {
            let b: Vec<f32> = (0..k * n).map(|v| v as f32 * 0.25 - 7.0).collect();
            let panels = nc.div_ceil(NR);
            let mut fast = vec![f32::NAN; panels * NR * kc];
            unsafe { pack_b(Mat(b.as_ptr(), n, 1), p0, kc, j0, nc, &mut fast) };
            let mut want = vec![0.0f32; panels * NR * kc];
            for q in 0..panels {
                for p in 0..kc {
                    for c in 0..NR {
                        let j = j0 + q * NR + c;
                        if j < j0 + nc {
                            want[q * NR * kc + p * NR + c] = b[(p0 + p) * n + j];
                        }
                    }
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&fast),
                bits(&want),
                "k={k} n={n} p0={p0} kc={kc} j0={j0} nc={nc}"
            );
        }
    }
}
