//! The materialized kernels: attention that keeps its probabilities
//! `[B, H, T, S]`, and its gradients from them.

use super::{batch_segments, gemm_into, parallel, Heads, Mat, Segment, BQ};
use crate::lanes::{dot, exp_sum, max_of, scale_in_place, softmax_grad};
use crate::pool::{for_each_chunk_mut, for_each_index, Shared};
use crate::{ensure, Result};

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
    let parallel = parallel(q.len() * keys);
    for_each_chunk_mut(probs, queries * keys, parallel, |t, p| body((t, p)));
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
