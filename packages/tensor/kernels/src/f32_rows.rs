//! Float32 weight rows dotted with input rows, each output element summed as
//! [`dot8`] sums it (lane `j` takes elements `j, j + 8, …` in one fused
//! multiply-add chain, the lanes are then added in order, the tail last), so an
//! element does not depend on the other rows of either operand: the decode
//! step's products and attention scores. On AVX2 the rows go in tiles (up to four
//! weight rows by three input rows) of independent chains, on AVX-512 in tiles of
//! eight weight rows, two rows to a register (see [`avx512`]); every path performs
//! the same operations per element, so the bits do not depend on the vector unit.

use crate::lanes::dot8;

/// `out[r] = w[r * stride..][..x.len()] . x` for the `out.len()` rows, each summed as
/// [`dot8`] sums it (four rows at a time on AVX2): attention's scores of one query.
pub(crate) fn dot_rows_strided(w: &[f32], stride: usize, x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::current() >= crate::isa::Isa::Avx512 {
        // SAFETY: the CPU has AVX-512 F, DQ and VL (and AVX2 and FMA).
        return unsafe { avx512::dot_rows_strided(w, stride, x, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { avx2::dot_rows_strided(w, stride, x, out) };
    }
    let k = x.len();
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot8(&w[r * stride..r * stride + k], x);
    }
}

/// `out[i * rows + r] = w[r] . x[i]` for the `rows` rows of `w` (`[rows, k]`) and the
/// `m` rows of `x` (`[m, k]`), each element summed as [`dot8`] sums it (so it does not
/// depend on the other rows of either operand): on AVX2 in tiles of up to four
/// weight rows by three input rows.
pub(crate) fn dot_tile_f32(w: &[f32], rows: usize, x: &[f32], m: usize, out: &mut [f32]) {
    let k = x.len() / m.max(1);
    #[cfg(target_arch = "x86_64")]
    if crate::isa::current() >= crate::isa::Isa::Avx512 {
        // SAFETY: the CPU has AVX-512 F, DQ and VL (and AVX2 and FMA).
        return unsafe { avx512::dot_tile_f32(w, rows, x, m, k, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::pool::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { avx2::dot_tile_f32(w, rows, x, m, k, out) };
    }
    for i in 0..m {
        for r in 0..rows {
            out[i * rows + r] = dot8(&w[r * k..(r + 1) * k], &x[i * k..(i + 1) * k]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod tiles;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    /// `R` weight rows by `M` input rows from `w[r0..]`, `x[i0..]`, into `out`
    /// (`[m, rows]`): one eight-lane fused multiply-add chain per element, the lanes
    /// added in order from 0, then the tail (the order of [`dot8`](crate::lanes)).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const R: usize, const M: usize>(
        w: &[f32],
        x: &[f32],
        k: usize,
        rows: usize,
        r0: usize,
        i0: usize,
        out: &mut [f32],
    ) {
        tile_strided::<R, M>(w, k, x, k, rows, r0, i0, out)
    }

    /// [`tile`] over weight rows `stride` apart (`k <= stride` elements each).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile_strided<const R: usize, const M: usize>(
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
        let wp: [*const f32; R] = std::array::from_fn(|r| w.as_ptr().add((r0 + r) * stride));
        let xp: [*const f32; M] = std::array::from_fn(|i| x.as_ptr().add((i0 + i) * k));
        let mut acc = [[_mm256_setzero_ps(); M]; R];
        let mut c = 0;
        while c < whole {
            let xv: [__m256; M] = std::array::from_fn(|i| _mm256_loadu_ps(xp[i].add(c)));
            for r in 0..R {
                let wv = _mm256_loadu_ps(wp[r].add(c));
                for i in 0..M {
                    acc[r][i] = _mm256_fmadd_ps(wv, xv[i], acc[r][i]);
                }
            }
            c += 8;
        }
        for r in 0..R {
            for i in 0..M {
                let mut lanes = [0.0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r][i]);
                let mut s = 0.0f32;
                for v in lanes {
                    s += v;
                }
                for c in whole..k {
                    s = (*wp[r].add(c)).mul_add(*xp[i].add(c), s);
                }
                out[(i0 + i) * rows + r0 + r] = s;
            }
        }
    }

    #[inline(always)]
    unsafe fn inputs<const R: usize>(
        w: &[f32],
        x: &[f32],
        k: usize,
        rows: usize,
        m: usize,
        r0: usize,
        out: &mut [f32],
    ) {
        let mut i0 = 0;
        while i0 + 3 <= m {
            tile::<R, 3>(w, x, k, rows, r0, i0, out);
            i0 += 3;
        }
        match m - i0 {
            2 => tile::<R, 2>(w, x, k, rows, r0, i0, out),
            1 => tile::<R, 1>(w, x, k, rows, r0, i0, out),
            _ => {}
        }
    }

    /// `out[r] = w[r * stride..][..x.len()] . x` for `out.len()` rows.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn dot_rows_strided(w: &[f32], stride: usize, x: &[f32], out: &mut [f32]) {
        let (k, rows) = (x.len(), out.len());
        assert!(rows == 0 || (rows - 1) * stride + k <= w.len());
        let mut r0 = 0;
        while r0 + 4 <= rows {
            tile_strided::<4, 1>(w, stride, x, k, rows, r0, 0, out);
            r0 += 4;
        }
        while r0 < rows {
            tile_strided::<1, 1>(w, stride, x, k, rows, r0, 0, out);
            r0 += 1;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn dot_tile_f32(
        w: &[f32],
        rows: usize,
        x: &[f32],
        m: usize,
        k: usize,
        out: &mut [f32],
    ) {
        assert!(w.len() >= rows * k && x.len() >= m * k && out.len() >= m * rows);
        let mut r0 = 0;
        while r0 + 4 <= rows {
            inputs::<4>(w, x, k, rows, m, r0, out);
            r0 += 4;
        }
        while r0 < rows {
            inputs::<1>(w, x, k, rows, m, r0, out);
            r0 += 1;
        }
    }
}

#[cfg(test)]
crate::multiversion! {
    /// `x . w` for every row of `w`, one at a time (the order [`dot_tile_f32`] keeps).
    fn dot_each(w: &[f32], x: &[f32], out: &mut [f32]) {
        let k = x.len();
        for (r, o) in out.iter_mut().enumerate() {
            *o = dot8(&w[r * k..(r + 1) * k], x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 37 + seed * 11) % 29) as f32 - 14.0) * 0.031)
            .collect()
    }

    #[test]
    fn float_rows_are_summed_as_dot8_sums_them() {
        for (rows, k) in [(1, 8), (3, 13), (4, 384), (7, 100), (16, 1536), (9, 5)] {
            let (w, x) = (values(rows * k, 1), values(k, 2));
            let (mut a, mut b) = (vec![0.0; rows], vec![0.0; rows]);
            dot_tile_f32(&w, rows, &x, 1, &mut a);
            dot_each(&w, &x, &mut b);
            assert_eq!(
                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "rows {rows}, k {k}"
            );
            for (r, &v) in a.iter().enumerate() {
                let exact: f64 = (0..k).map(|p| w[r * k + p] as f64 * x[p] as f64).sum();
                assert!((v as f64 - exact).abs() < 1e-4, "{v} vs {exact}");
            }
        }
    }

    #[test]
    fn tiles_of_inputs_give_each_element_its_dot8_bits() {
        for (rows, m, k) in [(16, 16, 384), (7, 5, 13), (4, 3, 8), (5, 2, 100), (1, 7, 3)] {
            let (w, x) = (values(rows * k, 6), values(m * k, 7));
            let mut t = vec![0.0; m * rows];
            dot_tile_f32(&w, rows, &x, m, &mut t);
            for i in 0..m {
                for r in 0..rows {
                    let want = dot8(&w[r * k..(r + 1) * k], &x[i * k..(i + 1) * k]);
                    assert_eq!(t[i * rows + r].to_bits(), want.to_bits(), "{rows} {m} {k}");
                }
            }
        }
    }

    #[test]
    fn strided_rows_are_summed_as_dot8_sums_them() {
        for (rows, k, stride) in [(1, 64, 64), (9, 64, 128), (4, 13, 20), (7, 8, 8)] {
            let (w, x) = (values(rows * stride, 8), values(k, 9));
            let mut out = vec![0.0; rows];
            dot_rows_strided(&w, stride, &x, &mut out);
            for (r, &v) in out.iter().enumerate() {
                let want = dot8(&w[r * stride..r * stride + k], &x);
                assert_eq!(v.to_bits(), want.to_bits(), "{rows} {k} {stride}");
            }
        }
    }

    /// Every vector path this CPU runs gives each element the bits of [`dot8`].
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_vector_width_gives_the_same_bits() {
        use crate::isa::{detected, Isa};
        if detected() < Isa::Avx2 {
            return;
        }
        let wide = detected() >= Isa::Avx512;
        for (rows, m, k) in [
            (17, 1, 384),
            (8, 4, 64),
            (9, 7, 13),
            (3, 2, 7),
            (16, 5, 1000),
            (2, 1, 8),
        ] {
            let (w, x) = (values(rows * k, 11), values(m * k, 12));
            let mut a = vec![0.0; m * rows];
            unsafe { avx2::dot_tile_f32(&w, rows, &x, m, k, &mut a) };
            for i in 0..m {
                for r in 0..rows {
                    let want = dot8(&w[r * k..(r + 1) * k], &x[i * k..(i + 1) * k]);
                    assert_eq!(
                        a[i * rows + r].to_bits(),
                        want.to_bits(),
                        "avx2 {rows} {m} {k}"
                    );
                }
            }
            if wide {
                let mut b = vec![0.0; m * rows];
                unsafe { avx512::dot_tile_f32(&w, rows, &x, m, k, &mut b) };
                assert_eq!(bits(&a), bits(&b), "avx512 {rows} {m} {k}");
                let stride = k + 3;
                let ws = values(rows * stride, 13);
                let (mut s2, mut s5) = (vec![0.0; rows], vec![0.0; rows]);
                unsafe {
                    avx2::dot_rows_strided(&ws, stride, &x[..k], &mut s2);
                    avx512::dot_rows_strided(&ws, stride, &x[..k], &mut s5);
                }
                assert_eq!(bits(&s2), bits(&s5), "strided {rows} {k}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }
}
