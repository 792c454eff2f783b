//! Packed single-precision matrix products: the engine under `matmul` and the
//! attention kernels.
//!
//! On x86-64 with AVX2 and FMA this is the three-level blocking of Goto and van
//! de Geijn ("Anatomy of High-Performance Matrix Multiplication", ACM TOMS 34(3),
//! 2008) as BLIS arranges it: a KC-deep slice of the right operand is packed into
//! NR-wide panels (which stream through L1), an MC x KC block of the left operand
//! into MR-tall panels (which stay in L2), and an MR x NR = 6 x 16 tile of the
//! output lives in twelve AVX registers while broadcast FMAs update it; with
//! AVX-512 the tile is MR x 2 NR (two adjacent panels) in twelve 512-bit
//! registers, each element's chain and store unchanged, so the bits are the same.
//! Elsewhere the `gemm` crate does the work.
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
    gemm_bias_into(
        m,
        n,
        k,
        dst,
        dst_rs,
        accumulate,
        lhs,
        rhs,
        alpha,
        std::ptr::null(),
    );
}

/// [`gemm_into`], then `dst[i][j] += bias[j]` where `bias` (`n` floats) is not
/// null: the bits of that add after the product, made as the product's tiles are
/// stored (a linear layer's bias without a pass of its own over the output).
///
/// # Safety
/// As [`gemm_into`]; a non-null `bias` addresses `n` floats.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_bias_into(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: usize,
    accumulate: bool,
    lhs: Mat,
    rhs: Mat,
    alpha: f32,
    bias: *const f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if k > 0 && crate::pool::has_avx2_fma() {
        blocking::gemm(m, n, k, dst, dst_rs, accumulate, lhs, rhs, alpha, bias);
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                std::slice::from_raw_parts_mut(dst.add(r * dst_rs), n).fill(0.0);
            }
        }
    } else {
        // The `gemm` crate's product where the packed kernel does not run.
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
    if !bias.is_null() {
        let bias = std::slice::from_raw_parts(bias, n);
        for r in 0..m {
            let row = std::slice::from_raw_parts_mut(dst.add(r * dst_rs), n);
            for (o, &b) in row.iter_mut().zip(bias) {
                *o += b;
            }
        }
    }
}

/// Rows of the register tile; a split of the output into row bands costs least
/// at multiples of this.
pub const MR: usize = 6;
/// Columns of the register tile.
pub const NR: usize = 16;

/// Depth of the slices a `k`-deep product is summed in (see the module's
/// "Summation order"): the one-row kernels of `matmul` follow the same slices so
/// that a row's bits do not depend on the rows computed beside it. Where the
/// `gemm` crate does the work its own order applies, and this is `k`.
pub fn slice_depth(k: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() {
        return blocking::slice_depth(k);
    }
    k.max(1)
}

#[cfg(target_arch = "x86_64")]
mod blocking;
#[cfg(target_arch = "x86_64")]
mod panels;
mod rhs;
#[cfg(target_arch = "x86_64")]
mod tile;
#[cfg(target_arch = "x86_64")]
mod tile512;

pub use rhs::PackedRhs;

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
    /// The documented order itself: each slice's fused multiply-add chain from
    /// zero, then the slices added to the output in order (scaled by alpha), bit
    /// for bit, with rows across several MC blocks and depths across several
    /// slices, narrow and wide.
    #[test]
    fn several_slices_sum_in_slice_order() {
        #[cfg(target_arch = "x86_64")]
        if !crate::pool::has_avx2_fma() {
            return; // the gemm crate's order elsewhere
        }
        #[cfg(not(target_arch = "x86_64"))]
        return;
        for &(m, k, n) in &[(150usize, 500usize, 40usize), (8, 500, 2100)] {
            let (a, b) = (data(m * k, 5), data(k * n, 6));
            let alpha = 1.5f32;
            let depth = slice_depth(k);
            assert!(depth < k);
            let mut want = vec![0.0f32; m * n];
            for i in 0..m {
                for j in 0..n {
                    let mut out = 0.0f32;
                    for (s, p0) in (0..k).step_by(depth).enumerate() {
                        let mut acc = 0.0f32;
                        for p in p0..(p0 + depth).min(k) {
                            acc = a[i * k + p].mul_add(b[p * n + j], acc);
                        }
                        out = if s == 0 {
                            acc * alpha
                        } else {
                            acc.mul_add(alpha, out)
                        };
                    }
                    want[i * n + j] = out;
                }
            }
            let mut got = vec![f32::NAN; m * n];
            unsafe {
                gemm_into(
                    m,
                    n,
                    k,
                    got.as_mut_ptr(),
                    n,
                    false,
                    Mat(a.as_ptr(), k, 1),
                    Mat(b.as_ptr(), n, 1),
                    alpha,
                )
            };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(&want), "m={m} k={k} n={n}");
        }
    }

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

    /// The bias added as the tiles are stored has the bits of adding it after the
    /// product: edge tiles, several slices, accumulation, both vector widths.
    #[test]
    fn a_bias_in_the_epilogue_is_the_add_after_the_product() {
        for &(m, k, n) in &[(1, 1, 1), (13, 300, 70), (150, 520, 40), (7, 5, 4100)] {
            let (a, b) = (data(m * k, 8), data(k * n, 9));
            let bias = data(n, 10);
            for (accumulate, narrow) in [(false, false), (true, false), (false, true), (true, true)]
            {
                // The AVX2 tile too, where it is not the one this machine runs.
                #[cfg(target_arch = "x86_64")]
                blocking::NARROW.with(|f| f.set(narrow));
                let start = data(m * n, 11);
                let mut want = start.clone();
                let (lhs, rhs) = (Mat(a.as_ptr(), k, 1), Mat(b.as_ptr(), n, 1));
                unsafe { gemm_into(m, n, k, want.as_mut_ptr(), n, accumulate, lhs, rhs, 0.5) };
                for row in want.chunks_mut(n) {
                    for (o, &v) in row.iter_mut().zip(&bias) {
                        *o += v;
                    }
                }
                let mut got = start.clone();
                unsafe {
                    gemm_bias_into(
                        m,
                        n,
                        k,
                        got.as_mut_ptr(),
                        n,
                        accumulate,
                        lhs,
                        rhs,
                        0.5,
                        bias.as_ptr(),
                    )
                };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{m}x{k}x{n} accumulate={accumulate}"
                );
            }
        }
    }

    /// A large output over several slices takes them inside each row block: the
    /// bits of the slices-outermost order, with a bias and accumulating.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn deep_blocks_give_the_bits_of_slices_outermost() {
        if !crate::pool::has_avx2_fma() {
            return;
        }
        let (m, k, n) = (700, 600, 760);
        assert!(m * n >= blocking::DEEP_OUTPUT && k > 2 * slice_depth(k));
        let (a, b, bias) = (data(m * k, 12), data(k * n, 13), data(n, 14));
        let run = |shallow: bool, accumulate: bool| {
            blocking::SHALLOW.with(|f| f.set(shallow));
            let mut out = data(m * n, 15);
            let (lhs, rhs) = (Mat(a.as_ptr(), k, 1), Mat(b.as_ptr(), n, 1));
            unsafe {
                gemm_bias_into(
                    m,
                    n,
                    k,
                    out.as_mut_ptr(),
                    n,
                    accumulate,
                    lhs,
                    rhs,
                    0.5,
                    bias.as_ptr(),
                )
            };
            blocking::SHALLOW.with(|f| f.set(false));
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        for accumulate in [false, true] {
            assert!(
                run(true, accumulate) == run(false, accumulate),
                "accumulate={accumulate}"
            );
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

    /// The AVX-512 tile gives every element the AVX2 tile's bits.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn both_vector_widths_give_the_same_bits() {
        use crate::isa::{current, Isa};
        if current() < Isa::Avx512 {
            return;
        }
        for &(m, k, n) in &[(13, 300, 70), (6, 800, 32), (50, 17, 100), (7, 5, 4100)] {
            let (a, b) = (data(m * k, 5), data(k * n, 6));
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            let run = |lhs: Mat, accumulate: bool| {
                let mut out = data(m * n, 7);
                unsafe {
                    gemm_into(
                        m,
                        n,
                        k,
                        out.as_mut_ptr(),
                        n,
                        accumulate,
                        lhs,
                        Mat(b.as_ptr(), n, 1),
                        0.7,
                    )
                };
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            for lhs in [Mat(a.as_ptr(), k, 1), Mat(at.as_ptr(), 1, m)] {
                for accumulate in [false, true] {
                    blocking::NARROW.with(|f| f.set(true));
                    let narrow = run(lhs, accumulate);
                    blocking::NARROW.with(|f| f.set(false));
                    let wide = run(lhs, accumulate);
                    assert_eq!(narrow, wide, "{m}x{k}x{n}");
                }
            }
        }
    }
}
