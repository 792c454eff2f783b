//! Copies that change layout: strided views made contiguous, concatenation.

use crate::pool::{for_each_chunk_mut, parallel, CHUNK};
use crate::strided::Walk;
use crate::{ensure, Result};

/// From this many elements a copy runs on the team (two chunks or more): the
/// copies of a step (q, k and v narrowed out of a projection, a concatenation)
/// are a few hundred kilobytes, and one core copies them at a fraction of the
/// machine's bandwidth.
const COPY_THRESHOLD: usize = 1 << 16;

/// Make the strided view described by `walk` over `src` contiguous in `out`.
pub fn copy_strided<T: Copy + Send + Sync>(src: &[T], walk: &Walk<1>, out: &mut [T]) -> Result<()> {
    ensure!(
        walk.len() == out.len(),
        "copy: walk covers {} elements, output has {}",
        walk.len(),
        out.len()
    );
    let [step] = walk.inner_strides();
    let parallel = parallel(out.len(), COPY_THRESHOLD);
    for_each_chunk_mut(out, CHUNK, parallel, |ci, chunk| {
        let start = ci * CHUNK;
        walk.segments(start, start + chunk.len(), |seg| {
            let o = &mut chunk[seg.out - start..seg.out - start + seg.len];
            let [off] = seg.offsets;
            if step == 1 {
                o.copy_from_slice(&src[off..off + seg.len]);
            } else {
                for (i, v) in o.iter_mut().enumerate() {
                    *v = src[off + i * step];
                }
            }
        });
    });
    Ok(())
}

/// Concatenate along one axis: input i is `[outer, inners[i]]`, `out` is
/// `[outer, sum(inners)]`.
pub fn concat<T: Copy + Send + Sync>(
    inputs: &[&[T]],
    inners: &[usize],
    outer: usize,
    out: &mut [T],
) -> Result<()> {
    ensure!(
        inputs.len() == inners.len(),
        "concat: {} inputs but {} sizes",
        inputs.len(),
        inners.len()
    );
    let row: usize = inners.iter().sum();
    ensure!(
        out.len() == outer * row,
        "concat: output has {} elements, expected {}",
        out.len(),
        outer * row
    );
    for (i, (x, &n)) in inputs.iter().zip(inners).enumerate() {
        ensure!(
            x.len() == outer * n,
            "concat: input {i} has {} elements, expected {}",
            x.len(),
            outer * n
        );
    }
    if row == 0 {
        return Ok(());
    }
    let rows_per_chunk = (CHUNK / row).max(1);
    let parallel = parallel(out.len(), COPY_THRESHOLD);
    for_each_chunk_mut(out, rows_per_chunk * row, parallel, |ci, chunk| {
        for (r, dst) in chunk.chunks_mut(row).enumerate() {
            let o = ci * rows_per_chunk + r;
            let mut col = 0;
            for (x, &n) in inputs.iter().zip(inners) {
                dst[col..col + n].copy_from_slice(&x[o * n..(o + 1) * n]);
                col += n;
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_via_strides() {
        let x: Vec<u32> = (0..6).collect(); // [2,3]
        let walk = Walk::new(&[3, 2], [&[1, 3]], [0], [6]).unwrap();
        let mut out = vec![0u32; 6];
        copy_strided(&x, &walk, &mut out).unwrap();
        assert_eq!(out, [0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn concat_rows() {
        let a = [1u32, 2, 3, 4];
        let b = [9u32, 8];
        let mut out = [0u32; 6];
        concat(&[&a, &b], &[2, 1], 2, &mut out).unwrap();
        assert_eq!(out, [1, 2, 9, 3, 4, 8]);
    }
}
