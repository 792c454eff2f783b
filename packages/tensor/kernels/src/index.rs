//! Indexing: select rows by index, gather along an axis, and their adjoints
//! (index-add and scatter-add), accumulated in index order.

use crate::pool::{for_each_chunk_mut, PARALLEL_THRESHOLD};
use crate::{ensure, Result};

fn check_indices(op: &str, idx: &[i64], n: usize) -> Result<()> {
    if let Some((pos, &bad)) = idx
        .iter()
        .enumerate()
        .find(|(_, &i)| i < 0 || i as usize >= n)
    {
        return Err(crate::KernelError(format!(
            "{op}: index {bad} at position {pos} is out of range for an axis of size {n}"
        )));
    }
    Ok(())
}

/// `out[o, j, :] = x[o, idx[j], :]` with x `[outer, n, inner]`, out `[outer, m, inner]`.
pub fn index_select<T: Copy + Send + Sync>(
    x: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    idx: &[i64],
    out: &mut [T],
) -> Result<()> {
    let m = idx.len();
    ensure!(
        x.len() == outer * n * inner,
        "index_select: input has {} elements, expected {}",
        x.len(),
        outer * n * inner
    );
    ensure!(
        out.len() == outer * m * inner,
        "index_select: output has {} elements, expected {}",
        out.len(),
        outer * m * inner
    );
    check_indices("index_select", idx, n)?;
    if out.is_empty() {
        return Ok(());
    }
    let work = |(r, dst): (usize, &mut [T])| {
        let (o, j) = (r / m, r % m);
        let src = (o * n + idx[j] as usize) * inner;
        dst.copy_from_slice(&x[src..src + inner]);
    };
    if inner == 0 {
        return Ok(());
    }
    for_each_chunk_mut(out, inner, out.len() >= PARALLEL_THRESHOLD, |i, c| {
        work((i, c))
    });
    Ok(())
}

/// `out[o, idx[j], :] += src[o, j, :]`, in j order (out holds the base values).
pub fn index_add_f32(
    out: &mut [f32],
    outer: usize,
    n: usize,
    inner: usize,
    idx: &[i64],
    src: &[f32],
) -> Result<()> {
    let m = idx.len();
    ensure!(
        out.len() == outer * n * inner,
        "index_add: target has {} elements, expected {}",
        out.len(),
        outer * n * inner
    );
    ensure!(
        src.len() == outer * m * inner,
        "index_add: source has {} elements, expected {}",
        src.len(),
        outer * m * inner
    );
    check_indices("index_add", idx, n)?;
    if inner == 0 || n == 0 {
        return Ok(());
    }
    let work = |(o, slab): (usize, &mut [f32])| {
        for (j, &i) in idx.iter().enumerate() {
            let s = &src[(o * m + j) * inner..(o * m + j + 1) * inner];
            let d = &mut slab[i as usize * inner..(i as usize + 1) * inner];
            for (a, &b) in d.iter_mut().zip(s) {
                *a += b;
            }
        }
    };
    let parallel = src.len() >= PARALLEL_THRESHOLD && outer > 1;
    for_each_chunk_mut(out, n * inner, parallel, |i, c| work((i, c)));
    Ok(())
}

/// `out[o, j, i] = x[o, idx[o, j, i], i]` with x `[outer, n, inner]`, idx and out `[outer, m, inner]`.
pub fn gather<T: Copy + Send + Sync>(
    x: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    idx: &[i64],
    out: &mut [T],
) -> Result<()> {
    ensure!(
        x.len() == outer * n * inner,
        "gather: input has {} elements, expected {}",
        x.len(),
        outer * n * inner
    );
    ensure!(
        out.len() == idx.len(),
        "gather: output has {} elements, index {}",
        out.len(),
        idx.len()
    );
    check_indices("gather", idx, n)?;
    if inner == 0 || outer == 0 {
        return Ok(());
    }
    let m = idx.len() / (outer * inner);
    for (p, v) in out.iter_mut().enumerate() {
        let (o, i) = (p / (m * inner), p % inner);
        *v = x[(o * n + idx[p] as usize) * inner + i];
    }
    Ok(())
}

/// `out[o, idx[o, j, i], i] += src[o, j, i]` in (j) order; out holds the base values.
pub fn scatter_add_f32(
    out: &mut [f32],
    outer: usize,
    n: usize,
    inner: usize,
    idx: &[i64],
    src: &[f32],
) -> Result<()> {
    ensure!(
        out.len() == outer * n * inner,
        "scatter_add: target has {} elements, expected {}",
        out.len(),
        outer * n * inner
    );
    ensure!(
        src.len() == idx.len(),
        "scatter_add: source has {} elements, index {}",
        src.len(),
        idx.len()
    );
    check_indices("scatter_add", idx, n)?;
    if inner == 0 || outer == 0 {
        return Ok(());
    }
    let m = idx.len() / (outer * inner);
    for (p, &s) in src.iter().enumerate() {
        let (o, i) = (p / (m * inner), p % inner);
        out[(o * n + idx[p] as usize) * inner + i] += s;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_lookup_and_adjoint() {
        let table = [0.0f32, 1.0, 10.0, 11.0, 20.0, 21.0]; // [3,2]
        let mut out = [0.0f32; 6];
        index_select(&table, 1, 3, 2, &[2, 0, 2], &mut out).unwrap();
        assert_eq!(out, [20.0, 21.0, 0.0, 1.0, 20.0, 21.0]);
        let mut grad = [0.0f32; 6];
        index_add_f32(&mut grad, 1, 3, 2, &[2, 0, 2], &[1.0; 6]).unwrap();
        assert_eq!(grad, [1.0, 1.0, 0.0, 0.0, 2.0, 2.0]);
        assert!(index_select(&table, 1, 3, 2, &[3], &mut [0.0; 2]).is_err());
        assert!(index_select(&table, 1, 3, 2, &[-1], &mut [0.0; 2]).is_err());
    }

    #[test]
    fn gather_rows() {
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2,3], gather along axis 1
        let mut out = [0.0f32; 2];
        gather(&x, 2, 3, 1, &[2, 0], &mut out).unwrap();
        assert_eq!(out, [3.0, 4.0]);
        let mut back = [0.0f32; 6];
        scatter_add_f32(&mut back, 2, 3, 1, &[2, 0], &[1.0, 1.0]).unwrap();
        assert_eq!(back, [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
    }
}
