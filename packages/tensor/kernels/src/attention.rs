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

use rayon::prelude::*;

use crate::lanes::{dot, exp_sum, max_of, scale_in_place, softmax_grad};
pub(crate) use crate::packed::{gemm_into, Mat};
use crate::pool::{for_each_index, install, Shared, PARALLEL_WORK};
use crate::{ensure, math, Result};

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
            self.heads % self.kv_heads == 0,
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
            q % qs == 0 && k % ks == 0 && k == v,
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

impl OnlineBlock {
    pub(crate) fn new(rows: usize, head_dim: usize) -> Self {
        OnlineBlock {
            scores: vec![0.0; rows * BK],
            acc: vec![0.0; rows * head_dim],
            m: vec![f32::NEG_INFINITY; rows],
            l: vec![0.0; rows],
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

fn check_batch(
    h: &Heads,
    batch: usize,
    queries: usize,
    keys: usize,
    q: usize,
    k: usize,
    v: usize,
) -> Result<Vec<Segment>> {
    ensure!(
        q == batch * queries * h.q_stride() && k == batch * keys * h.kv_stride() && v == k,
        "attention: {q} query, {k} key and {v} value elements for batch {batch}, {queries} queries, {keys} keys and {h:?}"
    );
    let segs = batch_segments(batch, queries, keys);
    h.check_segments(&segs, q, k, v)?;
    Ok(segs)
}

/// Attention that keeps its probabilities: `out` `[B*T, H, Dh]`, `probs` `[B, H, T, S]`.
#[allow(clippy::too_many_arguments)]
pub fn materialized_forward(
    h: &Heads,
    batch: usize,
    queries: usize,
    keys: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    probs: &mut [f32],
) -> Result<()> {
    let segs = check_batch(h, batch, queries, keys, q.len(), k.len(), v.len())?;
    ensure!(
        out.len() == q.len(),
        "attention: output of {} elements for {} queries",
        out.len(),
        q.len()
    );
    ensure!(
        probs.len() == batch * h.heads * queries * keys,
        "attention: {} probabilities for [{batch}, {}, {queries}, {keys}]",
        probs.len(),
        h.heads
    );
    if queries * keys == 0 {
        out.fill(0.0);
        return Ok(());
    }
    let out = Shared::new(out);
    let body = |(t, p): (usize, &mut [f32])| {
        let (b, head) = (t / h.heads, t % h.heads);
        // SAFETY: task (b, head) writes only its own rows' head slice of `out`.
        unsafe { forward_head(h, &segs[b], head, q, k, v, out, p) };
    };
    if parallel(q.len() * keys) {
        install(|| {
            probs
                .par_chunks_mut(queries * keys)
                .enumerate()
                .for_each(body)
        });
    } else {
        probs.chunks_mut(queries * keys).enumerate().for_each(body);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
unsafe fn forward_head(
    h: &Heads,
    seg: &Segment,
    head: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: Shared,
    p: &mut [f32],
) {
    let (dh, qs, ks, s) = (h.head_dim, h.q_stride(), h.kv_stride(), seg.kv_len);
    let g = head / h.group();
    let qp = q.as_ptr().add(seg.q_row * qs + head * dh);
    let kp = k.as_ptr().add(seg.kv_row * ks + g * dh);
    let vp = v.as_ptr().add(seg.kv_row * ks + g * dh);
    for r0 in (0..seg.q_len).step_by(BQ) {
        let r1 = (r0 + BQ).min(seg.q_len);
        let (a, b) = (h.keys(seg, r0).0, h.keys(seg, r1 - 1).1);
        let block = p.as_mut_ptr().add(r0 * s);
        gemm_into(
            r1 - r0,
            b - a,
            dh,
            block.add(a),
            s,
            false,
            Mat(qp.add(r0 * qs), qs, 1),
            Mat(kp.add(a * ks), 1, ks),
            h.scale,
        );
        for r in r0..r1 {
            let (lo, hi) = h.keys(seg, r);
            let row = &mut p[r * s..(r + 1) * s];
            row[..lo].fill(0.0);
            row[hi..].fill(0.0);
            let visible = &mut row[lo..hi];
            let m = max_of(visible);
            let sum = exp_sum(visible, m);
            scale_in_place(visible, 1.0 / sum);
        }
        let dst = out.at((seg.q_row + r0) * qs + head * dh);
        gemm_into(
            r1 - r0,
            dh,
            b - a,
            dst,
            qs,
            false,
            Mat(p.as_ptr().add(r0 * s + a), s, 1),
            Mat(vp.add(a * ks), ks, 1),
            1.0,
        );
    }
}

/// Gradients of [`materialized_forward`] from the saved probabilities.
#[allow(clippy::too_many_arguments)]
pub fn materialized_backward(
    h: &Heads,
    batch: usize,
    queries: usize,
    keys: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    probs: &[f32],
    dout: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) -> Result<()> {
    let segs = check_batch(h, batch, queries, keys, q.len(), k.len(), v.len())?;
    ensure!(
        probs.len() == batch * h.heads * queries * keys,
        "attention backward: {} probabilities for [{batch}, {}, {queries}, {keys}]",
        probs.len(),
        h.heads
    );
    ensure!(
        dout.len() == q.len() && dq.len() == q.len() && dk.len() == k.len() && dv.len() == v.len(),
        "attention backward: gradient sizes disagree with the operands"
    );
    dq.fill(0.0);
    dk.fill(0.0);
    dv.fill(0.0);
    if queries * keys == 0 {
        return Ok(());
    }
    let (dq, dk, dv) = (Shared::new(dq), Shared::new(dk), Shared::new(dv));
    let body = |t: usize| {
        let (b, g) = (t / h.kv_heads, t % h.kv_heads);
        // SAFETY: task (b, g) writes the dq rows of g's query heads and the dk/dv rows of g in sequence b only.
        unsafe { backward_group(h, &segs[b], b, g, q, k, v, probs, dout, dq, dk, dv) };
    };
    for_each_index(batch * h.kv_heads, parallel(q.len() * keys), body);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
unsafe fn backward_group(
    h: &Heads,
    seg: &Segment,
    b: usize,
    g: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    probs: &[f32],
    dout: &[f32],
    dq: Shared,
    dk: Shared,
    dv: Shared,
) {
    let (dh, qs, ks, s) = (h.head_dim, h.q_stride(), h.kv_stride(), seg.kv_len);
    let kv_off = seg.kv_row * ks + g * dh;
    let (kp, vp) = (k.as_ptr().add(kv_off), v.as_ptr().add(kv_off));
    let mut scratch = vec![0.0f32; BQ * s];
    for head in g * h.group()..(g + 1) * h.group() {
        let q_off = seg.q_row * qs + head * dh;
        let (qp, dop) = (q.as_ptr().add(q_off), dout.as_ptr().add(q_off));
        let pb = &probs[(b * h.heads + head) * seg.q_len * s..][..seg.q_len * s];
        for r0 in (0..seg.q_len).step_by(BQ) {
            let (r1, br) = ((r0 + BQ).min(seg.q_len), (r0 + BQ).min(seg.q_len) - r0);
            let (a, e) = (h.keys(seg, r0).0, h.keys(seg, r1 - 1).1);
            let w = e - a;
            let pp = pb.as_ptr().add(r0 * s + a);
            gemm_into(
                w,
                dh,
                br,
                dv.at(kv_off + a * ks),
                ks,
                true,
                Mat(pp, 1, s),
                Mat(dop.add(r0 * qs), qs, 1),
                1.0,
            );
            gemm_into(
                br,
                w,
                dh,
                scratch.as_mut_ptr(),
                w,
                false,
                Mat(dop.add(r0 * qs), qs, 1),
                Mat(vp.add(a * ks), 1, ks),
                1.0,
            );
            for r in 0..br {
                let prow = &pb[(r0 + r) * s + a..(r0 + r) * s + e];
                let dprow = &mut scratch[r * w..(r + 1) * w];
                let delta = dot(prow, dprow);
                softmax_grad(prow, dprow, delta);
            }
            gemm_into(
                br,
                dh,
                w,
                dq.at(q_off + r0 * qs),
                qs,
                false,
                Mat(scratch.as_ptr(), w, 1),
                Mat(kp.add(a * ks), ks, 1),
                h.scale,
            );
            gemm_into(
                w,
                dh,
                br,
                dk.at(kv_off + a * ks),
                ks,
                true,
                Mat(scratch.as_ptr(), 1, w),
                Mat(qp.add(r0 * qs), qs, 1),
                h.scale,
            );
        }
    }
}
