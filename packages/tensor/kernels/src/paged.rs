//! Paged attention: causal attention of packed ragged sequences whose keys and
//! values live in fixed-size pages of a shared pool, found through a page
//! table per sequence (a paged key/value cache).
//!
//! Queries are `[N, heads, head_dim]` (every sequence's new rows, packed);
//! key and value pools are `[pages, page_size, kv_heads, head_dim]`; the page
//! table is `[sequences, max_pages]`. Sequence j's key at position p is row
//! `p % page_size` of page `table[j][p / page_size]`, and its `q_len` queries
//! are its last positions, so query i sits at `kv_len - q_len + i` and sees
//! keys `0..=kv_len - q_len + i` (minus those a sliding window hides). Grouped
//! query heads and masking are those of [`crate::attention`].
//!
//! Keys are visited in tiles that never cross a page boundary unless the next
//! page is the physically next one; each task owns whole output rows of one
//! head, so results are bit-identical for any thread count and do not depend
//! on the other sequences in the batch.

use crate::attention::{
    online_update, parallel, query_blocks, Heads, OnlineBlock, Segment, BK, BQ,
};
use crate::pool::{for_each_task, Shared};
use crate::{ensure, multiversion, Result};

/// Pool and page-table geometry.
#[derive(Debug, Clone, Copy)]
pub struct PagedLayout {
    /// Pages in each pool.
    pub pages: usize,
    /// Token positions per page.
    pub page_size: usize,
    /// Columns of the page table (entries per sequence).
    pub max_pages: usize,
}

/// One sequence: `q_len` query rows from `q_row`, over its first `kv_len` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedSegment {
    pub q_row: usize,
    pub q_len: usize,
    pub kv_len: usize,
}

#[allow(clippy::too_many_arguments)]
fn check(
    h: &Heads,
    layout: &PagedLayout,
    segs: &[PagedSegment],
    table: &[i64],
    q: usize,
    k: usize,
    v: usize,
    out: usize,
) -> Result<()> {
    h.check()?;
    ensure!(h.causal, "paged attention: only causal attention is paged");
    ensure!(layout.page_size > 0, "paged attention: page size 0");
    let (qs, ks) = (h.q_stride(), h.kv_stride());
    let pool = layout.pages * layout.page_size * ks;
    ensure!(
        q.is_multiple_of(qs) && out == q,
        "paged attention: {q} query and {out} output elements for {h:?}"
    );
    ensure!(
        k == pool && v == pool,
        "paged attention: pools of {k} and {v} elements, expected {pool} for {layout:?} and {h:?}"
    );
    ensure!(
        table.len() == segs.len() * layout.max_pages,
        "paged attention: page table of {} entries for {} sequences of {} pages",
        table.len(),
        segs.len(),
        layout.max_pages
    );
    let mut order: Vec<&PagedSegment> = segs.iter().collect();
    order.sort_by_key(|s| s.q_row);
    let mut next = 0;
    for s in order {
        ensure!(s.q_row == next, "paged attention: segments must cover the {} query rows once; row {next} is not where a segment starts ({s:?})", q / qs);
        ensure!(
            s.q_len <= s.kv_len,
            "paged attention: segment {s:?} has more queries than keys"
        );
        next += s.q_len;
    }
    ensure!(
        next * qs == q,
        "paged attention: segments cover {next} of {} query rows",
        q / qs
    );
    for (j, s) in segs.iter().enumerate() {
        let used = s.kv_len.div_ceil(layout.page_size);
        ensure!(
            used <= layout.max_pages,
            "paged attention: sequence {j} has {} positions, more than {} pages of {} hold",
            s.kv_len,
            layout.max_pages,
            layout.page_size
        );
        for (c, &p) in table[j * layout.max_pages..][..used].iter().enumerate() {
            ensure!(
                p >= 0 && (p as usize) < layout.pages,
                "paged attention: sequence {j} page {c} is {p}, outside the pool of {} pages",
                layout.pages
            );
        }
    }
    Ok(())
}

/// `out[row, head] = softmax(q k^T * scale) v` for every sequence; see the module docs.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention(
    h: &Heads,
    layout: &PagedLayout,
    segs: &[PagedSegment],
    table: &[i64],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
) -> Result<()> {
    paged_attention_in(h, layout, segs, table, q, k, v, out, false)
}

/// Multiply-adds from which attention goes to the [`team`](crate::team): its hot helpers
/// take a job for a microsecond or two, where waking the rayon pool costs a futex
/// round trip (`PARALLEL_WORK`), so a decode step's attention over a short cache (six
/// heads of 64 over a few dozen keys) is worth sharing.
const TEAM_WORK: usize = 1 << 13;

/// [`paged_attention`], its tasks handed to the [`team`](crate::team) (`on_team`, for a
/// caller whose other kernels run there, such as the whole decode step) or to the
/// rayon pool.
#[allow(clippy::too_many_arguments)]
pub(crate) fn paged_attention_in(
    h: &Heads,
    layout: &PagedLayout,
    segs: &[PagedSegment],
    table: &[i64],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    on_team: bool,
) -> Result<()> {
    check(h, layout, segs, table, q.len(), k.len(), v.len(), out.len())?;
    let (tasks, work) = query_blocks(h, segs.iter().map(|s| (s.q_len, s.kv_len)));
    let out = Shared::new(out);
    let body = |&(j, head, i0): &(usize, usize, usize)| {
        let pages = &table[j * layout.max_pages..(j + 1) * layout.max_pages];
        // SAFETY: segments cover each query row once (checked), so task (segment,
        // head, block) is the only writer of those rows' head slice; page entries
        // in use were checked to lie inside the pools.
        unsafe { block(h, layout.page_size, &segs[j], pages, head, i0, q, k, v, out) };
    };
    if on_team && tasks.len() > 1 && crate::pool::parallel(work, TEAM_WORK) {
        crate::team::team().run(tasks.len(), &|i| body(&tasks[i]));
    } else {
        for_each_task(&tasks, parallel(work), body);
    }
    Ok(())
}

/// Key positions `[s0, s1)` from `s0` that are physically consecutive rows:
/// the rest of `s0`'s page, extended over pages that follow it in the pool.
fn tile(pages: &[i64], page_size: usize, s0: usize, last: usize) -> (usize, usize) {
    let page = s0 / page_size;
    let start_row = pages[page] as usize * page_size + s0 % page_size;
    let limit = last.min(s0 + BK);
    let mut s1 = ((page + 1) * page_size).min(limit);
    let mut next = page + 1;
    while s1 < limit && pages[next] == pages[page] + (next - page) as i64 {
        next += 1;
        s1 = (next * page_size).min(limit);
    }
    (start_row, s1)
}

#[allow(clippy::too_many_arguments)]
unsafe fn block(
    h: &Heads,
    page_size: usize,
    seg: &PagedSegment,
    pages: &[i64],
    head: usize,
    i0: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: Shared,
) {
    let (dh, qs, ks) = (h.head_dim, h.q_stride(), h.kv_stride());
    let dense = Segment {
        q_row: seg.q_row,
        q_len: seg.q_len,
        kv_row: 0,
        kv_len: seg.kv_len,
    };
    let i1 = (i0 + BQ).min(seg.q_len);
    let bq = i1 - i0;
    let g = head / h.group();
    let qp = q.as_ptr().add((seg.q_row + i0) * qs + head * dh);
    let mut block = OnlineBlock::new(bq, dh);
    let (first, last) = (h.keys(&dense, i0).0, h.keys(&dense, i1 - 1).1);
    let mut s0 = first;
    while s0 < last {
        let (row, s1) = tile(pages, page_size, s0, last);
        let bk = s1 - s0;
        let kp = k.as_ptr().add(row * ks + g * dh);
        let vp = v.as_ptr().add(row * ks + g * dh);
        if bq == 1 {
            let qrow = std::slice::from_raw_parts(qp, dh);
            let (s, acc) = (&mut block.scores[..bk], &mut block.acc);
            single_query_tile(h, qrow, kp, vp, s, acc, &mut block.m[0], &mut block.l[0]);
        } else {
            block.add_tile(h, &dense, i0, (s0, s1), qp, kp, vp);
        }
        s0 = s1;
    }
    for r in 0..bq {
        block.write_row(r, out.at((seg.q_row + i0 + r) * qs + head * dh));
    }
}

/// One query row against `s.len()` consecutive key rows (decoding): scores by dot
/// products, then `acc += p * v` row by row. A single query sees every key of
/// its tile (its position is the last one).
#[allow(clippy::too_many_arguments)]
unsafe fn single_query_tile(
    h: &Heads,
    q: &[f32],
    kp: *const f32,
    vp: *const f32,
    s: &mut [f32],
    acc: &mut [f32],
    m: &mut f32,
    l: &mut f32,
) {
    let (dh, ks) = (h.head_dim, h.kv_stride());
    // Rows r * ks .. r * ks + dh of the tile, for r < s.len().
    let span = (s.len() - 1) * ks + dh;
    let keys = std::slice::from_raw_parts(kp, span);
    let values = std::slice::from_raw_parts(vp, span);
    tile_scores(q, keys, ks, h.scale, s);
    online_update(s, acc, m, l);
    tile_accumulate(s, values, ks, acc);
}

/// `s[r] = scale * q . keys[r * stride..][..q.len()]`, each dot product in
/// [`dot8`]'s order (several keys at a time).
fn tile_scores(q: &[f32], keys: &[f32], stride: usize, scale: f32, s: &mut [f32]) {
    crate::f32_rows::dot_rows_strided(keys, stride, q, s);
    for v in s.iter_mut() {
        *v *= scale;
    }
}

/// `acc += sum_r p[r] * values[r * stride..][..acc.len()]`: each element one fused
/// multiply-add per row, in row order (the same bits on every path). On AVX-512 the
/// accumulators stay in registers across the rows, up to 128 elements at a time.
fn tile_accumulate(p: &[f32], values: &[f32], stride: usize, acc: &mut [f32]) {
    let dh = acc.len();
    assert!(p.is_empty() || (p.len() - 1) * stride + dh <= values.len());
    #[cfg(target_arch = "x86_64")]
    if crate::isa::current() >= crate::isa::Isa::Avx512 {
        // SAFETY: the CPU has AVX-512 F; the rows lie inside `values` (checked above).
        return unsafe { accumulate_avx512::all(p, values, stride, acc) };
    }
    accumulate_rows(p, values, stride, acc);
}

multiversion! {
    /// [`tile_accumulate`] row by row through memory.
    fn accumulate_rows(p: &[f32], values: &[f32], stride: usize, acc: &mut [f32]) {
        let dh = acc.len();
        for (r, &w) in p.iter().enumerate() {
            for (a, &x) in acc.iter_mut().zip(&values[r * stride..r * stride + dh]) {
                *a = x.mul_add(w, *a);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod accumulate_avx512 {
    use std::arch::x86_64::*;

    /// Elements `e0 .. e0 + 16 N` of `acc` in `N` registers over every row.
    #[inline(always)]
    unsafe fn run<const N: usize>(p: &[f32], values: *const f32, stride: usize, acc: *mut f32) {
        let mut a: [__m512; N] = std::array::from_fn(|j| _mm512_loadu_ps(acc.add(16 * j)));
        for (r, &w) in p.iter().enumerate() {
            let wv = _mm512_set1_ps(w);
            let row = values.add(r * stride);
            for (j, a) in a.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(16 * j)), wv, *a);
            }
        }
        for (j, a) in a.iter().enumerate() {
            _mm512_storeu_ps(acc.add(16 * j), *a);
        }
    }

    /// [`super::tile_accumulate`] in runs of 8, 4, 2 or 1 registers, the last
    /// `acc.len() % 16` elements as the row walk does them.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) unsafe fn all(p: &[f32], values: &[f32], stride: usize, acc: &mut [f32]) {
        let dh = acc.len();
        let (v, a) = (values.as_ptr(), acc.as_mut_ptr());
        let mut e0 = 0;
        while e0 + 16 <= dh {
            let n = (dh - e0) / 16;
            let take = if n >= 8 {
                8
            } else if n >= 4 {
                4
            } else if n >= 2 {
                2
            } else {
                1
            };
            match take {
                8 => run::<8>(p, v.add(e0), stride, a.add(e0)),
                4 => run::<4>(p, v.add(e0), stride, a.add(e0)),
                2 => run::<2>(p, v.add(e0), stride, a.add(e0)),
                _ => run::<1>(p, v.add(e0), stride, a.add(e0)),
            }
            e0 += 16 * take;
        }
        for (r, &w) in p.iter().enumerate() {
            for e in e0..dh {
                acc[e] = values[r * stride + e].mul_add(w, acc[e]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(heads: usize, kv_heads: usize, head_dim: usize, window: usize) -> Heads {
        Heads {
            heads,
            kv_heads,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            causal: true,
            window,
        }
    }

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// Plain softmax attention in f64 over keys gathered through the page table.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        h: &Heads,
        ps: usize,
        segs: &[PagedSegment],
        table: &[i64],
        mp: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> Vec<f32> {
        let (dh, qs, ks) = (h.head_dim, h.q_stride(), h.kv_stride());
        let mut out = vec![0.0f32; q.len()];
        for (j, seg) in segs.iter().enumerate() {
            let row = |p: usize| table[j * mp + p / ps] as usize * ps + p % ps;
            for i in 0..seg.q_len {
                let pos = seg.kv_len - seg.q_len + i;
                let lo = if h.window > 0 {
                    (pos + 1).saturating_sub(h.window)
                } else {
                    0
                };
                for head in 0..h.heads {
                    let g = head / (h.heads / h.kv_heads);
                    let qv = &q[(seg.q_row + i) * qs + head * dh..][..dh];
                    let scores: Vec<f64> = (lo..=pos)
                        .map(|p| {
                            let kv = &k[row(p) * ks + g * dh..][..dh];
                            qv.iter()
                                .zip(kv)
                                .map(|(a, b)| *a as f64 * *b as f64)
                                .sum::<f64>()
                                * h.scale as f64
                        })
                        .collect();
                    let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                    let total: f64 = w.iter().sum();
                    for d in 0..dh {
                        let acc: f64 = (lo..=pos)
                            .zip(&w)
                            .map(|(p, wt)| wt * v[row(p) * ks + g * dh + d] as f64)
                            .sum();
                        out[(seg.q_row + i) * qs + head * dh + d] = (acc / total) as f32;
                    }
                }
            }
        }
        out
    }

    fn run(
        h: Heads,
        ps: usize,
        pages: usize,
        segs: &[PagedSegment],
        table: &[i64],
        mp: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        let rows: usize = segs.iter().map(|s| s.q_len).sum();
        let q = values(rows * h.q_stride(), 1);
        let k = values(pages * ps * h.kv_stride(), 2);
        let v = values(pages * ps * h.kv_stride(), 3);
        let mut out = vec![f32::NAN; q.len()];
        let layout = PagedLayout {
            pages,
            page_size: ps,
            max_pages: mp,
        };
        paged_attention(&h, &layout, segs, table, &q, &k, &v, &mut out).unwrap();
        (out, naive(&h, ps, segs, table, mp, &q, &k, &v))
    }

    fn close(a: &[f32], b: &[f32]) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
                "element {i}: {x} vs {y}"
            );
        }
    }

    #[test]
    fn a_decode_steps_attention_on_the_team_has_the_bits_of_one_thread() {
        // Six heads of 64 over 40 keys: past TEAM_WORK, under PARALLEL_WORK, so the
        // whole decode step hands it to the team; each (head, block) task is one
        // thread's, so the bits are those of the calling thread alone.
        let h = heads(6, 6, 64, 0);
        let segs = [PagedSegment {
            q_row: 0,
            q_len: 1,
            kv_len: 40,
        }];
        assert!(40 * h.heads * h.head_dim >= TEAM_WORK);
        let (ps, pages) = (16, 3);
        let table = [2i64, 0, 1];
        let layout = PagedLayout {
            pages,
            page_size: ps,
            max_pages: 3,
        };
        let q = values(h.q_stride(), 4);
        let k = values(pages * ps * h.kv_stride(), 5);
        let v = values(pages * ps * h.kv_stride(), 6);
        let (mut alone, mut shared) = (vec![f32::NAN; q.len()], vec![f32::NAN; q.len()]);
        paged_attention_in(&h, &layout, &segs, &table, &q, &k, &v, &mut alone, false).unwrap();
        paged_attention_in(&h, &layout, &segs, &table, &q, &k, &v, &mut shared, true).unwrap();
        assert_eq!(
            alone.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            shared.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        close(&shared, &naive(&h, ps, &segs, &table, 3, &q, &k, &v));
    }

    #[test]
    fn decode_and_prefill_over_scattered_pages_match_naive() {
        // Sequence 0 decodes one token at position 37; sequence 1 prefills 20 tokens
        // from position 3; sequence 2 prefills 70 (several query blocks) over
        // consecutive pages (one tile spans pages).
        let segs = [
            PagedSegment {
                q_row: 0,
                q_len: 1,
                kv_len: 38,
            },
            PagedSegment {
                q_row: 1,
                q_len: 20,
                kv_len: 23,
            },
            PagedSegment {
                q_row: 21,
                q_len: 70,
                kv_len: 70,
            },
        ];
        let mp = 9;
        let mut table = vec![-1i64; 3 * mp];
        table[..5].copy_from_slice(&[7, 2, 11, 0, 5]);
        table[mp..mp + 3].copy_from_slice(&[3, 9, 1]);
        table[2 * mp..2 * mp + 9].copy_from_slice(&[12, 13, 14, 15, 16, 17, 18, 19, 20]);
        for h in [heads(4, 4, 16, 0), heads(6, 2, 8, 0), heads(4, 2, 16, 9)] {
            let (got, want) = run(h, 8, 24, &segs, &table, mp);
            close(&got, &want);
        }
    }

    #[test]
    fn result_does_not_depend_on_batch_or_threads() {
        let h = heads(4, 2, 16, 0);
        let mp = 4;
        let table: Vec<i64> = vec![3, 1, 0, -1, 2, 5, -1, -1];
        let segs = [
            PagedSegment {
                q_row: 0,
                q_len: 1,
                kv_len: 30,
            },
            PagedSegment {
                q_row: 1,
                q_len: 1,
                kv_len: 16,
            },
        ];
        let q = values(2 * h.q_stride(), 4);
        let k = values(6 * 10 * h.kv_stride(), 5);
        let v = values(6 * 10 * h.kv_stride(), 6);
        let layout = PagedLayout {
            pages: 6,
            page_size: 10,
            max_pages: mp,
        };
        let mut both = vec![0.0; q.len()];
        paged_attention(&h, &layout, &segs, &table, &q, &k, &v, &mut both).unwrap();
        let mut alone = vec![0.0; h.q_stride()];
        paged_attention(
            &h,
            &layout,
            &segs[..1],
            &table[..mp],
            &q[..h.q_stride()],
            &k,
            &v,
            &mut alone,
        )
        .unwrap();
        assert_eq!(&both[..h.q_stride()], &alone[..]);
    }

    #[test]
    fn every_path_accumulates_values_with_the_same_bits() {
        for (rows, dh, stride) in [
            (1, 64, 64),
            (37, 64, 192),
            (9, 128, 128),
            (5, 80, 96),
            (3, 13, 20),
            (0, 64, 64),
        ] {
            let p = values(rows, 3);
            let v = values(rows.max(1) * stride, 4);
            let start = values(dh, 5);
            let mut want = start.clone();
            accumulate_rows(&p, &v, stride, &mut want);
            for (e, w) in want.iter().enumerate() {
                let mut a = start[e];
                for r in 0..rows {
                    a = v[r * stride + e].mul_add(p[r], a);
                }
                assert_eq!(a.to_bits(), w.to_bits(), "row walk {rows} {dh} {stride}");
            }
            let mut got = start.clone();
            tile_accumulate(&p, &v, stride, &mut got);
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{rows} {dh} {stride}");
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        let h = heads(2, 2, 4, 0);
        let layout = PagedLayout {
            pages: 2,
            page_size: 4,
            max_pages: 2,
        };
        let (q, kv) = (vec![0.0; 8], vec![0.0; 2 * 4 * 8]);
        let mut out = vec![0.0; 8];
        let seg = [PagedSegment {
            q_row: 0,
            q_len: 1,
            kv_len: 5,
        }];
        let err = paged_attention(&h, &layout, &seg, &[0, 2], &q, &kv, &kv, &mut out).unwrap_err();
        assert!(err.0.contains("outside the pool"), "{err}");
        let long = [PagedSegment {
            q_row: 0,
            q_len: 1,
            kv_len: 9,
        }];
        assert!(paged_attention(&h, &layout, &long, &[0, 1], &q, &kv, &kv, &mut out).is_err());
        let gap = [PagedSegment {
            q_row: 1,
            q_len: 1,
            kv_len: 3,
        }];
        assert!(paged_attention(&h, &layout, &gap, &[0, 1], &q[..8], &kv, &kv, &mut out).is_err());
        let more = [PagedSegment {
            q_row: 0,
            q_len: 2,
            kv_len: 1,
        }];
        assert!(paged_attention(
            &h,
            &layout,
            &more,
            &[0, 1],
            &[0.0; 16],
            &kv,
            &kv,
            &mut [0.0; 16]
        )
        .is_err());
    }
}
