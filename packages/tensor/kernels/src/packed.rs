//! Packed single-precision matrix products: the engine under `matmul` and the
//! attention kernels.
//!
//! On x86-64 with AVX2 and FMA this is the three-level blocking of Goto and van
//! de Geijn ("Anatomy of High-Performance Matrix Multiplication", ACM TOMS 34(3),
//! 2008) as BLIS arranges it: a KC-deep slice of the right operand is packed into
//! NR-wide panels (which stream through L1), an MC x KC block of the left operand
//! into MR-tall panels (which stay in L2), and an MR x NR = 6 x 16 tile of the
//! output lives in twelve AVX registers while broadcast FMAs update it. Elsewhere
//! the `gemm` crate does the work.
//!
//! Summation order: output element (i, j) accumulates `p` ascending inside each
//! KC slice in one register lane, and each slice's sum is added to the output in
//! slice order. Nothing depends on which tile, call or thread computes an element,
//! so callers may split the output any way they like and get identical bits.

/// A strided matrix operand: pointer, row stride and column stride (elements).
#[derive(Clone, Copy)]
pub struct Mat(pub *const f32, pub usize, pub usize);

// SAFETY: a Mat is only read through, and whoever builds one keeps the matrix
// alive and unwritten while any thread reads it.
unsafe impl Send for Mat {}
unsafe impl Sync for Mat {}

/// `dst[m x n]` (row stride `dst_rs`) `= (accumulate ? dst : 0) + alpha * lhs @ rhs`.
///
/// # Safety
/// Every element addressed lies inside the allocation its pointer points into,
/// and no other thread touches the `dst` elements during the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_into(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: usize,
    accumulate: bool,
    lhs: Mat,
    rhs: Mat,
    alpha: f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                std::slice::from_raw_parts_mut(dst.add(r * dst_rs), n).fill(0.0);
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() {
        avx2::gemm(m, n, k, dst, dst_rs, accumulate, lhs, rhs, alpha);
        return;
    }
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        accumulate,
        lhs.0,
        lhs.2 as isize,
        lhs.1 as isize,
        rhs.0,
        rhs.2 as isize,
        rhs.1 as isize,
        1.0f32,
        alpha,
        false,
        false,
        false,
        gemm::Parallelism::None,
    );
}

/// Rows of the register tile; a split of the output into row bands costs least
/// at multiples of this.
pub const MR: usize = 6;
/// Columns of the register tile.
pub const NR: usize = 16;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::cell::RefCell;

    use super::{Mat, MR, NR};

    /// Greatest depth of one packed slice. The depth is `k` split evenly into as
    /// few slices as this allows: a function of `k` alone, because the slices fix
    /// the summation order.
    const KC: usize = 384;
    /// Rows of the left operand packed at once (a multiple of MR).
    const MC: usize = 144;
    /// Columns of the right operand packed at once (a multiple of NR).
    const NC: usize = 4080;

    thread_local! {
        /// Packing buffers of the left and right operand, reused across calls.
        static PACKS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    }

    /// Rows `i0..i0 + mc`, columns `p0..p0 + kc` of `a` as MR-row panels: panel
    /// `q` holds `[p][r]` = `a[i0 + q MR + r][p0 + p]`, zero past the last row.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pack_a(a: Mat, i0: usize, mc: usize, p0: usize, kc: usize, dst: &mut [f32]) {
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
    unsafe fn pack_b(b: Mat, p0: usize, kc: usize, j0: usize, nc: usize, dst: &mut [f32]) {
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

    /// One MR x NR output tile (`rows` x `cols` of it stored) from rows of A and a
    /// B panel of depth `kc`: `c = (accumulate ? c : 0) + alpha * a @ b`. Element
    /// `(r, p)` of A is at `a + r a_rs + p a_cs`: a packed panel (`1, MR`) or the
    /// rows of a row-major operand read in place (`lda, 1`). Rows past `rows` read
    /// the last row again and are never stored.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
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
                    *d = if accumulate {
                        v.mul_add(alpha, *d)
                    } else {
                        v * alpha
                    };
                }
            }
        }
    }

    /// Depth of each slice of a `k`-deep product: `k` split evenly into as few
    /// slices as KC allows (a function of `k` alone).
    pub(super) fn slice_depth(k: usize) -> usize {
        k.div_ceil(k.div_ceil(KC))
    }

    fn grow(buffer: &mut Vec<f32>, len: usize) {
        if buffer.len() < len {
            buffer.resize(len, 0.0);
        }
    }

    /// Rows `i0..i1` of `dst[:, 0..nc] (+)= alpha * a[:, pc..pc + kc] @ panels`, the
    /// `nc` columns packed at `bp` for this slice; `dst` addresses row 0.
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows_times_panels(
        a: Mat,
        i0: usize,
        i1: usize,
        pc: usize,
        kc: usize,
        bp: *const f32,
        nc: usize,
        dst: *mut f32,
        ldc: usize,
        alpha: f32,
        add: bool,
        apack: &mut Vec<f32>,
    ) {
        for ic in (i0..i1).step_by(MC) {
            let mc = MC.min(i1 - ic);
            // A row-major left operand is read in place: its rows are already
            // contiguous along p, and the MC block stays in L2.
            // (start, row stride, column stride, offset of the next MR rows)
            let (ap, a_rs, a_cs, step) = if a.2 == 1 {
                (a.0.add(ic * a.1 + pc), a.1, 1, a.1)
            } else {
                grow(apack, mc.next_multiple_of(MR) * kc);
                pack_a(a, ic, mc, pc, kc, apack);
                (apack.as_ptr(), 1, MR, kc)
            };
            for jr in (0..nc).step_by(NR) {
                let cols = NR.min(nc - jr);
                let panel = bp.add(jr * kc);
                for ir in (0..mc).step_by(MR) {
                    let rows = MR.min(mc - ir);
                    let out = dst.add((ic + ir) * ldc + jr);
                    tile(
                        kc,
                        ap.add(ir * step),
                        a_rs,
                        a_cs,
                        panel,
                        out,
                        ldc,
                        rows,
                        cols,
                        alpha,
                        add,
                    );
                }
            }
        }
    }

    /// See [`super::gemm_into`]; `m`, `n` and `k` are positive.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn gemm(
        m: usize,
        n: usize,
        k: usize,
        dst: *mut f32,
        ldc: usize,
        accumulate: bool,
        a: Mat,
        b: Mat,
        alpha: f32,
    ) {
        PACKS.with(|cell| {
            let mut packs = cell.borrow_mut();
            let (apack, bpack) = &mut *packs;
            let depth = slice_depth(k);
            grow(bpack, NC.min(n.next_multiple_of(NR)) * depth);
            for jc in (0..n).step_by(NC) {
                let nc = NC.min(n - jc);
                for pc in (0..k).step_by(depth) {
                    let kc = depth.min(k - pc);
                    pack_b(b, pc, kc, jc, nc, bpack);
                    rows_times_panels(
                        a,
                        0,
                        m,
                        pc,
                        kc,
                        bpack.as_ptr(),
                        nc,
                        dst.add(jc),
                        ldc,
                        alpha,
                        accumulate || pc > 0,
                        apack,
                    );
                }
            }
        });
    }

    /// Pack panel `q` of every slice of `b` (`k x n`) into `all`, laid out as
    /// [`super::PackedRhs`] describes.
    pub(super) unsafe fn pack_panel(b: Mat, k: usize, n: usize, q: usize, all: *mut f32) {
        let (depth, panels) = (slice_depth(k), n.div_ceil(NR));
        for pc in (0..k).step_by(depth) {
            let kc = depth.min(k - pc);
            let dst =
                std::slice::from_raw_parts_mut(all.add(pc * panels * NR + q * NR * kc), NR * kc);
            pack_b(b, pc, kc, q * NR, NR.min(n - q * NR), dst);
        }
    }

    /// Rows `i0..i1` of `dst = alpha * a @ b` from `b` packed whole at `all`.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn rows_of_packed(
        a: Mat,
        i0: usize,
        i1: usize,
        all: *const f32,
        k: usize,
        n: usize,
        dst: *mut f32,
        ldc: usize,
        alpha: f32,
    ) {
        PACKS.with(|cell| {
            let apack = &mut cell.borrow_mut().0;
            let (depth, panels) = (slice_depth(k), n.div_ceil(NR));
            for pc in (0..k).step_by(depth) {
                let kc = depth.min(k - pc);
                rows_times_panels(
                    a,
                    i0,
                    i1,
                    pc,
                    kc,
                    all.add(pc * panels * NR),
                    n,
                    dst,
                    ldc,
                    alpha,
                    pc > 0,
                    apack,
                );
            }
        });
    }
}

/// The right operand of one product packed once, so that threads can take row
/// blocks of the output in any number and order without packing it again. For
/// each depth slice `pc..pc + kc` (see `slice_depth`), its NR-column panels lie
/// at `pc * panels * NR`, each `kc x NR`.
pub struct PackedRhs {
    data: Vec<f32>,
    k: usize,
    n: usize,
}

/// The buffer of the last [`PackedRhs`] dropped, kept for the next one.
static SPARE: std::sync::Mutex<Vec<f32>> = std::sync::Mutex::new(Vec::new());

impl Drop for PackedRhs {
    fn drop(&mut self) {
        let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
        if spare.capacity() < self.data.capacity() {
            *spare = std::mem::take(&mut self.data);
        }
    }
}

/// Depth of the slices a `k`-deep product is summed in (see the module's
/// "Summation order"): the one-row kernels of `matmul` follow the same slices so
/// that a row's bits do not depend on the rows computed beside it. Where the
/// `gemm` crate does the work its own order applies, and this is `k`.
pub fn slice_depth(k: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() {
        return avx2::slice_depth(k);
    }
    k.max(1)
}

impl PackedRhs {
    /// Whether this machine runs the packed kernel (AVX2 and FMA).
    pub fn available() -> bool {
        cfg!(target_arch = "x86_64") && crate::pool::has_avx2_fma()
    }

    /// Column panels of `n` columns.
    pub fn panels(n: usize) -> usize {
        n.div_ceil(NR)
    }

    /// Pack `b` (`k x n`, both positive), one panel per call of `each_panel`,
    /// which may run the calls in parallel.
    ///
    /// # Safety
    /// `b` addresses a valid `k x n` matrix, and [`Self::available`] holds.
    pub unsafe fn new(
        b: Mat,
        k: usize,
        n: usize,
        each_panel: impl FnOnce(&(dyn Fn(usize) + Sync)),
    ) -> Self {
        // Reuse the last product's buffer: packing writes every element, and a
        // fresh allocation would be zero-filled and faulted in page by page.
        let mut data = std::mem::take(&mut *SPARE.lock().unwrap_or_else(|e| e.into_inner()));
        data.resize(k * Self::panels(n) * NR, 0.0);
        let all = crate::pool::Shared::new(&mut data);
        #[cfg(target_arch = "x86_64")]
        each_panel(&|q| avx2::pack_panel(b, k, n, q, all.at(0)));
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (b, all, each_panel);
        PackedRhs { data, k, n }
    }

    /// Rows `i0..i1` of `dst = alpha * lhs @ b` (`lhs` is `m x k`, `dst` addresses
    /// row 0 with row stride `ldc`).
    ///
    /// # Safety
    /// `lhs` and `dst` address valid matrices covering rows `i0..i1`, and no
    /// other thread writes those rows of `dst` during the call.
    pub unsafe fn rows(
        &self,
        lhs: Mat,
        i0: usize,
        i1: usize,
        dst: *mut f32,
        ldc: usize,
        alpha: f32,
    ) {
        #[cfg(target_arch = "x86_64")]
        avx2::rows_of_packed(
            lhs,
            i0,
            i1,
            self.data.as_ptr(),
            self.k,
            self.n,
            dst,
            ldc,
            alpha,
        );
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (lhs, i0, i1, dst, ldc, alpha);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
            }
        }
        out
    }

    fn data(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|v| ((v * 31 + seed * 7) % 29) as f32 * 0.125 - 1.75)
            .collect()
    }

    /// Shapes that cross every blocking edge: partial register tiles, several
    /// KC slices, several MC blocks, and NC blocks.
    #[test]
    fn every_layout_matches_a_float64_reference() {
        for &(m, k, n) in &[
            (1, 1, 1),
            (7, 3, 17),
            (13, 300, 33),
            (150, 520, 40),
            (5, 40, 4100),
        ] {
            let (a, b) = (data(m * k, 1), data(k * n, 2));
            let want = naive(&a, &b, m, k, n);
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            for (lhs, rhs) in [
                (Mat(a.as_ptr(), k, 1), Mat(b.as_ptr(), n, 1)),
                (Mat(at.as_ptr(), 1, m), Mat(b.as_ptr(), n, 1)),
                (Mat(a.as_ptr(), k, 1), Mat(bt.as_ptr(), 1, k)),
                (Mat(at.as_ptr(), 1, m), Mat(bt.as_ptr(), 1, k)),
            ] {
                let mut out = vec![f32::NAN; m * n];
                unsafe { gemm_into(m, n, k, out.as_mut_ptr(), n, false, lhs, rhs, 1.0) };
                for (x, y) in out.iter().zip(&want) {
                    assert!(
                        (*x as f64 - y).abs() <= 1e-4 * y.abs().max(1.0),
                        "{m}x{k}x{n}: {x} vs {y}"
                    );
                }
                // accumulate with a scale: out + 0.5 * a @ b
                unsafe { gemm_into(m, n, k, out.as_mut_ptr(), n, true, lhs, rhs, 0.5) };
                for (x, y) in out.iter().zip(&want) {
                    assert!(
                        (*x as f64 - 1.5 * y).abs() <= 2e-4 * y.abs().max(1.0),
                        "{m}x{k}x{n}: {x} vs {}",
                        1.5 * y
                    );
                }
            }
        }
    }

    /// A sub-block of the output computed alone has exactly the bits it has
    /// inside the whole product.
    #[test]
    fn any_split_of_the_output_gives_the_same_bits() {
        let (m, k, n) = (50, 600, 70);
        let (a, b) = (data(m * k, 3), data(k * n, 4));
        let mut whole = vec![0.0; m * n];
        unsafe {
            gemm_into(
                m,
                n,
                k,
                whole.as_mut_ptr(),
                n,
                false,
                Mat(a.as_ptr(), k, 1),
                Mat(b.as_ptr(), n, 1),
                1.0,
            )
        };
        let (r0, r1, c0, c1) = (7, 31, 5, 58);
        let mut part = vec![0.0; m * n];
        unsafe {
            gemm_into(
                r1 - r0,
                c1 - c0,
                k,
                part.as_mut_ptr().add(r0 * n + c0),
                n,
                false,
                Mat(a.as_ptr().add(r0 * k), k, 1),
                Mat(b.as_ptr().add(c0), n, 1),
                1.0,
            )
        };
        for i in r0..r1 {
            assert_eq!(whole[i * n + c0..i * n + c1], part[i * n + c0..i * n + c1]);
        }
    }

    #[test]
    fn empty_depth_clears_or_keeps() {
        let mut out = vec![3.0f32; 6];
        let nothing = Mat(std::ptr::null(), 0, 0);
        unsafe { gemm_into(2, 3, 0, out.as_mut_ptr(), 3, true, nothing, nothing, 1.0) };
        assert_eq!(out, [3.0; 6]);
        unsafe { gemm_into(2, 3, 0, out.as_mut_ptr(), 3, false, nothing, nothing, 1.0) };
        assert_eq!(out, [0.0; 6]);
    }
}
