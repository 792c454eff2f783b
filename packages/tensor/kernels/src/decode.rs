//! One incremental step of a decoder-only Transformer in a single call.
//!
//! Decoding a token through separate ops costs a Python call, an allocation and
//! a thread-pool handoff per op: about 150 of each per token, more than the
//! arithmetic of a small model. [`step`] runs the whole forward of a batch of
//! new tokens (embedding, every block, the final norm and the head) over the
//! same kernels the ops use (norms, rotary embedding, attention over a
//! contiguous or paged key/value cache, the block-layout and NF4 dot
//! products), writing each token's keys and values into the cache in place.
//!
//! Products against one input row are dot products of weight rows, several
//! output rows per piece handed to the [`team`](crate::team) (whose helpers stay
//! hot between the products of a step); the products that share an input
//! (query, key and value; gate and up) are one job. A float32 row is summed as
//! `lanes::dot8` sums (lane `j` takes elements `j, j + 8, …` in
//! one fused multiply-add chain, the lanes then added in order, the tail last),
//! the block-layout and NF4 rows as their own linears sum them. Every output
//! element is computed by one thread in a fixed order, so the logits do not
//! depend on the thread count, and a row's logits do not depend on the other
//! rows of the batch.

use crate::attention::{Heads, Segment};
use crate::blockq::{piece_rows, quantize_rows, BlockFormat, BlockWeight, QuantizedRows, ROWS};
use crate::f32_rows::dot_tile_f32;
use crate::nf4::Nf4Weight;
use crate::nf4_vector::row_dot as nf4_row_dot;
use crate::norm::{norm_forward, Norm};
use crate::paged::{paged_attention_in, PagedLayout, PagedSegment};
use crate::pool::{parallel, Shared};
use crate::rotary::rotary;
use crate::{ensure, math, multiversion, Result};

/// The weight `[rows, cols]` of a linear layer.
#[derive(Debug, Clone, Copy)]
pub enum Weight<'a> {
    F32(&'a [f32]),
    Block(BlockWeight<'a>),
    Nf4(Nf4Weight<'a>),
}

/// `y = x @ W^T (+ bias)`.
#[derive(Debug, Clone, Copy)]
pub struct Linear<'a> {
    pub weight: Weight<'a>,
    pub rows: usize,
    pub cols: usize,
    pub bias: Option<&'a [f32]>,
}

impl Linear<'_> {
    fn check(&self, name: &str, rows: usize, cols: usize) -> Result<()> {
        ensure!(
            self.rows == rows && self.cols == cols,
            "decode: {name} is [{}, {}], expected [{rows}, {cols}]",
            self.rows,
            self.cols
        );
        match self.weight {
            Weight::F32(w) => ensure!(
                w.len() == rows * cols,
                "decode: {name} holds {} floats, expected {rows} x {cols}",
                w.len()
            ),
            Weight::Block(b) => {
                b.check()?;
                ensure!(
                    b.rows == rows && b.cols == cols,
                    "decode: {name}'s blocks are [{}, {}], expected [{rows}, {cols}]",
                    b.rows,
                    b.cols
                );
            }
            Weight::Nf4(w) => {
                w.check()?;
                ensure!(
                    w.rows == rows && w.cols == cols,
                    "decode: {name}'s NF4 weight is [{}, {}], expected [{rows}, {cols}]",
                    w.rows,
                    w.cols
                );
            }
        }
        if let Some(b) = self.bias {
            ensure!(
                b.len() == rows,
                "decode: {name}'s bias has {} elements, expected {rows}",
                b.len()
            );
        }
        Ok(())
    }

    /// Weight elements, a measure of a product's work.
    fn size(&self) -> usize {
        self.rows * self.cols
    }
}

/// A norm's scale and shift (layer norm) or scale (RMS norm).
#[derive(Debug, Clone, Copy)]
pub struct NormWeights<'a> {
    pub weight: Option<&'a [f32]>,
    pub bias: Option<&'a [f32]>,
}

impl NormWeights<'_> {
    fn check(&self, name: &str, d: usize) -> Result<()> {
        for (part, v) in [("weight", self.weight), ("bias", self.bias)] {
            if let Some(v) = v {
                ensure!(
                    v.len() == d,
                    "decode: {name}.{part} has {} elements, expected {d}",
                    v.len()
                );
            }
        }
        Ok(())
    }
}

/// The position-wise feed-forward layer.
#[derive(Debug, Clone, Copy)]
pub enum FeedForward<'a> {
    /// `project(gelu(expand(x)))`, GELU exact or in its tanh form.
    Gelu {
        expand: Linear<'a>,
        project: Linear<'a>,
        tanh: bool,
    },
    /// `down(silu(gate(x)) * up(x))`.
    SwiGlu {
        gate: Linear<'a>,
        up: Linear<'a>,
        down: Linear<'a>,
    },
}

/// A pre-norm block: `x + output(attention(attention_norm(x)))`, then
/// `+ feed_forward(feed_forward_norm(.))`.
#[derive(Debug, Clone, Copy)]
pub struct Layer<'a> {
    pub attention_norm: NormWeights<'a>,
    pub query: Linear<'a>,
    pub key: Linear<'a>,
    pub value: Linear<'a>,
    pub output: Linear<'a>,
    pub feed_forward_norm: NormWeights<'a>,
    pub feed_forward: FeedForward<'a>,
}

/// The model: sizes, topology and borrowed weights.
#[derive(Debug, Clone)]
pub struct Model<'a> {
    pub d_model: usize,
    pub vocab: usize,
    /// Head layout, scale and window (`causal` must be set).
    pub heads: Heads,
    pub norm: Norm,
    pub eps: f32,
    /// Rotary positions with this base; `None`: learned positions.
    pub rope_theta: Option<f64>,
    /// `[vocab, d_model]`.
    pub token_embedding: &'a [f32],
    /// `[context, d_model]` for learned positions.
    pub position_embedding: Option<&'a [f32]>,
    pub layers: Vec<Layer<'a>>,
    pub final_norm: NormWeights<'a>,
    /// `[vocab, d_model]`.
    pub head: Linear<'a>,
}

impl Model<'_> {
    /// Check every weight against the sizes.
    pub fn check(&self) -> Result<()> {
        let (d, h) = (self.d_model, &self.heads);
        h.check()?;
        ensure!(h.causal, "decode: attention must be causal");
        ensure!(
            d > 0 && self.vocab > 0,
            "decode: d_model {d} and vocab {} must be positive",
            self.vocab
        );
        ensure!(
            self.token_embedding.len() == self.vocab * d,
            "decode: the token embedding holds {} floats, expected {} x {d}",
            self.token_embedding.len(),
            self.vocab
        );
        if let Some(p) = self.position_embedding {
            ensure!(
                !p.is_empty() && p.len() % d == 0,
                "decode: the position embedding holds {} floats, not rows of {d}",
                p.len()
            );
        }
        if let Some(theta) = self.rope_theta {
            ensure!(
                theta.is_finite() && theta > 0.0 && h.head_dim % 2 == 0,
                "decode: rotary positions need a positive base and an even head_dim, found \
                 {theta} and {}",
                h.head_dim
            );
        }
        let (q, kv) = (h.q_stride(), h.kv_stride());
        for (i, l) in self.layers.iter().enumerate() {
            let at = |part: &str| format!("layer {i} {part}");
            l.attention_norm.check(&at("attention_norm"), d)?;
            l.feed_forward_norm.check(&at("feed_forward_norm"), d)?;
            l.query.check(&at("query"), q, d)?;
            l.key.check(&at("key"), kv, d)?;
            l.value.check(&at("value"), kv, d)?;
            l.output.check(&at("output"), d, q)?;
            match &l.feed_forward {
                FeedForward::Gelu {
                    expand, project, ..
                } => {
                    expand.check(&at("expand"), expand.rows, d)?;
                    project.check(&at("project"), d, expand.rows)?;
                }
                FeedForward::SwiGlu { gate, up, down } => {
                    gate.check(&at("gate"), gate.rows, d)?;
                    up.check(&at("up"), gate.rows, d)?;
                    down.check(&at("down"), d, gate.rows)?;
                }
            }
        }
        self.final_norm.check("final_norm", d)?;
        self.head.check("head", self.vocab, d)
    }
}

/// Where attention reads a layer's cached keys and values.
#[derive(Debug, Clone, Copy)]
pub enum Attend<'a> {
    /// Sequence `j`'s keys are rows `kv_row..kv_row + kv_len` of the layer's cache.
    Contiguous(&'a [Segment]),
    /// The cache is pools of pages `[pages, page_size, kv_heads, head_dim]`.
    Paged {
        layout: PagedLayout,
        segments: &'a [PagedSegment],
        table: &'a [i64],
    },
}

/// One layer's cache, rows of `kv_heads * head_dim`.
pub struct CacheLayer<'a> {
    pub keys: &'a mut [f32],
    pub values: &'a mut [f32],
}

/// The new tokens of a step, packed sequence after sequence.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub tokens: &'a [i64],
    pub positions: &'a [i64],
    /// The cache row (flat over the pools when paged) of each token's keys and values.
    pub cache_rows: &'a [i64],
    pub attend: Attend<'a>,
    /// The packed rows whose logits are returned, in this order.
    pub logit_rows: &'a [usize],
}

/// Run `batch` through `model`: write every token's keys and values at its cache
/// row, and `logits [logit_rows.len(), vocab]` of the rows asked for.
pub fn step(
    model: &Model,
    batch: &Batch,
    cache: &mut [CacheLayer],
    logits: &mut [f32],
) -> Result<()> {
    let n = batch.tokens.len();
    let (d, h) = (model.d_model, &model.heads);
    let (qw, kvw) = (h.q_stride(), h.kv_stride());
    ensure!(n > 0, "decode: a step of no tokens");
    ensure!(
        batch.positions.len() == n && batch.cache_rows.len() == n,
        "decode: {n} tokens with {} positions and {} cache rows",
        batch.positions.len(),
        batch.cache_rows.len()
    );
    ensure!(
        cache.len() == model.layers.len(),
        "decode: {} cache layers for {} layers",
        cache.len(),
        model.layers.len()
    );
    ensure!(
        logits.len() == batch.logit_rows.len() * model.vocab,
        "decode: a logits buffer of {} for {} rows of {}",
        logits.len(),
        batch.logit_rows.len(),
        model.vocab
    );
    if let Some(&r) = batch.logit_rows.iter().find(|&&r| r >= n) {
        return Err(crate::KernelError(format!(
            "decode: logits of row {r} of a step of {n} tokens"
        )));
    }
    let contexts = model.position_embedding.map_or(usize::MAX, |p| p.len() / d);
    for (i, (&t, &p)) in batch.tokens.iter().zip(batch.positions).enumerate() {
        ensure!(
            (0..model.vocab as i64).contains(&t),
            "decode: token {t} (row {i}) is outside the vocabulary of {}",
            model.vocab
        );
        ensure!(
            p >= 0 && (p as usize) < contexts,
            "decode: position {p} (row {i}) is outside the model's {contexts} positions"
        );
    }
    for (l, c) in cache.iter().enumerate() {
        ensure!(
            c.keys.len() == c.values.len() && c.keys.len() % kvw == 0,
            "decode: layer {l}'s cache holds {} keys and {} values, not rows of {kvw}",
            c.keys.len(),
            c.values.len()
        );
        let rows = c.keys.len() / kvw;
        if let Some(&r) = batch
            .cache_rows
            .iter()
            .find(|&&r| r < 0 || r as usize >= rows)
        {
            return Err(crate::KernelError(format!(
                "decode: cache row {r} is outside layer {l}'s {rows} rows"
            )));
        }
    }

    let mut x = vec![0.0f32; n * d];
    for (i, (&t, &p)) in batch.tokens.iter().zip(batch.positions).enumerate() {
        let row = &mut x[i * d..(i + 1) * d];
        let t = t as usize;
        row.copy_from_slice(&model.token_embedding[t * d..(t + 1) * d]);
        if let Some(table) = model.position_embedding {
            let p = p as usize;
            for (v, &e) in row.iter_mut().zip(&table[p * d..(p + 1) * d]) {
                *v += e;
            }
        }
    }
    let attend = Pages::of(&batch.attend);
    let mut s = Scratch::new(n, d);
    for (layer, c) in model.layers.iter().zip(cache.iter_mut()) {
        s.norm(model, &layer.attention_norm, &x)?;
        let (mut q, mut k, mut v) = (vec![0.0; n * qw], vec![0.0; n * kvw], vec![0.0; n * kvw]);
        linears(
            &[&layer.query, &layer.key, &layer.value],
            &s.h,
            n,
            &mut [&mut q, &mut k, &mut v],
        );
        if let Some(theta) = model.rope_theta {
            let mut t = vec![0.0; n * qw];
            rotary(&q, h.head_dim, batch.positions, theta, false, &mut t)?;
            q = t;
            let mut t = vec![0.0; n * kvw];
            rotary(&k, h.head_dim, batch.positions, theta, false, &mut t)?;
            k = t;
        }
        for (i, &r) in batch.cache_rows.iter().enumerate() {
            let r = r as usize;
            c.keys[r * kvw..(r + 1) * kvw].copy_from_slice(&k[i * kvw..(i + 1) * kvw]);
            c.values[r * kvw..(r + 1) * kvw].copy_from_slice(&v[i * kvw..(i + 1) * kvw]);
        }
        let mut a = vec![0.0; n * qw];
        let (layout, segments, table) = attend.parts(c.keys.len() / kvw);
        paged_attention_in(
            h, &layout, segments, table, &q, c.keys, c.values, &mut a, true,
        )?;
        let mut o = vec![0.0; n * d];
        linears(&[&layer.output], &a, n, &mut [&mut o]);
        add_in_place(&mut x, &o);
        s.norm(model, &layer.feed_forward_norm, &x)?;
        match &layer.feed_forward {
            FeedForward::Gelu {
                expand,
                project,
                tanh,
            } => {
                let mut u = vec![0.0; n * expand.rows];
                linears(&[expand], &s.h, n, &mut [&mut u]);
                gelu_in_place(&mut u, *tanh);
                linears(&[project], &u, n, &mut [&mut o]);
            }
            FeedForward::SwiGlu { gate, up, down } => {
                let (mut g, mut u) = (vec![0.0; n * gate.rows], vec![0.0; n * up.rows]);
                linears(&[gate, up], &s.h, n, &mut [&mut g, &mut u]);
                swiglu_in_place(&mut g, &u);
                linears(&[down], &g, n, &mut [&mut o]);
            }
        }
        add_in_place(&mut x, &o);
    }
    let m = batch.logit_rows.len();
    let mut last = vec![0.0f32; m * d];
    for (j, &r) in batch.logit_rows.iter().enumerate() {
        last[j * d..(j + 1) * d].copy_from_slice(&x[r * d..(r + 1) * d]);
    }
    let mut s = Scratch::new(m, d);
    s.norm(model, &model.final_norm, &last)?;
    linears(&[&model.head], &s.h, m, &mut [logits]);
    Ok(())
}

/// The step's sequences as the paged kernel reads them. A contiguous cache is
/// read as pages of one row (a table entry per position), which the kernel
/// walks as runs of consecutive rows: its single-query path is the decode step's.
enum Pages<'a> {
    Paged(PagedLayout, &'a [PagedSegment], &'a [i64]),
    Rows(Vec<PagedSegment>, Vec<i64>, usize),
}

impl<'a> Pages<'a> {
    fn of(attend: &Attend<'a>) -> Self {
        match *attend {
            Attend::Paged {
                layout,
                segments,
                table,
            } => Pages::Paged(layout, segments, table),
            Attend::Contiguous(segments) => {
                let width = segments.iter().map(|s| s.kv_len).max().unwrap_or(0).max(1);
                let mut table = vec![0i64; segments.len() * width];
                for (j, s) in segments.iter().enumerate() {
                    for (p, t) in table[j * width..j * width + s.kv_len]
                        .iter_mut()
                        .enumerate()
                    {
                        *t = (s.kv_row + p) as i64;
                    }
                }
                let segs = segments
                    .iter()
                    .map(|s| PagedSegment {
                        q_row: s.q_row,
                        q_len: s.q_len,
                        kv_len: s.kv_len,
                    })
                    .collect();
                Pages::Rows(segs, table, width)
            }
        }
    }

    /// The layout, segments and table over a layer cache of `rows` rows.
    fn parts(&self, rows: usize) -> (PagedLayout, &[PagedSegment], &[i64]) {
        match self {
            Pages::Paged(layout, segments, table) => (*layout, segments, table),
            Pages::Rows(segments, table, width) => (
                PagedLayout {
                    pages: rows,
                    page_size: 1,
                    max_pages: *width,
                },
                segments,
                table,
            ),
        }
    }
}

/// A norm's output and statistics.
struct Scratch {
    h: Vec<f32>,
    mean: Vec<f32>,
    rstd: Vec<f32>,
}

impl Scratch {
    fn new(rows: usize, d: usize) -> Self {
        Scratch {
            h: vec![0.0; rows * d],
            mean: vec![0.0; rows],
            rstd: vec![0.0; rows],
        }
    }

    fn norm(&mut self, model: &Model, w: &NormWeights, x: &[f32]) -> Result<()> {
        let mean = match model.norm {
            Norm::Layer => Some(&mut self.mean[..]),
            Norm::Rms => None,
        };
        norm_forward(
            model.norm,
            x,
            model.d_model,
            w.weight,
            w.bias,
            model.eps,
            &mut self.h,
            mean,
            &mut self.rstd,
        )
    }
}

multiversion! {
    fn add_in_place(x: &mut [f32], y: &[f32]) {
        for (a, &b) in x.iter_mut().zip(y) {
            *a += b;
        }
    }
}

multiversion! {
    fn gelu_in_place(x: &mut [f32], tanh: bool) {
        if tanh {
            x.iter_mut().for_each(|v| *v = math::gelu_tanh(*v));
        } else {
            x.iter_mut().for_each(|v| *v = math::gelu(*v));
        }
    }
}

multiversion! {
    /// `g = silu(g) * u`, as the op `silu(g) * u` computes it.
    fn swiglu_in_place(g: &mut [f32], u: &[f32]) {
        for (a, &b) in g.iter_mut().zip(u) {
            let s = *a * math::sigmoid(*a);
            *a = s * b;
        }
    }
}

/// Below this many weight elements a job runs on the calling thread.
const PARALLEL_WEIGHTS: usize = 1 << 16;

/// `outs[j] [m, rows_j] = x [m, cols] @ W_j^T (+ bias_j)` for linears sharing their
/// input, as one job of pieces of `ROWS` output rows.
fn linears(lins: &[&Linear], x: &[f32], m: usize, outs: &mut [&mut [f32]]) {
    let k = lins[0].cols;
    let needs_codes = lins
        .iter()
        .any(|l| matches!(l.weight, Weight::Block(b) if b.format != BlockFormat::F16));
    let codes: Option<QuantizedRows> = needs_codes.then(|| quantize_rows(x, true));
    let mut pieces = Vec::new();
    for (j, l) in lins.iter().enumerate() {
        pieces.extend((0..l.rows.div_ceil(ROWS)).map(|p| (j, p * ROWS)));
    }
    let dst: Vec<Shared> = outs.iter_mut().map(|o| Shared::new(o)).collect();
    let piece = |p: usize| {
        let (j, first) = pieces[p];
        let l = lins[j];
        let last = (first + ROWS).min(l.rows);
        let width = last - first;
        // The piece's products before the bias: on the stack for up to 16 input rows.
        let mut stack = [0.0f32; ROWS * 16];
        let mut heap = Vec::new();
        let t: &mut [f32] = if m * width <= stack.len() {
            &mut stack[..m * width]
        } else {
            heap.resize(m * width, 0.0);
            &mut heap
        };
        match l.weight {
            Weight::F32(w) => dot_tile_f32(&w[first * k..last * k], width, x, m, t),
            Weight::Block(b) => {
                piece_rows(&b, codes.as_ref(), x, m, first..last, true, |i, r, v| {
                    t[i * width + r - first] = v
                })
            }
            Weight::Nf4(w) => {
                for i in 0..m {
                    for r in first..last {
                        t[i * width + r - first] = nf4_row_dot(&w, r * k, &x[i * k..(i + 1) * k]);
                    }
                }
            }
        }
        for i in 0..m {
            for (c, r) in (first..last).enumerate() {
                let v = t[i * width + c];
                let v = match l.bias {
                    Some(b) => v + b[r],
                    None => v,
                };
                // SAFETY: element (i, r) of output j belongs to this piece alone.
                unsafe { *dst[j].at(i * l.rows + r) = v };
            }
        }
    };
    let work: usize = lins.iter().map(|l| l.size()).sum();
    if parallel(work, PARALLEL_WEIGHTS) {
        crate::team::team().run(pieces.len(), &piece);
    } else {
        (0..pieces.len()).for_each(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::dot8;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 37 + seed * 11) % 29) as f32 - 14.0) * 0.031)
            .collect()
    }

    #[test]
    fn linears_add_the_bias_and_ignore_the_other_rows() {
        let (n, k, m) = (37, 40, 3);
        let w = values(n * k, 3);
        let bias = values(n, 4);
        let x = values(m * k, 5);
        let lin = Linear {
            weight: Weight::F32(&w),
            rows: n,
            cols: k,
            bias: Some(&bias),
        };
        let mut all = vec![0.0; m * n];
        linears(&[&lin], &x, m, &mut [&mut all]);
        for i in 0..m {
            let mut one = vec![0.0; n];
            linears(&[&lin], &x[i * k..(i + 1) * k], 1, &mut [&mut one]);
            assert_eq!(&all[i * n..(i + 1) * n], &one[..]);
            for r in 0..n {
                let want = dot8(&w[r * k..(r + 1) * k], &x[i * k..(i + 1) * k]) + bias[r];
                assert_eq!(one[r].to_bits(), want.to_bits());
            }
        }
    }
}
