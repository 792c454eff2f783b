//! Scaled dot-product attention over `[rows, heads, head_dim]` layouts, and
//! the materialized kernels (which keep the probabilities `[B, H, T, S]`).
//!
//! Queries are `[batch * queries, heads, head_dim]` and keys and values
//! `[batch * keys, kv_heads, head_dim]`, exactly as the projections produce
//! them, so nothing is transposed. Query head `h` reads key/value head
//! `h / (heads / kv_heads)` (grouped-query attention). With `causal`, query
//! `i` of a sequence with `q` queries over `s` keys sits at position
//! `s - q + i` and sees keys `0..=s - q + i`; a `window` of `w` further hides
//! keys `w` or more positions back. Hidden keys get exactly zero probability.
//!
//! Each task owns whole output rows of one head (and, for gradients, whole
//! key/value rows of one key/value head), so results are bit-identical for
//! any thread count.

mod materialized;
mod online;

pub use materialized::{materialized_backward, materialized_forward};
pub(crate) use online::{online_update, OnlineBlock};

pub(crate) use crate::packed::{gemm_into, Mat};
use crate::pool::PARALLEL_WORK;
use crate::{ensure, Result};

/// Query rows per block.
pub(crate) const BQ: usize = 64;
/// Key rows per tile of the online-softmax kernels.
pub(crate) const BK: usize = 128;

/// Head layout, scale and masking shared by every attention kernel.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub causal: bool,
    /// Hide keys `window` or more positions before the query (0: no window; causal only).
    pub window: usize,
}

/// One sequence: `q_len` query rows from `q_row`, `kv_len` key rows from `kv_row`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub q_row: usize,
    pub q_len: usize,
    pub kv_row: usize,
    pub kv_len: usize,
}

/// The segments of a dense batch: sequence `b` has queries `b*T..` and keys `b*S..`.
pub fn batch_segments(batch: usize, queries: usize, keys: usize) -> Vec<Segment> {
    (0..batch)
        .map(|b| Segment {
            q_row: b * queries,
            q_len: queries,
            kv_row: b * keys,
            kv_len: keys,
        })
        .collect()
}

impl Heads {
    pub(crate) fn check(&self) -> Result<()> {
        ensure!(
            self.heads > 0 && self.kv_heads > 0 && self.head_dim > 0,
            "attention: empty head layout {self:?}"
        );
        ensure!(
            self.heads.is_multiple_of(self.kv_heads),
            "attention: {} query heads are not a multiple of {} key/value heads",
            self.heads,
            self.kv_heads
        );
        ensure!(
            self.window == 0 || self.causal,
            "attention: a sliding window needs causal masking"
        );
        ensure!(
            self.scale.is_finite(),
            "attention: scale {} is not finite",
            self.scale
        );
        Ok(())
    }

    pub(crate) fn q_stride(&self) -> usize {
        self.heads * self.head_dim
    }

    pub(crate) fn kv_stride(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    pub(crate) fn group(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// Keys `[lo, hi)` that query `i` of `seg` sees.
    #[inline]
    pub(crate) fn keys(&self, seg: &Segment, i: usize) -> (usize, usize) {
        if !self.causal {
            return (0, seg.kv_len);
        }
        let hi = seg.kv_len - seg.q_len + i + 1;
        let lo = if self.window > 0 {
            hi.saturating_sub(self.window)
        } else {
            0
        };
        (lo, hi)
    }

    /// Queries `[lo, hi)` that see at least one of the keys `[s0, s1)`.
    pub(crate) fn queries(&self, seg: &Segment, s0: usize, s1: usize) -> (usize, usize) {
        if !self.causal {
            return (0, seg.q_len);
        }
        let offset = seg.kv_len - seg.q_len;
        let lo = s0.saturating_sub(offset).min(seg.q_len);
        let hi = if self.window > 0 {
            (s1 + self.window - 1).saturating_sub(offset).min(seg.q_len)
        } else {
            seg.q_len
        };
        (lo, hi.max(lo))
    }

    /// Validate the segments against the operand sizes: the query rows are
    /// covered exactly once and every key row exists.
    pub(crate) fn check_segments(
        &self,
        segs: &[Segment],
        q: usize,
        k: usize,
        v: usize,
    ) -> Result<()> {
        self.check()?;
        let (qs, ks) = (self.q_stride(), self.kv_stride());
        ensure!(
            q.is_multiple_of(qs) && k.is_multiple_of(ks) && k == v,
            "attention: {q} query, {k} key and {v} value elements for {self:?}"
        );
        let (q_rows, kv_rows) = (q / qs, k / ks);
        let mut order: Vec<&Segment> = segs.iter().collect();
        order.sort_by_key(|s| s.q_row);
        let mut next = 0;
        for s in order {
            ensure!(s.q_row == next, "attention: segments must cover the {q_rows} query rows once; row {next} is not where a segment starts ({s:?})");
            ensure!(
                s.kv_row + s.kv_len <= kv_rows,
                "attention: segment {s:?} reads past {kv_rows} key rows"
            );
            ensure!(
                !self.causal || s.q_len <= s.kv_len,
                "attention: causal segment {s:?} has more queries than keys"
            );
            next += s.q_len;
        }
        ensure!(
            next == q_rows,
            "attention: segments cover {next} of {q_rows} query rows"
        );
        Ok(())
    }
}

/// Whether `work` multiply-adds are worth the kernel threads.
pub(crate) fn parallel(work: usize) -> bool {
    crate::pool::parallel(work, PARALLEL_WORK)
}

/// The tasks of a forward pass over `segments` (their query and key lengths):
/// `(segment, head, first query row)` per block of [`BQ`] query rows of one
/// head, and the multiply-adds they come to.
pub(crate) fn query_blocks(
    h: &Heads,
    segments: impl Iterator<Item = (usize, usize)>,
) -> (Vec<(usize, usize, usize)>, usize) {
    let mut tasks = Vec::new();
    let mut work = 0usize;
    for (j, (q_len, kv_len)) in segments.enumerate() {
        for head in 0..h.heads {
            for i0 in (0..q_len).step_by(BQ) {
                tasks.push((j, head, i0));
            }
        }
        work += q_len * kv_len * h.heads * h.head_dim;
    }
    (tasks, work)
}

/// The part of a row of scores for keys `[s0, s1)` that a query seeing keys
/// `[lo, hi)` sees; the rest of the row is zeroed. `None` (and a zero row)
/// when it sees none of them.
#[inline(always)]
pub(crate) fn visible_scores(
    row: &mut [f32],
    s0: usize,
    s1: usize,
    (lo, hi): (usize, usize),
) -> Option<&mut [f32]> {
    let (a, b) = (lo.clamp(s0, s1) - s0, hi.clamp(s0, s1) - s0);
    if a >= b {
        row.fill(0.0);
        return None;
    }
    row[..a].fill(0.0);
    row[b..].fill(0.0);
    Some(&mut row[a..b])
}
