//! Attention programs: materialized and flash forms with their VJPs, packed
//! ragged sequences, and a paged key/value cache.
//!
//! `q [B, T, H, Dh]`, `k`/`v` `[B, S, Hkv, Dh]`; query head h reads key/value
//! head `h / G` with `G = H / Hkv`. Internally queries are grouped as
//! `[B, Hkv, G, T, Dh]` so grouped-query attention never copies keys. Hidden
//! keys get probability exactly 0. The flash form computes the same values
//! in one XLA program and returns only the row statistics; the `[T, S]`
//! scores live inside that program, so memory is not guaranteed linear.

use super::index::first_bad;
use super::reduce::{causal_visible, softmax_parts};
use super::{expect_elem, start, Input};
use crate::error::Result;
use crate::hlo::{Builder, Program, Reducer, Scalar, Value};
use crate::invalid;
use crate::types::ElementType::{F32, I64};

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

struct Forward {
    probs5: Value,
    out: Value,
    row_max: Value,
    row_sum: Value,
}

/// Scores, masked softmax and the weighted values, grouped.
fn forward(
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

/// One sequence of a packed batch: query rows `q_start..+q_count`, key rows
/// `kv_start..+kv_length`; its queries are its last `q_count` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub index: usize,
    pub q_start: i64,
    pub q_count: i64,
    pub kv_start: i64,
    pub kv_length: i64,
}

/// Validate a packing of ragged sequences; the segments in query-row order.
pub fn segments(
    op: &str,
    queries: i64,
    keys: i64,
    q_starts: &[i64],
    q_counts: &[i64],
    kv_starts: &[i64],
    kv_lengths: &[i64],
) -> Result<Vec<Segment>> {
    let n = q_starts.len();
    if q_counts.len() != n || kv_starts.len() != n || kv_lengths.len() != n {
        return invalid!("{op}: segment lists of different lengths");
    }
    let mut order: Vec<Segment> = (0..n)
        .map(|j| Segment {
            index: j,
            q_start: q_starts[j],
            q_count: q_counts[j],
            kv_start: kv_starts[j],
            kv_length: kv_lengths[j],
        })
        .collect();
    order.sort_by_key(|s| s.q_start);
    let mut covered = 0;
    for s in &order {
        if s.q_start != covered || s.q_count < 0 {
            return invalid!("{op}: segments must cover the query rows once");
        }
        covered += s.q_count;
        if s.q_count > s.kv_length || s.kv_start < 0 || s.kv_start + s.kv_length > keys {
            return invalid!(
                "{op}: segment ({}, {}, {}, {}) is invalid",
                s.q_start,
                s.q_count,
                s.kv_start,
                s.kv_length
            );
        }
    }
    if covered != queries {
        return invalid!("{op}: segments must cover the query rows once");
    }
    Ok(order)
}

fn check_packed(op: &str, q: &Input, k: &Input, v: &Input) -> Result<()> {
    for (what, x) in [("q", q), ("k", k), ("v", v)] {
        expect_elem(op, what, x, &[F32])?;
        if x.rank() != 3 {
            return invalid!(
                "{op}: {what} must be [rows, heads, head_dim], found {:?}",
                x.shape
            );
        }
    }
    let (qs, ks) = (&q.shape, &k.shape);
    if k.shape != v.shape || qs[2] != ks[2] || ks[1] == 0 || qs[1] % ks[1] != 0 {
        return invalid!("{op}: q {qs:?} with k {ks:?} and v {:?}", v.shape);
    }
    Ok(())
}

/// Element `i` of a 1-D value as a scalar.
fn element(b: &mut Builder, x: &Value, i: i64) -> Result<Value> {
    let one = b.slice(x, &[i], &[i + 1], &[1])?;
    b.reshape(&one, &[])
}

/// Rows `start..start + count` of a `[rows, ...]` value, `start` a scalar value.
fn rows_from(b: &mut Builder, x: &Value, start: &Value, count: i64) -> Result<Value> {
    let zero = b.scalar(Scalar::I(0), I64)?;
    let mut starts = vec![start.clone()];
    starts.extend(vec![zero; x.rank() - 1]);
    let mut sizes = x.dims().to_vec();
    sizes[0] = count;
    b.dynamic_slice(x, &starts, &sizes)
}

/// Causal attention of `q [T, H, Dh]` over `k`, `v` `[S, Hkv, Dh]` (one sequence).
fn one_sequence(
    b: &mut Builder,
    q: &Value,
    k: &Value,
    v: &Value,
    scale: f64,
    window: i64,
) -> Result<Value> {
    let (t, h, dh) = (q.dims()[0], q.dims()[1], q.dims()[2]);
    let (s, hkv) = (k.dims()[0], k.dims()[1]);
    let d = Dims {
        batch: 1,
        queries: t,
        keys: s,
        heads: h,
        kv_heads: hkv,
        head_dim: dh,
    };
    let q4 = b.reshape(q, &[1, t, h, dh])?;
    let k4 = b.reshape(k, &[1, s, hkv, dh])?;
    let v4 = b.reshape(v, &[1, s, hkv, dh])?;
    let visible = causal_visible(b, t, s, window)?;
    let f = forward(b, &q4, &k4, &v4, d, Some(&visible), scale)?;
    b.reshape(&f.out, &[t, h, dh])
}

/// One sequence of a packed batch: `q [N, H, Dh]`, `k`/`v` `[M, Hkv, Dh]`,
/// `starts = [q_start, kv_start]` (int64, an input so that every sequence of
/// one shape shares a program). Result `[q_count, H, Dh]`, computed from that
/// sequence's rows alone.
#[allow(clippy::too_many_arguments)]
pub fn attention_segment(
    q: &Input,
    k: &Input,
    v: &Input,
    starts: &Input,
    q_count: i64,
    kv_length: i64,
    scale: f64,
    window: i64,
) -> Result<Program> {
    check_packed("attention_varlen", q, k, v)?;
    expect_elem("attention_varlen", "the starts", starts, &[I64])?;
    if starts.shape != [2] || q_count > q.shape[0] || kv_length > k.shape[0] || q_count > kv_length
    {
        return invalid!(
            "attention_varlen: {q_count} queries over {kv_length} keys of q {:?}, k {:?}",
            q.shape,
            k.shape
        );
    }
    let (mut b, x) = start(&[q, k, v, starts])?;
    let q_at = element(&mut b, &x[3], 0)?;
    let kv_at = element(&mut b, &x[3], 1)?;
    let qs = rows_from(&mut b, &x[0], &q_at, q_count)?;
    let ks = rows_from(&mut b, &x[1], &kv_at, kv_length)?;
    let vs = rows_from(&mut b, &x[2], &kv_at, kv_length)?;
    let out = one_sequence(&mut b, &qs, &ks, &vs, scale, window)?;
    Ok(b.finish(&[out]))
}

/// One sequence over a paged cache: `q [N, H, Dh]`, `k_pages`/`v_pages`
/// `[P, page_size, Hkv, Dh]`, `table [S, max_pages]`, `at = [q_start,
/// sequence]`. Its key at position p is row `p % page_size` of page
/// `table[sequence, p / page_size]`. Results `(out [q_count, H, Dh], check)`,
/// the check flagging a page number outside the pool.
#[allow(clippy::too_many_arguments)]
pub fn paged_segment(
    q: &Input,
    k_pages: &Input,
    v_pages: &Input,
    table: &Input,
    at: &Input,
    q_count: i64,
    kv_length: i64,
    scale: f64,
    window: i64,
) -> Result<Program> {
    expect_elem("paged_attention", "the page table", table, &[I64])?;
    expect_elem("paged_attention", "the position", at, &[I64])?;
    if k_pages.rank() != 4 || k_pages.shape != v_pages.shape || table.rank() != 2 || at.shape != [2]
    {
        return invalid!(
            "paged_attention: pages {:?}/{:?} and table {:?}",
            k_pages.shape,
            v_pages.shape,
            table.shape
        );
    }
    let [pages, page_size, kv_heads, head_dim] = [
        k_pages.shape[0],
        k_pages.shape[1],
        k_pages.shape[2],
        k_pages.shape[3],
    ];
    let max_pages = table.shape[1];
    let rows = Input::dense(&[kv_length, kv_heads, head_dim], F32);
    check_packed("paged_attention", q, &rows, &rows)?;
    if page_size == 0 || (kv_length + page_size - 1) / page_size > max_pages || q_count > kv_length
    {
        return invalid!("paged_attention: {kv_length} positions need more than {max_pages} pages of {page_size}");
    }
    let (mut b, x) = start(&[q, k_pages, v_pages, table, at])?;
    let q_at = element(&mut b, &x[4], 0)?;
    let seq = element(&mut b, &x[4], 1)?;
    let zero = b.scalar(Scalar::I(0), I64)?;
    let row = b.dynamic_slice(&x[3], &[seq, zero], &[1, max_pages])?;
    let row = b.reshape(&row, &[max_pages])?;
    let positions = b.iota(I64, &[kv_length], 0)?;
    let ps = b.splat(Scalar::I(page_size), I64, &[kv_length])?;
    let column = b.div(&positions, &ps)?;
    let page = b.take(&row, &column, 0)?;
    let low = b.splat(Scalar::I(0), I64, &[kv_length])?;
    let count = b.splat(Scalar::I(pages), I64, &[kv_length])?;
    let below = b.compare("LT", &page, &low)?;
    let above = b.compare("GE", &page, &count)?;
    let bad = b.binary("stablehlo.or", &below, &above)?;
    let check = first_bad(&mut b, &page, &bad)?;
    let base = b.mul(&page, &ps)?;
    let within = b.binary("stablehlo.remainder", &positions, &ps)?;
    let flat_row = b.add(&base, &within)?;
    let all_rows = [pages * page_size, kv_heads, head_dim];
    let kf = b.reshape(&x[1], &all_rows)?;
    let vf = b.reshape(&x[2], &all_rows)?;
    let ks = b.take(&kf, &flat_row, 0)?;
    let vs = b.take(&vf, &flat_row, 0)?;
    let qs = rows_from(&mut b, &x[0], &q_at, q_count)?;
    let out = one_sequence(&mut b, &qs, &ks, &vs, scale, window)?;
    Ok(b.finish(&[out, check]))
}

/// `dst` with rows `rows[i]` replaced by `src[i]`; `(new dst, check)`.
pub fn write_rows(dst: &Input, rows: &Input, src: &Input) -> Result<Program> {
    expect_elem("write_rows", "rows", rows, &[I64])?;
    let n = rows.count();
    if dst.rank() == 0 || rows.shape != [n] || src.elem() != dst.elem() {
        return invalid!(
            "write_rows: dst {:?} rows {:?} src {:?}",
            dst.shape,
            rows.shape,
            src.shape
        );
    }
    let mut want = dst.shape.clone();
    want[0] = n;
    if src.shape != want {
        return invalid!(
            "write_rows: src {:?} for {n} rows of {:?}",
            src.shape,
            dst.shape
        );
    }
    let (mut b, x) = start(&[dst, rows, src])?;
    let check = super::index::range_check(&mut b, &x[1], dst.shape[0])?;
    let written = b.replace_rows(&x[0], &x[1], &x[2])?;
    // Nothing is written when any row is out of range.
    let first = b.slice(&check, &[0], &[1], &[1])?;
    let first = b.reshape(&first, &[])?;
    let none = b.scalar(Scalar::I(0), I64)?;
    let ok = b.compare("LT", &first, &none)?;
    let ok = b.broadcast_to(&ok, &dst.shape)?;
    let out = b.select(&ok, &written, &x[0])?;
    Ok(b.finish(&[out, check]))
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

    #[test]
    fn segments_must_cover_the_queries_once() {
        let s = segments("t", 3, 10, &[1, 0], &[2, 1], &[4, 0], &[6, 4]).unwrap();
        assert_eq!(s[0].index, 1);
        assert_eq!((s[1].q_start, s[1].kv_start), (1, 4));
        assert!(segments("t", 3, 10, &[0, 2], &[1, 1], &[0, 4], &[4, 6]).is_err());
        assert!(segments("t", 2, 10, &[0], &[2], &[0], &[1]).is_err());
        assert!(segments("t", 2, 10, &[0], &[2], &[9], &[2]).is_err());
    }

    #[test]
    fn segment_programs_depend_on_shapes_not_offsets() {
        let q = f32s(&[8, 4, 16]);
        let kv = f32s(&[20, 2, 16]);
        let at = Input::dense(&[2], I64);
        let p = attention_segment(&q, &kv, &kv, &at, 3, 7, 0.25, 0).unwrap();
        assert_eq!(p.results[0].dims, [3, 4, 16]);
        assert!(p.text.contains("stablehlo.dynamic_slice"));
        let pages = f32s(&[6, 4, 2, 16]);
        let table = Input::dense(&[3, 2], I64);
        let p = paged_segment(&q, &pages, &pages, &table, &at, 2, 7, 0.25, 0).unwrap();
        assert_eq!(p.results.len(), 2);
        assert!(paged_segment(&q, &pages, &pages, &table, &at, 2, 9, 0.25, 0).is_err());
    }
}
