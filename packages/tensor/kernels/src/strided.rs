//! Walking a contiguous output while reading K operands through strides.
//!
//! Broadcasting, permutation, slicing and `broadcast_to` are all a strided
//! read into a contiguous write: a [`Walk`] describes one, with adjacent
//! dimensions merged wherever every operand allows, and [`Walk::segments`]
//! visits the output in runs along the innermost dimension.

use crate::{ensure, Result};

#[derive(Debug, Clone)]
pub struct Walk<const K: usize> {
    shape: Vec<usize>,
    strides: [Vec<usize>; K],
    bases: [usize; K],
    len: usize,
}

/// One run along the innermost dimension: operand offsets, output position, length.
#[derive(Debug, Clone, Copy)]
pub struct Segment<const K: usize> {
    pub offsets: [usize; K],
    pub out: usize,
    pub len: usize,
}

impl<const K: usize> Walk<K> {
    /// `strides[k][d]` is operand k's step (in elements) along output dim d
    /// (0 for a broadcast dim). `lens[k]` bounds every offset of operand k.
    pub fn new(
        shape: &[usize],
        strides: [&[usize]; K],
        bases: [usize; K],
        lens: [usize; K],
    ) -> Result<Self> {
        for s in strides.iter() {
            ensure!(
                s.len() == shape.len(),
                "stride rank {} != shape rank {}",
                s.len(),
                shape.len()
            );
        }
        let len: usize = shape.iter().product();
        if len > 0 {
            for k in 0..K {
                let last: usize = shape
                    .iter()
                    .zip(strides[k])
                    .map(|(&n, &s)| (n - 1) * s)
                    .sum();
                ensure!(
                    bases[k] + last < lens[k],
                    "operand {k} read past its end ({} >= {})",
                    bases[k] + last,
                    lens[k]
                );
            }
        }
        let mut dims: Vec<usize> = Vec::new();
        let mut st: [Vec<usize>; K] = std::array::from_fn(|_| Vec::new());
        for d in 0..shape.len() {
            if shape[d] == 1 {
                continue;
            }
            let mergeable = !dims.is_empty()
                && (0..K).all(|k| *st[k].last().unwrap() == strides[k][d] * shape[d]);
            if mergeable {
                let last = dims.len() - 1;
                dims[last] *= shape[d];
                for k in 0..K {
                    st[k][last] = strides[k][d];
                }
            } else {
                dims.push(shape[d]);
                for k in 0..K {
                    st[k].push(strides[k][d]);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for s in st.iter_mut() {
                s.push(0);
            }
        }
        Ok(Walk {
            shape: dims,
            strides: st,
            bases,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Steps of each operand along the innermost (merged) dimension.
    pub fn inner_strides(&self) -> [usize; K] {
        std::array::from_fn(|k| *self.strides[k].last().unwrap())
    }

    /// Visit output positions `[start, end)` as innermost runs.
    pub fn segments(&self, start: usize, end: usize, mut f: impl FnMut(Segment<K>)) {
        let rank = self.shape.len();
        let inner = self.shape[rank - 1];
        let mut index = vec![0usize; rank];
        let mut rest = start;
        for d in (0..rank).rev() {
            index[d] = rest % self.shape[d];
            rest /= self.shape[d];
        }
        let mut pos = start;
        while pos < end {
            let offsets: [usize; K] = std::array::from_fn(|k| {
                self.bases[k]
                    + index
                        .iter()
                        .zip(&self.strides[k])
                        .map(|(i, s)| i * s)
                        .sum::<usize>()
            });
            let len = (inner - index[rank - 1]).min(end - pos);
            f(Segment {
                offsets,
                out: pos,
                len,
            });
            pos += len;
            index[rank - 1] += len;
            let mut d = rank - 1;
            while d > 0 && index[d] == self.shape[d] {
                index[d] = 0;
                d -= 1;
                index[d] += 1;
            }
        }
    }
}
