//! Packed ragged sequences (incremental decoding): attention of each sequence
//! over its own contiguous or paged keys, and in-place row writes.
//!
//! Every sequence runs its own program, keyed by its query and key counts, with
//! its offsets passed as inputs: a sequence's rows never depend on the others,
//! and sequences of one shape share a compiled program.

use super::attention::{forward, Dims};
use super::index::first_bad;
use super::reduce::causal_visible;
use super::{expect_elem, start, Input};
use crate::error::Result;
use crate::hlo::{Builder, Program, Scalar, Value};
use crate::invalid;
use crate::types::ElementType::{F32, I64};

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
