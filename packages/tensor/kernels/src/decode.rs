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

mod forward;
mod linears;
mod pages;

pub use forward::step;

use crate::attention::{Heads, Segment};
use crate::blockq::tiles::Tiles;
use crate::blockq::BlockWeight;
use crate::nf4::Nf4Weight;
use crate::norm::Norm;
use crate::paged::{PagedLayout, PagedSegment};
use crate::{ensure, Result};

/// The weight `[rows, cols]` of a linear layer.
#[derive(Debug, Clone, Copy)]
pub enum Weight<'a> {
    F32(&'a [f32]),
    /// A float32 weight in tiles of rows (`crate::f32_rows::tiles`): the same bits.
    F32Tiled(&'a [f32]),
    /// An F16 weight (halves) in tiles of rows (`crate::blockq::f16_tiles`): the
    /// same bits as its block-layout rows.
    F16Tiled(&'a [u8]),
    Block(BlockWeight<'a>),
    Nf4(Nf4Weight<'a>),
    /// A Q8_0 / Q4_0 weight with its tiles (`crate::blockq::tiles`): the same bits.
    TiledBlock(BlockWeight<'a>, Tiles<'a>),
    /// An NF4 weight with its tiles, read by the integer product.
    TiledNf4(Nf4Weight<'a>, Tiles<'a>),
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
            Weight::F16Tiled(w) => ensure!(
                w.len() == 2 * rows * cols,
                "decode: {name} holds {} bytes of halves, expected {rows} x {cols} x 2",
                w.len()
            ),
            Weight::F32(w) | Weight::F32Tiled(w) => ensure!(
                w.len() == rows * cols,
                "decode: {name} holds {} floats, expected {rows} x {cols}",
                w.len()
            ),
            Weight::TiledBlock(b, t) => {
                t.check()?;
                ensure!(
                    b.rows == t.rows && b.cols == t.cols,
                    "decode: {name}'s tiles do not match its blocks"
                );
                return Linear {
                    weight: Weight::Block(b),
                    ..*self
                }
                .check(name, rows, cols);
            }
            Weight::TiledNf4(w, t) => {
                t.check()?;
                ensure!(
                    w.rows == t.rows && w.cols == t.cols,
                    "decode: {name}'s tiles do not match its NF4 weight"
                );
                return Linear {
                    weight: Weight::Nf4(w),
                    ..*self
                }
                .check(name, rows, cols);
            }
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
