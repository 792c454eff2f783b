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
        if cs == 1 {
            for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
                let src = std::slice::from_raw_parts(ptr.add((p0 + p) * rs + c0), cols);
                dst[..cols].copy_from_slice(src);
            }
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
