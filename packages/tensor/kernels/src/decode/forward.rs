//! The step's execution: the batch checked against the model and the caches,
//! the embedding, each block (attention over the layer's cache, then the
//! feed-forward layer, each added to the residual stream), the final norm and
//! the head.

use super::linears::{linears, linears_then};
use super::pages::Pages;
use super::{Batch, CacheLayer, FeedForward, Layer, Model, NormWeights};
use crate::norm::{norm_forward, Norm};
use crate::paged::paged_attention_in;
use crate::pool::{with_kept, Kept};
use crate::rotary::rotary;
use crate::{ensure, math, multiversion, Result};

/// Run `batch` through `model`: write every token's keys and values at its cache
/// row, and `logits [logit_rows.len(), vocab]` of the rows asked for.
pub fn step(
    model: &Model,
    batch: &Batch,
    cache: &mut [CacheLayer],
    logits: &mut [f32],
) -> Result<()> {
    check_step(model, batch, cache, logits)?;
    let n = batch.tokens.len();
    let attend = Pages::of(&batch.attend);
    with_kept(&SCRATCH, |s| {
        let mut x = std::mem::take(&mut s.x);
        embed(model, batch, &mut x);
        let run = (|| {
            for (layer, c) in model.layers.iter().zip(cache.iter_mut()) {
                attention_block(model, layer, batch, &attend, c, s, &mut x)?;
                feed_forward_block(model, layer, n, s, &mut x)?;
            }
            head(model, batch, &x, s, logits)
        })();
        s.x = x;
        run
    })
}

thread_local! {
    /// A step's buffers, kept for the next step on the same thread: a decode loop
    /// asks for the same sizes every step, so it allocates nothing after the first.
    static SCRATCH: Kept<Scratch> = const { Kept::new(None) };
}

/// Check the batch's tokens, positions and cache rows, the caches and the
/// logits buffer against the model.
fn check_step(model: &Model, batch: &Batch, cache: &[CacheLayer], logits: &[f32]) -> Result<()> {
    let n = batch.tokens.len();
    let (d, kvw) = (model.d_model, model.heads.kv_stride());
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
    Ok(())
}

/// The residual stream `[n, d_model]` of the batch's tokens: each token's
/// embedding, plus its position's for learned positions.
fn embed(model: &Model, batch: &Batch, x: &mut Vec<f32>) {
    let (n, d) = (batch.tokens.len(), model.d_model);
    let x = sized(x, n * d);
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
}

/// `x += output(attention(attention_norm(x)))`, the batch's keys and values
/// written into the layer's cache `c` first.
fn attention_block(
    model: &Model,
    layer: &Layer,
    batch: &Batch,
    attend: &Pages,
    c: &mut CacheLayer,
    s: &mut Scratch,
    x: &mut [f32],
) -> Result<()> {
    let (n, d, h) = (batch.tokens.len(), model.d_model, &model.heads);
    let (qw, kvw) = (h.q_stride(), h.kv_stride());
    s.norm(model, &layer.attention_norm, x, n)?;
    let b = &mut s.buffers;
    let (q, k, v) = (
        sized(&mut b.q, n * qw),
        sized(&mut b.k, n * kvw),
        sized(&mut b.v, n * kvw),
    );
    linears(
        &[&layer.query, &layer.key, &layer.value],
        &s.h,
        n,
        &mut [q, k, v],
    );
    if let Some(theta) = model.rope_theta {
        rotary(
            &b.q,
            h.head_dim,
            batch.positions,
            theta,
            false,
            sized(&mut b.t, n * qw),
        )?;
        std::mem::swap(&mut b.q, &mut b.t);
        rotary(
            &b.k,
            h.head_dim,
            batch.positions,
            theta,
            false,
            sized(&mut b.t, n * kvw),
        )?;
        std::mem::swap(&mut b.k, &mut b.t);
    }
    let (q, k, v) = (&b.q, &b.k, &b.v);
    for (i, &r) in batch.cache_rows.iter().enumerate() {
        let r = r as usize;
        c.keys[r * kvw..(r + 1) * kvw].copy_from_slice(&k[i * kvw..(i + 1) * kvw]);
        c.values[r * kvw..(r + 1) * kvw].copy_from_slice(&v[i * kvw..(i + 1) * kvw]);
    }
    let a = sized(&mut b.a, n * qw);
    let (layout, segments, table) = attend.parts(c.keys.len() / kvw);
    paged_attention_in(h, &layout, segments, table, q, c.keys, c.values, a, true)?;
    let o = sized(&mut b.o, n * d);
    linears(&[&layer.output], &b.a, n, &mut [o]);
    add_in_place(x, &b.o);
    Ok(())
}

/// `x += feed_forward(feed_forward_norm(x))` for the `n` rows of `x`.
fn feed_forward_block(
    model: &Model,
    layer: &Layer,
    n: usize,
    s: &mut Scratch,
    x: &mut [f32],
) -> Result<()> {
    s.norm(model, &layer.feed_forward_norm, x, n)?;
    let b = &mut s.buffers;
    let o = sized(&mut b.o, n * model.d_model);
    match &layer.feed_forward {
        FeedForward::Gelu {
            expand,
            project,
            tanh,
        } => {
            let u = sized(&mut b.u, n * expand.rows);
            // GELU by the thread that computed each piece, not by the caller alone.
            let gelu = |piece: &mut [f32]| gelu_in_place(piece, *tanh);
            linears_then(&[expand], &s.h, n, &mut [u], Some(&gelu));
            linears(&[project], &b.u, n, &mut [o]);
        }
        FeedForward::SwiGlu { gate, up, down } => {
            let (g, u) = (sized(&mut b.g, n * gate.rows), sized(&mut b.u, n * up.rows));
            linears(&[gate, up], &s.h, n, &mut [g, u]);
            swiglu_in_place(&mut b.g, &b.u);
            linears(&[down], &b.g, n, &mut [o]);
        }
    }
    add_in_place(x, &b.o);
    Ok(())
}

/// `logits = head(final_norm(x))` of the rows `batch.logit_rows` of `x`.
fn head(
    model: &Model,
    batch: &Batch,
    x: &[f32],
    s: &mut Scratch,
    logits: &mut [f32],
) -> Result<()> {
    let d = model.d_model;
    let m = batch.logit_rows.len();
    let last = sized(&mut s.buffers.o, m * d);
    for (j, &r) in batch.logit_rows.iter().enumerate() {
        last[j * d..(j + 1) * d].copy_from_slice(&x[r * d..(r + 1) * d]);
    }
    let Scratch {
        h,
        mean,
        rstd,
        buffers,
        ..
    } = s;
    norm_into(model, &model.final_norm, &buffers.o, m, h, mean, rstd)?;
    linears(&[&model.head], h, m, &mut [logits]);
    Ok(())
}

/// The residual stream, a norm's output and statistics, and the blocks'
/// intermediate rows: reused by every layer and every step (each is written whole
/// before it is read).
#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    mean: Vec<f32>,
    rstd: Vec<f32>,
    buffers: Buffers,
}

/// Queries, keys, values (and a rotary copy), attention's output, a block's output,
/// and the feed-forward layer's inner rows.
#[derive(Default)]
struct Buffers {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    t: Vec<f32>,
    a: Vec<f32>,
    o: Vec<f32>,
    u: Vec<f32>,
    g: Vec<f32>,
}

/// `v` as `len` elements (allocated the first time a length is asked for; the old
/// values stay until the caller overwrites them).
fn sized(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() != len {
        v.clear();
        v.resize(len, 0.0);
    }
    &mut v[..]
}

impl Scratch {
    /// `h = norm(x)` of the `rows` rows of `x`.
    fn norm(&mut self, model: &Model, w: &NormWeights, x: &[f32], rows: usize) -> Result<()> {
        norm_into(
            model,
            w,
            x,
            rows,
            &mut self.h,
            &mut self.mean,
            &mut self.rstd,
        )
    }
}

/// `h = norm(x)` of the `rows` rows of `x`, with the statistics' buffers.
fn norm_into(
    model: &Model,
    w: &NormWeights,
    x: &[f32],
    rows: usize,
    h: &mut Vec<f32>,
    mean: &mut Vec<f32>,
    rstd: &mut Vec<f32>,
) -> Result<()> {
    let mean = match model.norm {
        Norm::Layer => Some(sized(mean, rows)),
        Norm::Rms => None,
    };
    norm_forward(
        model.norm,
        x,
        model.d_model,
        w.weight,
        w.bias,
        model.eps,
        sized(h, rows * model.d_model),
        mean,
        sized(rstd, rows),
    )
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
