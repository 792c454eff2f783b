//! The online softmax of the tiled attention kernels (flash and paged): keys
//! taken a tile at a time, the running maximum and sum kept per query row.

use super::{gemm_into, visible_scores, Heads, Mat, Segment, BK};
use crate::lanes::{exp_sum, max_of, scale_in_place};
use crate::math;

/// One step of the online softmax: exponentiate `visible` scores against the
/// running maximum `m`, rescale the accumulator `acc` if the maximum moved,
/// and add their sum to `l`.
#[inline(always)]
pub(crate) fn online_update(visible: &mut [f32], acc: &mut [f32], m: &mut f32, l: &mut f32) {
    let m_new = m.max(max_of(visible));
    let correction = if *m == f32::NEG_INFINITY {
        0.0
    } else {
        math::exp(*m - m_new)
    };
    let sum = exp_sum(visible, m_new);
    *l = *l * correction + sum;
    *m = m_new;
    if correction != 1.0 {
        scale_in_place(acc, correction);
    }
}

/// The online softmax of one block of query rows of one head, fed tiles of
/// keys in key order: the scores of the current tile `[rows, BK]`, and per
/// row the unnormalized output, the running maximum `m` and the sum `l`.
pub(crate) struct OnlineBlock {
    pub(crate) scores: Vec<f32>,
    pub(crate) acc: Vec<f32>,
    pub(crate) m: Vec<f32>,
    pub(crate) l: Vec<f32>,
    head_dim: usize,
}

/// The buffers of finished blocks, for the next ones on the same thread (a decode
/// step starts a block per head and layer).
type Spare = [Vec<f32>; 4];

thread_local! {
    static SPARE: std::cell::RefCell<Vec<Spare>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most finished blocks' buffers a thread keeps.
const SPARE_BLOCKS: usize = 4;

impl OnlineBlock {
    pub(crate) fn new(rows: usize, head_dim: usize) -> Self {
        let spare = SPARE.with(|s| s.borrow_mut().pop());
        let [mut scores, mut acc, mut m, mut l] = spare.unwrap_or_default();
        let fill = |v: &mut Vec<f32>, len: usize, value: f32| {
            v.clear();
            v.resize(len, value);
        };
        // Every score a tile reads is written by its product first.
        if scores.len() < rows * BK {
            scores.resize(rows * BK, 0.0);
        }
        fill(&mut acc, rows * head_dim, 0.0);
        fill(&mut m, rows, f32::NEG_INFINITY);
        fill(&mut l, rows, 0.0);
        OnlineBlock {
            scores,
            acc,
            m,
            l,
            head_dim,
        }
    }

    /// Take in keys `[s0, s1)` (at most [`BK`]) of `seg` for its query rows
    /// from `i0`: scores, masking, the online update, then `acc += p v`.
    ///
    /// # Safety
    /// `qp` addresses this block's query rows (row stride `h.q_stride()`), and
    /// `kp` and `vp` the tile's key and value rows (row stride `h.kv_stride()`),
    /// each `h.head_dim` long.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn add_tile(
        &mut self,
        h: &Heads,
        seg: &Segment,
        i0: usize,
        (s0, s1): (usize, usize),
        qp: *const f32,
        kp: *const f32,
        vp: *const f32,
    ) {
        let (dh, qs, ks) = (h.head_dim, h.q_stride(), h.kv_stride());
        let (bq, bk) = (self.m.len(), s1 - s0);
        let scores = self.scores.as_mut_ptr();
        gemm_into(
            bq,
            bk,
            dh,
            scores,
            BK,
            false,
            Mat(qp, qs, 1),
            Mat(kp, 1, ks),
            h.scale,
        );
        for r in 0..bq {
            let row = &mut self.scores[r * BK..r * BK + bk];
            if let Some(visible) = visible_scores(row, s0, s1, h.keys(seg, i0 + r)) {
                let acc = &mut self.acc[r * dh..(r + 1) * dh];
                online_update(visible, acc, &mut self.m[r], &mut self.l[r]);
            }
        }
        let p = Mat(self.scores.as_ptr(), BK, 1);
        gemm_into(
            bq,
            dh,
            bk,
            self.acc.as_mut_ptr(),
            dh,
            true,
            p,
            Mat(vp, ks, 1),
            1.0,
        );
    }

    /// Write row `r` of the finished output, `acc / l` (zero when `l` is not
    /// positive), to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for `head_dim` writes that no other task makes.
    pub(crate) unsafe fn write_row(&self, r: usize, dst: *mut f32) {
        let l = self.l[r];
        let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
        let dh = self.head_dim;
        let dst = std::slice::from_raw_parts_mut(dst, dh);
        for (o, &a) in dst.iter_mut().zip(&self.acc[r * dh..(r + 1) * dh]) {
            *o = a * inv;
        }
    }
}

impl Drop for OnlineBlock {
    fn drop(&mut self) {
        let bufs = [
            std::mem::take(&mut self.scores),
            std::mem::take(&mut self.acc),
            std::mem::take(&mut self.m),
            std::mem::take(&mut self.l),
        ];
        // A thread that is exiting has no spares to keep.
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_BLOCKS {
                s.push(bufs);
            }
        });
    }
}
