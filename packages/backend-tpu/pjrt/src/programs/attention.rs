//! Attention programs: materialized and flash forms with their VJPs, packed
//! ragged sequences, and a paged key/value cache.
//!
//! `q [B, T, H, Dh]`, `k`/`v` `[B, S, Hkv, Dh]`; query head h reads key/value
//! head `h / G` with `G = H / Hkv`. Internally queries are grouped as
//! `[B, Hkv, G, T, Dh]` so grouped-query attention never copies keys. Hidden
//! keys get probability exactly 0. The flash form computes the same values
//! in one XLA program and returns only the row statistics; the `[T, S]`
//! scores live inside that program, so memory is not guaranteed linear.

use super::reduce::{causal_visible, softmax_parts};
use super::{expect_elem, start, Input};
use crate::error::Result;
use crate::hlo::{Builder, Program, Reducer, Scalar, Value};
use crate::invalid;
use crate::types::ElementType::F32;

/// Sizes of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub batch: i64,
    pub queries: i64,
    pub keys: i64,
    pub heads: i64,
    pub kv_heads: i64,
    pub head_dim: i64,
}

impl Dims {
    fn group(&self) -> i64 {
        self.heads / self.kv_heads
    }
}

/// Check `q [B, T, H, Dh]` against `k`, `v` `[B, S, Hkv, Dh]`.
pub fn check(op: &str, q: &Input, k: &Input, v: &Input) -> Result<Dims> {
    for (what, x) in [("q", q), ("k", k), ("v", v)] {
        expect_elem(op, what, x, &[F32])?;
        if x.rank() != 4 {
            return invalid!(
                "{op}: {what} must be [batch, seq, heads, head_dim], found {:?}",
                x.shape
            );
        }
    }
    let (qs, ks) = (&q.shape, &k.shape);
    let ok =
        k.shape == v.shape && qs[0] == ks[0] && qs[3] == ks[3] && ks[2] > 0 && qs[2] % ks[2] == 0;
    if !ok {
        return invalid!("{op}: q {qs:?} with k {ks:?} and v {:?}", v.shape);
    }
    Ok(Dims {
        batch: qs[0],
        queries: qs[1],
        keys: ks[1],
        heads: qs[2],
        kv_heads: ks[2],
        head_dim: qs[3],
    })
}

/// `[B, T, H, Dh]` -> `[B, Hkv, G, T, Dh]`.
fn group_queries(b: &mut Builder, q: &Value, d: Dims) -> Result<Value> {
    let split = b.reshape(q, &[d.batch, d.queries, d.kv_heads, d.group(), d.head_dim])?;
    b.transpose(&split, &[0, 2, 3, 1, 4])
}

/// `[B, Hkv, G, T, Dh]` -> `[B, T, H, Dh]`.
fn ungroup_queries(b: &mut Builder, x: &Value, d: Dims) -> Result<Value> {
    let moved = b.transpose(x, &[0, 3, 1, 2, 4])?;
    b.reshape(&moved, &[d.batch, d.queries, d.heads, d.head_dim])
}

/// `[B, S, Hkv, Dh]` <-> `[B, Hkv, S, Dh]`.
fn swap_seq_heads(b: &mut Builder, x: &Value) -> Result<Value> {
    b.transpose(x, &[0, 2, 1, 3])
}

/// `[B, H, T, ...]` <-> `[B, Hkv, G, T, ...]` (a free reshape).
fn regroup(b: &mut Builder, x: &Value, d: Dims, grouped: bool) -> Result<Value> {
    let mut dims = vec![d.batch];
    if grouped {
        dims.extend([d.kv_heads, d.group()]);
    } else {
        dims.push(d.heads);
    }
    dims.extend_from_slice(&x.dims()[if grouped { 2 } else { 3 }..]);
    b.reshape(x, &dims)
}

fn scaled_scores(b: &mut Builder, q5: &Value, k4: &Value, scale: f64) -> Result<Value> {
    let s = b.dot_general(q5, k4, (&[0, 1], &[0, 1]), (&[4], &[3]))?;
    let c = b.splat(Scalar::F(scale), F32, s.dims())?;
    b.mul(&s, &c)
}

/// The `[T, S]` mask of a causal (optionally windowed) call, or None.
fn mask(b: &mut Builder, d: Dims, causal: bool, window: i64) -> Result<Option<Value>> {
    if !causal {
        return Ok(None);
    }
    Ok(Some(causal_visible(b, d.queries, d.keys, window)?))
}

/// What the forward pass computes: grouped probabilities `[B, Hkv, G, T, S]`,
/// the output `[B, T, H, Dh]` and the row statistics `[B, Hkv, G, T]`.
pub(super) struct Forward {
    pub probs5: Value,
    pub out: Value,
    pub row_max: Value,
    pub row_sum: Value,
}

/// Scores, masked softmax and the weighted values, grouped.
pub(super) fn forward(
    b: &mut Builder,
    q: &Value,
    k: &Value,
    v: &Value,
    d: Dims,
    visible: Option<&Value>,
    scale: f64,
) -> Result<Forward> {
    let q5 = group_queries(b, q, d)?;
    let k4 = swap_seq_heads(b, k)?;
    let v4 = swap_seq_heads(b, v)?;
    let scores = scaled_scores(b, &q5, &k4, scale)?;
    let (_, row_max, exps, row_sum) = softmax_parts(b, &scores, visible)?;
    let map: Vec<i64> = (0..4).collect();
    let sum_b = b.broadcast_in_dim(&row_sum, &map, exps.dims())?;
    let probs5 = b.div(&exps, &sum_b)?;
    let out5 = b.dot_general(&probs5, &v4, (&[0, 1], &[0, 1]), (&[4], &[2]))?;
    let out = ungroup_queries(b, &out5, d)?;
    Ok(Forward {
        probs5,
        out,
        row_max,
        row_sum,
    })
}

/// `(dq, dk, dv)` from grouped probabilities.
#[allow(clippy::too_many_arguments)]
fn backward(
    b: &mut Builder,
    dout: &Value,
    q: &Value,
    k: &Value,
    v: &Value,
    probs5: &Value,
    d: Dims,
    scale: f64,
) -> Result<Vec<Value>> {
    let q5 = group_queries(b, q, d)?;
    let do5 = group_queries(b, dout, d)?;
    let k4 = swap_seq_heads(b, k)?;
    let v4 = swap_seq_heads(b, v)?;
    let dv4 = b.dot_general(probs5, &do5, (&[0, 1], &[0, 1]), (&[2, 3], &[2, 3]))?;
    let dp = b.dot_general(&do5, &v4, (&[0, 1], &[0, 1]), (&[4], &[3]))?;
    let pdp = b.mul(probs5, &dp)?;
    let row = b.reduce(&pdp, Scalar::F(0.0), Reducer::Add, &[4])?;
    let map: Vec<i64> = (0..4).collect();
    let row = b.broadcast_in_dim(&row, &map, dp.dims())?;
    let centered = b.sub(&dp, &row)?;
    let ds = b.mul(probs5, &centered)?;
    let c = b.splat(Scalar::F(scale), F32, ds.dims())?;
    let ds = b.mul(&ds, &c)?;
    let dq5 = b.dot_general(&ds, &k4, (&[0, 1], &[0, 1]), (&[4], &[2]))?;
    let dk4 = b.dot_general(&ds, &q5, (&[0, 1], &[0, 1]), (&[2, 3], &[2, 3]))?;
    let dq = ungroup_queries(b, &dq5, d)?;
    let dk = swap_seq_heads(b, &dk4)?;
    let dv = swap_seq_heads(b, &dv4)?;
    Ok(vec![dq, dk, dv])
}

/// Materialized attention: `(out [B, T, H, Dh], probs [B, H, T, S])`.
pub fn attention(
    q: &Input,
    k: &Input,
    v: &Input,
    scale: f64,
    causal: bool,
    window: i64,
) -> Result<Program> {
    let d = check("attention", q, k, v)?;
    let (mut b, x) = start(&[q, k, v])?;
    let visible = mask(&mut b, d, causal, window)?;
    let f = forward(&mut b, &x[0], &x[1], &x[2], d, visible.as_ref(), scale)?;
    let probs = regroup(&mut b, &f.probs5, d, false)?;
    Ok(b.finish(&[f.out, probs]))
}

/// `(dq, dk, dv)` of [`attention`] from its saved probabilities.
pub fn attention_backward(
    dout: &Input,
    q: &Input,
    k: &Input,
    v: &Input,
    probs: &Input,
    scale: f64,
) -> Result<Program> {
    let d = check("attention_backward", q, k, v)?;
    if dout.shape != q.shape || probs.shape != [d.batch, d.heads, d.queries, d.keys] {
        return invalid!(
            "attention_backward: dout {:?} and probs {:?} for q {:?}",
            dout.shape,
            probs.shape,
            q.shape
        );
    }
    let (mut b, x) = start(&[dout, q, k, v, probs])?;
    let probs5 = regroup(&mut b, &x[4], d, true)?;
    let grads = backward(&mut b, &x[0], &x[1], &x[2], &x[3], &probs5, d, scale)?;
    Ok(b.finish(&grads))
}

/// Flash attention's results: `(out, row_max [B, H, T], row_sum [B, H, T])`.
pub fn flash_attention(
    q: &Input,
    k: &Input,
    v: &Input,
    scale: f64,
    causal: bool,
    window: i64,
) -> Result<Program> {
    let d = check("flash_attention", q, k, v)?;
    let (mut b, x) = start(&[q, k, v])?;
    let visible = mask(&mut b, d, causal, window)?;
    let f = forward(&mut b, &x[0], &x[1], &x[2], d, visible.as_ref(), scale)?;
    let stats = [d.batch, d.heads, d.queries];
    let row_max = b.reshape(&f.row_max, &stats)?;
    let row_sum = b.reshape(&f.row_sum, &stats)?;
    Ok(b.finish(&[f.out, row_max, row_sum]))
}

/// `(dq, dk, dv)` of [`flash_attention`], recomputing the probabilities from the statistics.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_backward(
    dout: &Input,
    q: &Input,
    k: &Input,
    v: &Input,
    row_max: &Input,
    row_sum: &Input,
    scale: f64,
    causal: bool,
    window: i64,
) -> Result<Program> {
    let d = check("flash_attention_backward", q, k, v)?;
    let stats = [d.batch, d.heads, d.queries];
    if dout.shape != q.shape || row_max.shape != stats || row_sum.shape != stats {
        return invalid!(
            "flash_attention_backward: dout {:?}, statistics {:?} and {:?} for q {:?}",
            dout.shape,
            row_max.shape,
            row_sum.shape,
            q.shape
        );
    }
    let (mut b, x) = start(&[dout, q, k, v, row_max, row_sum])?;
    let visible = mask(&mut b, d, causal, window)?;
    let q5 = group_queries(&mut b, &x[1], d)?;
    let k4 = swap_seq_heads(&mut b, &x[2])?;
    let scores = scaled_scores(&mut b, &q5, &k4, scale)?;
    let dims = scores.dims().to_vec();
    let map: Vec<i64> = (0..4).collect();
    let m = regroup(&mut b, &x[4], d, true)?;
    let m = b.broadcast_in_dim(&m, &map, &dims)?;
    let l = regroup(&mut b, &x[5], d, true)?;
    let l = b.broadcast_in_dim(&l, &map, &dims)?;
    let shifted = b.sub(&scores, &m)?;
    let e = b.unary("stablehlo.exponential", &shifted)?;
    let mut probs5 = b.div(&e, &l)?;
    if let Some(visible) = visible {
        let visible = b.broadcast_to(&visible, &dims)?;
        let zeros = b.splat(Scalar::F(0.0), F32, &dims)?;
        probs5 = b.select(&visible, &probs5, &zeros)?;
    }
    let grads = backward(&mut b, &x[0], &x[1], &x[2], &x[3], &probs5, d, scale)?;
    Ok(b.finish(&grads))
}

#[cfg(test)]
mod tests {
    use super::super::testing::f32s;
    use super::*;

    #[test]
    fn grouped_query_attention_shapes() {
        let q = f32s(&[2, 5, 4, 8]);
        let kv = f32s(&[2, 9, 2, 8]);
        let p = attention(&q, &kv, &kv, 0.35, true, 0).unwrap();
        assert_eq!(p.results[0].dims, [2, 5, 4, 8]);
        assert_eq!(p.results[1].dims, [2, 4, 5, 9]);
        let p = flash_attention(&q, &kv, &kv, 0.35, true, 3).unwrap();
        assert_eq!(p.results[1].dims, [2, 4, 5]);
        assert!(attention(
            &q,
            &f32s(&[2, 9, 3, 8]),
            &f32s(&[2, 9, 3, 8]),
            1.0,
            false,
            0
        )
        .is_err());
    }
}
