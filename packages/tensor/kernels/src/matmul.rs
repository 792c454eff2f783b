//! Batched matrix multiplication on the packed kernels of [`crate::packed`].

use crate::packed::{gemm_bias_into, slice_depth, Mat, PackedRhs, MR, NR};
use crate::pool::{num_threads, parallel, Shared, PARALLEL_WORK};
use crate::{ensure, multiversion, Result};

/// One matmul problem: `out[b] = op(a[b]) @ op(b[b])` for each batch entry,
/// where `op` optionally transposes. `a_offsets[i]` / `b_offsets[i]` are the
/// element offsets of batch entry i (broadcast batch dims repeat offsets).
#[derive(Debug, Clone)]
pub struct MatmulSpec<'a> {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub a_offsets: &'a [usize],
    pub b_offsets: &'a [usize],
}

/// Rows of `w` a one-row product carries at once: independent chains of fused
/// multiply-adds, enough to hide their latency.
const CHAINS: usize = 8;

multiversion! {
    /// `out[j] = x . w[j]` for rows of `w` (`[n, k]`): a vector times a transposed
    /// matrix, each element summed as the packed kernel sums it: `p` ascending in
    /// one fused multiply-add chain per `depth`-deep slice, the slices added in order.
    fn dot_rows(x: &[f32], w: &[f32], depth: usize, out: &mut [f32]) {
        let k = x.len();
        for (block, dst) in out.chunks_mut(CHAINS).enumerate() {
            let rows = dst.len();
            let first = block * CHAINS;
            let mut total = [0.0f32; CHAINS];
            for p0 in (0..k).step_by(depth) {
                let p1 = (p0 + depth).min(k);
                let mut acc = [0.0f32; CHAINS];
                if rows == CHAINS {
                    let seg: [&[f32]; CHAINS] =
                        std::array::from_fn(|r| &w[(first + r) * k + p0..(first + r) * k + p1]);
                    for (i, &xp) in x[p0..p1].iter().enumerate() {
                        for r in 0..CHAINS {
                            // SAFETY: every segment holds p1 - p0 elements and i < p1 - p0.
                            acc[r] = unsafe { seg[r].get_unchecked(i) }.mul_add(xp, acc[r]);
                        }
                    }
                } else {
                    for (r, a) in acc.iter_mut().take(rows).enumerate() {
                        let row = &w[(first + r) * k + p0..(first + r) * k + p1];
                        for (&v, &xp) in row.iter().zip(&x[p0..p1]) {
                            *a = v.mul_add(xp, *a);
                        }
                    }
                }
                for (t, a) in total.iter_mut().zip(acc) {
                    *t = if p0 == 0 { a } else { a + *t };
                }
            }
            dst.copy_from_slice(&total[..rows]);
        }
    }
}

multiversion! {
    /// `out = x @ w[:, cols]` for a column range of `w` (`[k, n]`), summed as
    /// [`dot_rows`] sums (one chain per slice, in `p` order, slices added in order).
    fn axpy_rows(x: &[f32], w: &[f32], n: usize, first_col: usize, depth: usize, out: &mut [f32]) {
        let width = out.len();
        let mut slice = [0.0f32; GEMV_COLUMNS];
        let slice = &mut slice[..width];
        for p0 in (0..x.len()).step_by(depth) {
            let p1 = (p0 + depth).min(x.len());
            slice.fill(0.0);
            for (p, &xp) in x.iter().enumerate().take(p1).skip(p0) {
                let row = &w[p * n + first_col..p * n + first_col + width];
                for (o, &v) in slice.iter_mut().zip(row) {
                    *o = v.mul_add(xp, *o);
                }
            }
            for (o, &v) in out.iter_mut().zip(slice.iter()) {
                *o = if p0 == 0 { v } else { v + *o };
            }
        }
    }
}

/// Largest right operand (elements) packed whole for one product.
const SHARED_RHS: usize = 8 << 20;
/// Rows per thread from which a tall product runs as one row band per thread,
/// each packing the right operand itself: at 2 threads the bands measured 10-20%
/// faster than the shared copy on products of 512 rows and the same on 2048
/// (`bench/bench_train.py`'s shapes); the shared copy is for many threads.
const SHARED_BAND: usize = 256;
/// Most output rows per task of a product with a shared packed right operand.
const ROW_BLOCK: usize = 144;

/// Columns per parallel piece of a vector-matrix product (fixed, so results do
/// not depend on the thread count).
const GEMV_COLUMNS: usize = 64;

/// A single row times a matrix (`m == 1`, the decode step's shape), memory-bound:
/// split over output columns, each element summed in the packed kernel's order, so
/// that a row alone gets the bits it gets inside a larger product.
fn vector_matrix(x: &[f32], w: &[f32], k: usize, n: usize, transposed: bool, out: &mut [f32]) {
    // Below about 1 MiB of weights a product measured faster on the caller alone.
    let parallel = parallel(k * n, 1 << 18);
    let depth = slice_depth(k);
    let piece = |(i, dst): (usize, &mut [f32])| {
        let first = i * GEMV_COLUMNS;
        if transposed {
            dot_rows(x, &w[first * k..(first + dst.len()) * k], depth, dst);
        } else {
            axpy_rows(x, w, n, first, depth, dst);
        }
    };
    if parallel {
        // The team, not the rayon pool: these products are too short for a
        // futex handoff each (see `team`).
        let pieces = n.div_ceil(GEMV_COLUMNS);
        let dst = Shared::new(out);
        crate::team::team().run(pieces, &|i| {
            let first = i * GEMV_COLUMNS;
            let width = GEMV_COLUMNS.min(n - first);
            // SAFETY: piece i writes only columns first..first + width of `out`.
            let chunk = unsafe { std::slice::from_raw_parts_mut(dst.at(first), width) };
            piece((i, chunk));
        });
    } else {
        out.chunks_mut(GEMV_COLUMNS).enumerate().for_each(piece);
    }
}

/// `out[r, j] += bias[j]` for every row of `bias.len()` of a product's output (a
/// linear layer's bias, added where the product was written: the bits of the add
/// op on the product, without its output array).
pub fn add_bias(out: &mut [f32], bias: &[f32]) -> Result<()> {
    ensure!(
        !bias.is_empty() && out.len().is_multiple_of(bias.len()),
        "add_bias: a bias of {} for an output of {}",
        bias.len(),
        out.len()
    );
    add_rows(out, bias);
    Ok(())
}

multiversion! {
    fn add_rows(out: &mut [f32], bias: &[f32]) {
        for row in out.chunks_exact_mut(bias.len()) {
            for (o, &b) in row.iter_mut().zip(bias) {
                *o += b;
            }
        }
    }
}

pub fn matmul_f32(spec: &MatmulSpec, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<()> {
    matmul_bias_f32(spec, a, b, None, out)
}

/// [`matmul_f32`], then `out[.., j] += bias[j]` for every row (a linear layer's
/// bias, `n` floats): the bits of [`add_bias`] after the product, added as the
/// product's tiles are stored instead of in a pass of its own over the output.
pub fn matmul_bias_f32(
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    check(spec, a, b, out)?;
    ensure!(
        bias.is_none_or(|v| v.len() == spec.n),
        "matmul: a bias of {} for {} output columns",
        bias.map_or(0, <[f32]>::len),
        spec.n
    );
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let batch = spec.a_offsets.len();
    if out.is_empty() {
        return Ok(());
    }
    if m == 1 && batch == 1 && k > 0 {
        let (ao, bo) = (spec.a_offsets[0], spec.b_offsets[0]);
        vector_matrix(
            &a[ao..ao + k],
            &b[bo..bo + k * n],
            k,
            n,
            spec.transpose_b,
            out,
        );
        return bias.map_or(Ok(()), |v| add_bias(out, v));
    }
    let threads = num_threads();
    let work = m * n * k;
    let parallel = parallel(batch * work, PARALLEL_WORK);
    // A tall product's row bands each pack the whole right operand; below
    // SHARED_BAND rows a band that costs more than one packed copy shared by
    // all (whose panels half come from another core's cache).
    let tall = m > n && !spec.transpose_a;
    if batch == 1
        && parallel
        && tall
        && m < SHARED_BAND * threads
        && work >= (1 << 20)
        && k * n <= SHARED_RHS
        && PackedRhs::available()
    {
        row_blocks_of_packed(spec, a, b, bias, out, threads);
    } else {
        bands(spec, a, b, bias, out, threads, parallel);
    }
    Ok(())
}

/// Check the batch offsets and the output against the operands.
fn check(spec: &MatmulSpec, a: &[f32], b: &[f32], out: &[f32]) -> Result<()> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let batch = spec.a_offsets.len();
    ensure!(
        spec.b_offsets.len() == batch,
        "matmul: {} batch offsets for a, {} for b",
        batch,
        spec.b_offsets.len()
    );
    ensure!(
        out.len() == batch * m * n,
        "matmul: output has {} elements, expected {}",
        out.len(),
        batch * m * n
    );
    for &o in spec.a_offsets {
        ensure!(
            o + m * k <= a.len(),
            "matmul: a batch entry at {o} runs past {} elements",
            a.len()
        );
    }
    for &o in spec.b_offsets {
        ensure!(
            o + k * n <= b.len(),
            "matmul: b batch entry at {o} runs past {} elements",
            b.len()
        );
    }
    Ok(())
}

/// Row and column strides of the two operands.
fn strides(spec: &MatmulSpec) -> ((usize, usize), (usize, usize)) {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let a = if spec.transpose_a { (1, m) } else { (k, 1) };
    let b = if spec.transpose_b { (1, k) } else { (n, 1) };
    (a, b)
}

/// One large product whose rows are read in place: pack the right operand
/// once, then hand out row blocks, several per thread, so that a thread held
/// up elsewhere delays nobody for long. (Wide products, and those whose left
/// operand is transposed and packed anyway, measured faster as one band per
/// thread.) `spec` has one batch entry, checked by [`matmul_f32`].
fn row_blocks_of_packed(
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
) {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let ((a_rs, a_cs), (b_rs, b_cs)) = strides(spec);
    let (ae, be) = (&a[spec.a_offsets[0]..], &b[spec.b_offsets[0]..]);
    let (lhs, rhs) = (Mat(ae.as_ptr(), a_rs, a_cs), Mat(be.as_ptr(), b_rs, b_cs));
    let block = (m / (4 * threads))
        .next_multiple_of(MR)
        .clamp(MR, ROW_BLOCK);
    let dst = Shared::new(out);
    let team = crate::team::team();
    // SAFETY: the offsets were checked against the operands by `matmul_f32`;
    // each piece packs its own panels, then writes its own rows of `out`.
    let packed =
        unsafe { PackedRhs::new(rhs, k, n, |panel| team.run(PackedRhs::panels(n), panel)) };
    team.run(m.div_ceil(block), &|t| {
        let (i0, i1) = (t * block, ((t + 1) * block).min(m));
        unsafe { packed.rows(lhs, i0, i1, dst.at(0), n, 1.0, bias_ptr(bias, 0)) };
    });
}

/// The bias's element `offset` (a band's first column), or null for none.
fn bias_ptr(bias: Option<&[f32]>, offset: usize) -> *const f32 {
    bias.map_or(std::ptr::null(), |v| v[offset..].as_ptr())
}

/// Tasks of whole batch entries, or bands of a few large ones: rows when the
/// output is tall, columns when it is wide (each band repacks the operand it
/// shares, so the smaller one is shared). Every element is summed alike
/// whatever the split, so the bands may follow the thread count. The offsets
/// were checked by [`matmul_f32`].
fn bands(
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
    parallel: bool,
) {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let batch = spec.a_offsets.len();
    let work = m * n * k;
    let ((a_rs, a_cs), (b_rs, b_cs)) = strides(spec);
    let bands = if parallel && work >= (1 << 20) && batch < 2 * threads {
        threads
    } else {
        1
    };
    let (by_rows, unit, extent) = if m >= n {
        (true, MR, m)
    } else {
        (false, NR, n)
    };
    let band = extent.div_ceil(bands).next_multiple_of(unit);
    let bands = extent.div_ceil(band);
    let dst = Shared::new(out);
    let task = |t: usize| {
        let (entry, piece) = (t / bands, t % bands);
        let (lo, hi) = (piece * band, ((piece + 1) * band).min(extent));
        let (r0, r1, c0, c1) = if by_rows {
            (lo, hi, 0, n)
        } else {
            (0, m, lo, hi)
        };
        let (ao, bo) = (spec.a_offsets[entry], spec.b_offsets[entry]);
        // SAFETY: the offsets were checked against the operands, the band
        // lies inside the entry, and tasks write disjoint parts of `out`.
        unsafe {
            gemm_bias_into(
                r1 - r0,
                c1 - c0,
                k,
                dst.at(entry * m * n + r0 * n + c0),
                n,
                false,
                Mat(a.as_ptr().add(ao + r0 * a_rs), a_rs, a_cs),
                Mat(b.as_ptr().add(bo + c0 * b_cs), b_rs, b_cs),
                1.0,
                bias_ptr(bias, c0),
            );
        }
    };
    if parallel {
        // The team, whose helpers stay hot between products and whose caller
        // takes pieces too: a prefill's products are a few hundred microseconds,
        // short enough that waking the rayon pool for each showed in the time.
        crate::team::team().run(batch * bands, &task);
    } else {
        (0..batch * bands).for_each(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        out
    }

    #[test]
    fn one_row_gets_the_bits_of_its_row_in_a_larger_product() {
        // k past one packed slice (384), widths past one piece of columns (64) and
        // not a multiple of the chains, both layouts of the right operand.
        for &(k, n) in &[(7, 5), (384, 70), (385, 64), (800, 131), (1536, 40)] {
            let m = 9;
            let a: Vec<f32> = (0..m * k)
                .map(|v| ((v * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|v| ((v * 53 % 89) as f32 - 44.0) / 13.0)
                .collect();
            for transpose_b in [false, true] {
                let spec = |m| MatmulSpec {
                    m,
                    k,
                    n,
                    transpose_a: false,
                    transpose_b,
                    a_offsets: &[0],
                    b_offsets: &[0],
                };
                let mut all = vec![0.0; m * n];
                matmul_f32(&spec(m), &a, &b, &mut all).unwrap();
                for row in [0, 4, m - 1] {
                    let mut one = vec![0.0; n];
                    matmul_f32(&spec(1), &a[row * k..(row + 1) * k], &b, &mut one).unwrap();
                    let want = &all[row * n..(row + 1) * n];
                    let same = one
                        .iter()
                        .zip(want)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "k={k} n={n} transpose_b={transpose_b} row={row}");
                }
            }
        }
    }

    #[test]
    fn matches_naive_with_transposes() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|v| (v % 11) as f32 - 5.0).collect();
        let b: Vec<f32> = (0..k * n).map(|v| (v % 7) as f32 * 0.5).collect();
        let want = naive(&a, &b, m, k, n);
        let mut out = vec![0.0; m * n];
        let spec = MatmulSpec {
            m,
            k,
            n,
            transpose_a: false,
            transpose_b: false,
            a_offsets: &[0],
            b_offsets: &[0],
        };
        matmul_f32(&spec, &a, &b, &mut out).unwrap();
        assert_eq!(out, want);
        // b stored transposed ([n, k])
        let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        let spec = MatmulSpec {
            transpose_b: true,
            ..spec
        };
        matmul_f32(&spec, &a, &bt, &mut out).unwrap();
        assert_eq!(out, want);
    }

    /// Large enough for the shared packed right operand (tall), for bands of
    /// columns (wide) and for depth slices under several threads; one thread
    /// takes the plain path. All must agree bit for bit, for every layout.
    #[test]
    fn large_products_match_naive_and_ignore_thread_count() {
        // A bias added as the tiles are stored has the bits of add_bias after.
        for (m, k, n) in [
            (300, 700, 40),
            (40, 700, 300),
            (1100, 300, 100),
            (1, 300, 70),
        ] {
            let bias: Vec<f32> = (0..n).map(|v| v as f32 * 0.37 - 3.0).collect();
            let a: Vec<f32> = (0..m * k)
                .map(|v| ((v * 31) % 23) as f32 * 0.125 - 1.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|v| ((v * 17) % 13) as f32 * 0.25 - 1.5)
                .collect();
            let want = naive(&a, &b, m, k, n);
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            let mut first: Option<Vec<f32>> = None;
            for threads in [1, 2, 3] {
                crate::pool::set_num_threads(threads);
                for (transpose_a, lhs) in [(false, &a), (true, &at)] {
                    for (transpose_b, rhs) in [(false, &b), (true, &bt)] {
                        let mut out = vec![0.0; m * n];
                        let spec = MatmulSpec {
                            m,
                            k,
                            n,
                            transpose_a,
                            transpose_b,
                            a_offsets: &[0],
                            b_offsets: &[0],
                        };
                        matmul_f32(&spec, lhs, rhs, &mut out).unwrap();
                        for (x, y) in out.iter().zip(&want) {
                            assert!((x - y).abs() <= 1e-3 * y.abs().max(1.0));
                        }
                        let mut biased = vec![f32::NAN; m * n];
                        matmul_bias_f32(&spec, lhs, rhs, Some(&bias), &mut biased).unwrap();
                        let mut added = out.clone();
                        add_bias(&mut added, &bias).unwrap();
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&biased), bits(&added), "{m}x{k}x{n} biased");
                        match &first {
                            None => first = Some(out),
                            Some(f) => assert_eq!(f, &out, "{m}x{k}x{n}, threads {threads}, transposes {transpose_a} {transpose_b}"),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn vector_times_matrix_matches_naive() {
        for &(k, n) in &[(7usize, 3usize), (384, 1152), (33, 130)] {
            let a: Vec<f32> = (0..k)
                .map(|v| ((v * 13) % 17) as f32 * 0.25 - 2.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|v| ((v * 7) % 11) as f32 * 0.5 - 2.5)
                .collect();
            let want = naive(&a, &b, 1, k, n);
            let mut out = vec![0.0; n];
            let spec = MatmulSpec {
                m: 1,
                k,
                n,
                transpose_a: false,
                transpose_b: false,
                a_offsets: &[0],
                b_offsets: &[0],
            };
            matmul_f32(&spec, &a, &b, &mut out).unwrap();
            for (x, y) in out.iter().zip(&want) {
                assert!((x - y).abs() <= 1e-3 * y.abs().max(1.0));
            }
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            let spec = MatmulSpec {
                transpose_b: true,
                ..spec
            };
            matmul_f32(&spec, &a, &bt, &mut out).unwrap();
            for (x, y) in out.iter().zip(&want) {
                assert!((x - y).abs() <= 1e-3 * y.abs().max(1.0));
            }
        }
    }

    #[test]
    fn out_of_range_offsets_are_refused() {
        let spec = MatmulSpec {
            m: 2,
            k: 2,
            n: 2,
            transpose_a: false,
            transpose_b: false,
            a_offsets: &[0, 2],
            b_offsets: &[0, 0],
        };
        let mut out = vec![0.0; 8];
        assert!(matmul_f32(&spec, &[0.0; 4], &[0.0; 4], &mut out).is_err());
    }
}
