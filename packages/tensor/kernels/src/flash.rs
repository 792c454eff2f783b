//! Flash attention: exact attention computed in tiles of queries and keys
//! with an online softmax, keeping only each row's maximum and sum
//! `[B, H, T]`; the backward pass recomputes the probabilities tile by tile.
//! Memory is linear in the sequence length. Layouts, masking and grouped
//! heads are those of [`crate::attention`].
//!
//! The forward kernel takes arbitrary segments (one per sequence, ragged
//! lengths, keys anywhere in the key buffer), which is what incremental
//! decoding over a key/value cache needs.

use crate::attention::{
    batch_segments, gemm_into, parallel, query_blocks, visible_scores, Heads, Mat, OnlineBlock,
    Segment, BK, BQ,
};
use crate::lanes::{dot, exp_sum, softmax_grad};
use crate::pool::{for_each_index, for_each_task, Shared};
use crate::{ensure, math, Result};

/// Query and key rows per tile of the backward pass: small, so that under a
/// causal mask the tiles above the diagonal are skipped rather than computed.
const BACK: usize = 64;

/// Attention over `segments`; `stats`, when given, receives each query row's
/// softmax maximum and sum at `q_row * heads + head * q_len + i` (`[B, H, T]`
/// for a dense batch).
pub fn flash_forward(
    h: &Heads,
    segments: &[Segment],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    stats: Option<(&mut [f32], &mut [f32])>,
) -> Result<()> {
    h.check_segments(segments, q.len(), k.len(), v.len())?;
    ensure!(
        out.len() == q.len(),
        "flash attention: output of {} elements for {} queries",
        out.len(),
        q.len()
    );
    let rows = q.len() / h.head_dim;
    let stats = match stats {
        Some((m, l)) => {
            ensure!(
                m.len() == rows && l.len() == rows,
                "flash attention: statistics of {} and {} for {rows} query rows",
                m.len(),
                l.len()
            );
            Some((Shared::new(m), Shared::new(l)))
        }
        None => None,
    };
    let (tasks, work) = query_blocks(h, segments.iter().map(|s| (s.q_len, s.kv_len)));
    let out = Shared::new(out);
    let body = |&(j, head, i0): &(usize, usize, usize)| {
        // SAFETY: segments cover each query row once (checked), so task (segment,
        // head, block) is the only writer of those rows' head slice and statistics.
        unsafe { forward_block(h, &segments[j], head, i0, q, k, v, out, stats) };
    };
    for_each_task(&tasks, parallel(work), body);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
unsafe fn forward_block(
    h: &Heads,
    seg: &Segment,
    head: usize,
    i0: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: Shared,
    stats: Option<(Shared, Shared)>,
) {
    let (dh, qs, ks) = (h.head_dim, h.q_stride(), h.kv_stride());
    let i1 = (i0 + BQ).min(seg.q_len);
    let bq = i1 - i0;
    let g = head / h.group();
    let qp = q.as_ptr().add((seg.q_row + i0) * qs + head * dh);
    let kp = k.as_ptr().add(seg.kv_row * ks + g * dh);
    let vp = v.as_ptr().add(seg.kv_row * ks + g * dh);
    let mut block = OnlineBlock::new(bq, dh);
    let (first, last) = if seg.kv_len == 0 {
        (0, 0)
    } else {
        (h.keys(seg, i0).0, h.keys(seg, i1 - 1).1)
    };
    for s0 in (first..last).step_by(BK) {
        let s1 = (s0 + BK).min(last);
        block.add_tile(h, seg, i0, (s0, s1), qp, kp.add(s0 * ks), vp.add(s0 * ks));
    }
    for r in 0..bq {
        block.write_row(r, out.at((seg.q_row + i0 + r) * qs + head * dh));
        if let Some((ms, ls)) = stats {
            let at = seg.q_row * h.heads + head * seg.q_len + i0 + r;
            *ms.at(at) = block.m[r];
            *ls.at(at) = block.l[r];
        }
    }
}

/// Gradients of dense-batch flash attention from its output and statistics.
#[allow(clippy::too_many_arguments)]
pub fn flash_backward(
    h: &Heads,
    batch: usize,
    queries: usize,
    keys: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    dout: &[f32],
    row_max: &[f32],
    row_sum: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) -> Result<()> {
    ensure!(
        q.len() == batch * queries * h.q_stride() && k.len() == batch * keys * h.kv_stride(),
        "flash attention backward: {} query and {} key elements for batch {batch}, {queries} queries, {keys} keys and {h:?}",
        q.len(),
        k.len()
    );
    let segs = batch_segments(batch, queries, keys);
    h.check_segments(&segs, q.len(), k.len(), v.len())?;
    let rows = batch * queries * h.heads;
    ensure!(
        out.len() == q.len()
            && dout.len() == q.len()
            && dq.len() == q.len()
            && dk.len() == k.len()
            && dv.len() == v.len(),
        "flash attention backward: gradient sizes disagree with the operands"
    );
    ensure!(
        row_max.len() == rows && row_sum.len() == rows,
        "flash attention backward: statistics of {} and {} for {rows} rows",
        row_max.len(),
        row_sum.len()
    );
    dq.fill(0.0);
    dk.fill(0.0);
    dv.fill(0.0);
    let (dq, dk, dv) = (Shared::new(dq), Shared::new(dk), Shared::new(dv));
    let body = |t: usize| {
        let (b, g) = (t / h.kv_heads, t % h.kv_heads);
        // SAFETY: task (b, g) writes the dq rows of g's query heads and the dk/dv rows of g in sequence b only.
        unsafe {
            backward_group(
                h, &segs[b], g, q, k, v, out, dout, row_max, row_sum, dq, dk, dv,
            )
        };
    };
    for_each_index(batch * h.kv_heads, parallel(q.len() * keys), body);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
unsafe fn backward_group(
    h: &Heads,
    seg: &Segment,
    g: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &[f32],
    dout: &[f32],
    row_max: &[f32],
    row_sum: &[f32],
    dq: Shared,
    dk: Shared,
    dv: Shared,
) {
    let (dh, qs, ks) = (h.head_dim, h.q_stride(), h.kv_stride());
    if seg.q_len == 0 || seg.kv_len == 0 {
        return;
    }
    let kv_off = seg.kv_row * ks + g * dh;
    let (kp, vp) = (k.as_ptr().add(kv_off), v.as_ptr().add(kv_off));
    let mut p = vec![0.0f32; BACK * BACK];
    let mut dp = vec![0.0f32; BACK * BACK];
    let mut delta = vec![0.0f32; seg.q_len];
    let mut lse = vec![0.0f32; seg.q_len];
    let (first, last) = (h.keys(seg, 0).0, h.keys(seg, seg.q_len - 1).1);
    for head in g * h.group()..(g + 1) * h.group() {
        let q_off = seg.q_row * qs + head * dh;
        let (qp, dop) = (q.as_ptr().add(q_off), dout.as_ptr().add(q_off));
        let stat = seg.q_row * h.heads + head * seg.q_len;
        for i in 0..seg.q_len {
            let row = q_off + i * qs;
            delta[i] = dot(&dout[row..row + dh], &out[row..row + dh]);
            lse[i] = row_max[stat + i] + math::ln(row_sum[stat + i]);
        }
        for s0 in (first..last).step_by(BACK) {
            let s1 = (s0 + BACK).min(last);
            let bk = s1 - s0;
            let (ilo, ihi) = h.queries(seg, s0, s1);
            for i0 in (ilo..ihi).step_by(BACK) {
                let bq = (i0 + BACK).min(ihi) - i0;
                gemm_into(
                    bq,
                    bk,
                    dh,
                    p.as_mut_ptr(),
                    BACK,
                    false,
                    Mat(qp.add(i0 * qs), qs, 1),
                    Mat(kp.add(s0 * ks), 1, ks),
                    h.scale,
                );
                for r in 0..bq {
                    let row = &mut p[r * BACK..r * BACK + bk];
                    if let Some(visible) = visible_scores(row, s0, s1, h.keys(seg, i0 + r)) {
                        exp_sum(visible, lse[i0 + r]);
                    }
                }
                gemm_into(
                    bk,
                    dh,
                    bq,
                    dv.at(kv_off + s0 * ks),
                    ks,
                    true,
                    Mat(p.as_ptr(), 1, BACK),
                    Mat(dop.add(i0 * qs), qs, 1),
                    1.0,
                );
                gemm_into(
                    bq,
                    bk,
                    dh,
                    dp.as_mut_ptr(),
                    BACK,
                    false,
                    Mat(dop.add(i0 * qs), qs, 1),
                    Mat(vp.add(s0 * ks), 1, ks),
                    1.0,
                );
                for r in 0..bq {
                    softmax_grad(
                        &p[r * BACK..r * BACK + bk],
                        &mut dp[r * BACK..r * BACK + bk],
                        delta[i0 + r],
                    );
                }
                gemm_into(
                    bq,
                    dh,
                    bk,
                    dq.at(q_off + i0 * qs),
                    qs,
                    true,
                    Mat(dp.as_ptr(), BACK, 1),
                    Mat(kp.add(s0 * ks), ks, 1),
                    h.scale,
                );
                gemm_into(
                    bk,
                    dh,
                    bq,
                    dk.at(kv_off + s0 * ks),
                    ks,
                    true,
                    Mat(dp.as_ptr(), 1, BACK),
                    Mat(qp.add(i0 * qs), qs, 1),
                    h.scale,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::{materialized_backward, materialized_forward};

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Plain attention in f64 for one dense batch.
    fn naive(h: &Heads, b: usize, t: usize, s: usize, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
        let (dh, qs, ks) = (h.head_dim, h.q_stride(), h.kv_stride());
        let mut out = vec![0.0f32; q.len()];
        let seg = |bi: usize| Segment {
            q_row: bi * t,
            q_len: t,
            kv_row: bi * s,
            kv_len: s,
        };
        for bi in 0..b {
            for head in 0..h.heads {
                let g = head / h.group();
                for i in 0..t {
                    let (lo, hi) = h.keys(&seg(bi), i);
                    let qr = &q[(bi * t + i) * qs + head * dh..][..dh];
                    let scores: Vec<f64> = (lo..hi)
                        .map(|j| {
                            let kr = &k[(bi * s + j) * ks + g * dh..][..dh];
                            qr.iter()
                                .zip(kr)
                                .map(|(a, b)| *a as f64 * *b as f64)
                                .sum::<f64>()
                                * h.scale as f64
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for d in 0..dh {
                        let acc: f64 = (lo..hi)
                            .zip(&e)
                            .map(|(j, w)| w * v[(bi * s + j) * ks + g * dh + d] as f64)
                            .sum();
                        out[(bi * t + i) * qs + head * dh + d] = (acc / z) as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn flash_and_materialized_match_naive_and_each_other() {
        for (causal, window, heads, kv_heads, t, s) in [
            (true, 0, 4, 2, 150, 150),
            (true, 37, 2, 1, 70, 300),
            (false, 0, 2, 2, 5, 9),
            (true, 0, 3, 3, 1, 260),
        ] {
            let h = Heads {
                heads,
                kv_heads,
                head_dim: 16,
                scale: 0.25,
                causal,
                window,
            };
            let b = 2;
            let q = data(b * t * h.q_stride(), 1);
            let k = data(b * s * h.kv_stride(), 2);
            let v = data(b * s * h.kv_stride(), 3);
            let want = naive(&h, b, t, s, &q, &k, &v);
            let mut out = vec![0.0; q.len()];
            let mut probs = vec![0.0; b * heads * t * s];
            materialized_forward(&h, b, t, s, &q, &k, &v, &mut out, &mut probs).unwrap();
            let mut out2 = vec![0.0; q.len()];
            let (mut m, mut l) = (vec![0.0; b * t * heads], vec![0.0; b * t * heads]);
            flash_forward(
                &h,
                &batch_segments(b, t, s),
                &q,
                &k,
                &v,
                &mut out2,
                Some((&mut m, &mut l)),
            )
            .unwrap();
            for i in 0..q.len() {
                assert!(
                    (out[i] - want[i]).abs() < 1e-5 && (out2[i] - want[i]).abs() < 1e-5,
                    "{causal} {window}: {} {} {}",
                    out[i],
                    out2[i],
                    want[i]
                );
            }
            let dout = data(q.len(), 4);
            let grads = |flash: bool| {
                let (mut dq, mut dk, mut dv) =
                    (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
                if flash {
                    flash_backward(
                        &h, b, t, s, &q, &k, &v, &out2, &dout, &m, &l, &mut dq, &mut dk, &mut dv,
                    )
                    .unwrap();
                } else {
                    materialized_backward(
                        &h, b, t, s, &q, &k, &v, &probs, &dout, &mut dq, &mut dk, &mut dv,
                    )
                    .unwrap();
                }
                [dq, dk, dv]
            };
            let (a, f) = (grads(false), grads(true));
            for (x, y) in a.iter().zip(&f) {
                for (p, r) in x.iter().zip(y) {
                    assert!((p - r).abs() < 2e-5, "{causal} {window}: {p} vs {r}");
                }
            }
            // Finite differences of sum(out * dout) for one query and one key element.
            let loss = |q: &[f32], k: &[f32]| -> f64 {
                naive(&h, b, t, s, q, k, &v)
                    .iter()
                    .zip(&dout)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum()
            };
            let eps = 1e-2f32;
            for (which, idx) in [(0usize, 7usize), (1, 21)] {
                let (mut plus, mut minus) = if which == 0 {
                    (q.clone(), q.clone())
                } else {
                    (k.clone(), k.clone())
                };
                plus[idx] += eps;
                minus[idx] -= eps;
                let fd = if which == 0 {
                    loss(&plus, &k) - loss(&minus, &k)
                } else {
                    loss(&q, &plus) - loss(&q, &minus)
                } / (2.0 * eps as f64);
                assert!(
                    (fd - a[which][idx] as f64).abs() < 1e-3,
                    "{causal} {window}: fd {fd} vs {}",
                    a[which][idx]
                );
            }
        }
    }

    #[test]
    fn ragged_segments_match_dense_rows() {
        let h = Heads {
            heads: 2,
            kv_heads: 1,
            head_dim: 8,
            scale: 0.3,
            causal: true,
            window: 0,
        };
        let (t, s) = (6, 10);
        let q = data(t * h.q_stride(), 5);
        let k = data(s * h.kv_stride(), 6);
        let v = data(s * h.kv_stride(), 7);
        let mut full = vec![0.0; q.len()];
        flash_forward(&h, &batch_segments(1, t, s), &q, &k, &v, &mut full, None).unwrap();
        // The last two queries alone, as a decode step over the first 10 keys,
        // and the first query alone over its 5 visible keys.
        let segs = [
            Segment {
                q_row: 0,
                q_len: 4,
                kv_row: 0,
                kv_len: 8,
            },
            Segment {
                q_row: 4,
                q_len: 2,
                kv_row: 0,
                kv_len: 10,
            },
        ];
        let mut out = vec![0.0; q.len()];
        flash_forward(&h, &segs, &q, &k, &v, &mut out, None).unwrap();
        for i in 4 * h.q_stride()..q.len() {
            assert!((out[i] - full[i]).abs() < 1e-6);
        }
        let bad = [Segment {
            q_row: 0,
            q_len: 4,
            kv_row: 0,
            kv_len: 8,
        }];
        assert!(flash_forward(&h, &bad, &q, &k, &v, &mut out, None).is_err());
    }
}
