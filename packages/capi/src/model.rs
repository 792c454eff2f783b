//! A loaded model: its configuration and the weights it owns, in the layouts the
//! kernels crate's whole-step decoder reads (`riftco_kernels::decode::Model`).

use riftco_kernels::attention::Heads;
use riftco_kernels::blockq::{f16_tiles, BlockFormat, BlockWeight};
use riftco_kernels::decode::{FeedForward, Layer, Linear, Model, NormWeights, Weight};
use riftco_kernels::f32_rows::tiles as f32_tiles;
use riftco_kernels::norm::Norm;

use crate::error::{Error, Result};
use crate::json::Json;

/// Sizes no file may claim (riftco-interchange's `layout.LIMITS`).
pub const LIMITS: [(&str, i128); 6] = [
    ("context_length", 1 << 20),
    ("vocab_size", 1 << 24),
    ("d_model", 1 << 16),
    ("d_ff", 1 << 18),
    ("n_layers", 1 << 12),
    ("n_heads", 1 << 12),
];

/// riftco-nn's `TransformerConfig`, as far as inference needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub vocab_size: usize,
    pub context_length: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub kv_heads: usize,
    pub d_ff: usize,
    pub rms: bool,
    pub norm_eps: f64,
    pub rotary: bool,
    pub rope_theta: f64,
    pub swiglu: bool,
    pub gelu_tanh: bool,
    pub linear_bias: bool,
    pub head_bias: bool,
    pub tie_embeddings: bool,
    pub sliding_window: usize,
}

impl Config {
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }

    /// Read and validate a stored configuration (every field of `TransformerConfig.to_dict`,
    /// each type-checked as `TransformerConfig` does; unknown fields refused).
    pub fn from_json(v: &Json) -> Result<Config> {
        let bad = |m: String| Error::format(format!("config: {m}"));
        let map = v
            .as_object()
            .ok_or_else(|| bad(format!("expected an object; found {}", v.kind())))?;
        const KNOWN: [&str; 21] = [
            "vocab_size",
            "context_length",
            "d_model",
            "n_layers",
            "n_heads",
            "d_ff",
            "kv_heads",
            "norm",
            "norm_eps",
            "positions",
            "rope_theta",
            "feed_forward",
            "gelu",
            "linear_bias",
            "head_bias",
            "tie_embeddings",
            "sliding_window",
            "attention",
            "dropout",
            "checkpoint",
            "init_std",
        ];
        if let Some(k) = map.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(bad(format!("unknown field {k:?}")));
        }
        let positive = |name: &str| -> Result<usize> {
            match map.get(name) {
                Some(Json::Int(i)) if *i > 0 => {
                    if let Some((_, limit)) = LIMITS.iter().find(|(n, _)| *n == name) {
                        if i > limit {
                            return Err(Error::limit(format!(
                                "config: {name} {i} is past the supported {limit}"
                            )));
                        }
                    }
                    usize::try_from(*i).map_err(|_| bad(format!("{name} {i} is too large")))
                }
                Some(other) => Err(bad(format!(
                    "{name} must be a positive int, found {}",
                    show(other)
                ))),
                None => Err(bad(format!("missing field {name:?}"))),
            }
        };
        let choice = |name: &str, allowed: &[&str], default: &str| -> Result<String> {
            match map.get(name) {
                None => Ok(default.to_string()),
                Some(Json::Str(s)) if allowed.contains(&s.as_str()) => Ok(s.clone()),
                Some(other) => Err(bad(format!(
                    "{name} must be one of {allowed:?}, found {}",
                    show(other)
                ))),
            }
        };
        let number = |name: &str, default: f64| -> Result<f64> {
            match map.get(name) {
                None => Ok(default),
                Some(v @ (Json::Int(_) | Json::Float(_))) => {
                    let x = v.as_f64().unwrap_or(f64::NAN);
                    if x.is_finite() && x > 0.0 {
                        Ok(x)
                    } else {
                        Err(bad(format!(
                            "{name} must be a positive number, found {}",
                            show(v)
                        )))
                    }
                }
                Some(other) => Err(bad(format!(
                    "{name} must be a positive number, found {}",
                    show(other)
                ))),
            }
        };
        let flag = |name: &str, default: bool| -> Result<bool> {
            match map.get(name) {
                None => Ok(default),
                Some(Json::Bool(b)) => Ok(*b),
                Some(other) => Err(bad(format!("{name} must be a bool, found {}", show(other)))),
            }
        };
        let optional = |name: &str| -> Result<Option<usize>> {
            match map.get(name) {
                None | Some(Json::Null) => Ok(None),
                Some(Json::Int(i)) if *i > 0 && *i <= (1 << 40) => Ok(Some(*i as usize)),
                Some(other) => Err(bad(format!(
                    "{name} must be None or a positive int, found {}",
                    show(other)
                ))),
            }
        };
        let vocab_size = positive("vocab_size")?;
        let context_length = positive("context_length")?;
        let d_model = positive("d_model")?;
        let n_layers = positive("n_layers")?;
        let n_heads = positive("n_heads")?;
        let d_ff = positive("d_ff")?;
        let norm = choice("norm", &["layer", "rms"], "layer")?;
        let positions = choice("positions", &["learned", "rotary"], "learned")?;
        let feed_forward = choice("feed_forward", &["gelu", "swiglu"], "gelu")?;
        let gelu = choice("gelu", &["exact", "tanh"], "tanh")?;
        choice("attention", &["flash", "materialized"], "flash")?;
        let norm_eps = number("norm_eps", 1e-5)?;
        let rope_theta = number("rope_theta", 10000.0)?;
        number("init_std", 0.02)?;
        match map.get("dropout") {
            None => {}
            Some(v @ (Json::Int(_) | Json::Float(_)))
                if (0.0..1.0).contains(&v.as_f64().unwrap_or(-1.0)) => {}
            Some(other) => {
                return Err(bad(format!(
                    "dropout must be in [0, 1), found {}",
                    show(other)
                )))
            }
        }
        let linear_bias = flag("linear_bias", true)?;
        let head_bias = flag("head_bias", false)?;
        let tie_embeddings = flag("tie_embeddings", false)?;
        flag("checkpoint", false)?;
        let kv_heads = optional("kv_heads")?.unwrap_or(n_heads);
        let sliding_window = optional("sliding_window")?.unwrap_or(0);
        if d_model % n_heads != 0 {
            return Err(bad(format!(
                "d_model {d_model} is not divisible by n_heads {n_heads}"
            )));
        }
        if kv_heads == 0 || n_heads % kv_heads != 0 {
            return Err(bad(format!(
                "kv_heads must be a positive divisor of n_heads {n_heads}, found {kv_heads}"
            )));
        }
        let rotary = positions == "rotary";
        if rotary && (d_model / n_heads) % 2 != 0 {
            return Err(bad(format!(
                "rotary positions need an even head dimension, found {}",
                d_model / n_heads
            )));
        }
        Ok(Config {
            vocab_size,
            context_length,
            d_model,
            n_layers,
            n_heads,
            kv_heads,
            d_ff,
            rms: norm == "rms",
            norm_eps,
            rotary,
            rope_theta,
            swiglu: feed_forward == "swiglu",
            gelu_tanh: gelu == "tanh",
            linear_bias,
            head_bias,
            tie_embeddings,
            sliding_window,
        })
    }

    /// How many tensors `expected_shapes` lists, without listing them.
    pub fn tensor_count(&self) -> usize {
        let norm = if self.rms { 1 } else { 2 };
        let linear = if self.linear_bias { 2 } else { 1 };
        let per_block = 2 * norm + (4 + if self.swiglu { 3 } else { 2 }) * linear;
        let fixed = 1
            + usize::from(!self.rotary)
            + norm
            + usize::from(!self.tie_embeddings)
            + usize::from(self.head_bias);
        fixed + self.n_layers * per_block
    }

    /// Every parameter name and shape of a model with this configuration (riftco-interchange's
    /// `expected_shapes`), in the order listed there.
    pub fn expected_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (v, d, f) = (self.vocab_size, self.d_model, self.d_ff);
        let mut out = vec![("token_embedding.weight".to_string(), vec![v, d])];
        if !self.rotary {
            out.push((
                "position_embedding.weight".into(),
                vec![self.context_length, d],
            ));
        }
        let q = self.n_heads * self.head_dim();
        let kv = self.kv_heads * self.head_dim();
        let norm = |out: &mut Vec<(String, Vec<usize>)>, p: &str| {
            out.push((format!("{p}.weight"), vec![d]));
            if !self.rms {
                out.push((format!("{p}.bias"), vec![d]));
            }
        };
        let linear = |out: &mut Vec<(String, Vec<usize>)>, p: &str, rows: usize, cols: usize| {
            out.push((format!("{p}.weight"), vec![rows, cols]));
            if self.linear_bias {
                out.push((format!("{p}.bias"), vec![rows]));
            }
        };
        for i in 0..self.n_layers {
            let b = format!("blocks.{i}");
            norm(&mut out, &format!("{b}.attention_norm"));
            for (name, r, c) in [
                ("query", q, d),
                ("key", kv, d),
                ("value", kv, d),
                ("output", d, q),
            ] {
                linear(&mut out, &format!("{b}.attention.{name}"), r, c);
            }
            norm(&mut out, &format!("{b}.feed_forward_norm"));
            let ff: &[(&str, usize, usize)] = if self.swiglu {
                &[("gate", f, d), ("up", f, d), ("down", d, f)]
            } else {
                &[("expand", f, d), ("project", d, f)]
            };
            for &(name, r, c) in ff {
                linear(&mut out, &format!("{b}.feed_forward.{name}"), r, c);
            }
        }
        norm(&mut out, "final_norm");
        if !self.tie_embeddings {
            out.push(("language_model_head.weight".into(), vec![v, d]));
        }
        if self.head_bias {
            out.push(("language_model_head.bias".into(), vec![v]));
        }
        out
    }
}

fn show(v: &Json) -> String {
    match v {
        Json::Str(s) => format!("{s:?}"),
        Json::Int(i) => i.to_string(),
        Json::Float(f) => f.to_string(),
        Json::Bool(b) => {
            if *b {
                "True".into()
            } else {
                "False".into()
            }
        }
        Json::Null => "None".into(),
        other => other.kind().to_string(),
    }
}

/// A weight matrix owned by the model: float32 rows or GGUF block rows, or (once
/// [`ModelData::tile`] ran) float32 and F16 rows in the decode step's tiles.
#[derive(Debug, Clone)]
pub enum OwnedWeight {
    F32(Vec<f32>),
    Block(BlockFormat, Vec<u8>),
    /// `riftco_kernels::f32_rows::tiles`' layout of the float32 rows.
    F32Tiled(Vec<f32>),
    /// `riftco_kernels::blockq::f16_tiles`' layout of the F16 rows.
    F16Tiled(Vec<u8>),
}

#[derive(Debug, Clone)]
pub struct OwnedLinear {
    pub weight: OwnedWeight,
    pub rows: usize,
    pub cols: usize,
    pub bias: Option<Vec<f32>>,
}

impl OwnedLinear {
    pub fn f32(weight: Vec<f32>, rows: usize, cols: usize, bias: Option<Vec<f32>>) -> Self {
        OwnedLinear {
            weight: OwnedWeight::F32(weight),
            rows,
            cols,
            bias,
        }
    }
    fn view(&self) -> Linear<'_> {
        let weight = match &self.weight {
            OwnedWeight::F32(w) => Weight::F32(w),
            OwnedWeight::F32Tiled(w) => Weight::F32Tiled(w),
            OwnedWeight::F16Tiled(w) => Weight::F16Tiled(w),
            OwnedWeight::Block(format, data) => Weight::Block(BlockWeight {
                format: *format,
                data,
                rows: self.rows,
                cols: self.cols,
            }),
        };
        Linear {
            weight,
            rows: self.rows,
            cols: self.cols,
            bias: self.bias.as_deref(),
        }
    }
    pub fn format_name(&self) -> &'static str {
        match &self.weight {
            OwnedWeight::F32(_) | OwnedWeight::F32Tiled(_) => "f32",
            OwnedWeight::F16Tiled(_) => BlockFormat::F16.name(),
            OwnedWeight::Block(f, _) => f.name(),
        }
    }

    /// The weight rearranged in place into the decode step's tiles (float32 and F16
    /// rows; the same bits, the same memory), once its shape is checked.
    fn tile(&mut self) {
        let (rows, cols) = (self.rows, self.cols);
        self.weight = match std::mem::replace(&mut self.weight, OwnedWeight::F32(Vec::new())) {
            OwnedWeight::F32(w) if w.len() == rows * cols => {
                let mut tiled = vec![0.0; w.len()];
                f32_tiles::pack(&w, rows, cols, &mut tiled);
                OwnedWeight::F32Tiled(tiled)
            }
            OwnedWeight::Block(BlockFormat::F16, d) if d.len() == 2 * rows * cols => {
                let mut tiled = vec![0; d.len()];
                f16_tiles::pack(&d, rows, cols, &mut tiled);
                OwnedWeight::F16Tiled(tiled)
            }
            other => other,
        };
    }
}

#[derive(Debug, Clone, Default)]
pub struct OwnedNorm {
    pub weight: Option<Vec<f32>>,
    pub bias: Option<Vec<f32>>,
}

impl OwnedNorm {
    fn view(&self) -> NormWeights<'_> {
        NormWeights {
            weight: self.weight.as_deref(),
            bias: self.bias.as_deref(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct OwnedLayer {
    pub attention_norm: OwnedNorm,
    pub query: OwnedLinear,
    pub key: OwnedLinear,
    pub value: OwnedLinear,
    pub output: OwnedLinear,
    pub feed_forward_norm: OwnedNorm,
    /// `[expand, project]` (GELU) or `[gate, up, down]` (SwiGLU).
    pub feed_forward: Vec<OwnedLinear>,
}

/// Where a model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Rift,
    Gguf,
}

/// A model's weights and configuration.
#[derive(Debug)]
pub struct ModelData {
    pub config: Config,
    pub source: Source,
    /// The bundle's `artifact_id` (a riftco GGUF: its lineage's id; else empty).
    pub artifact_id: String,
    /// The tokenizer state (riftco-text's), as canonical JSON, when the file holds one.
    pub tokenizer_state: Option<String>,
    pub token_embedding: Vec<f32>,
    pub position_embedding: Option<Vec<f32>>,
    pub layers: Vec<OwnedLayer>,
    pub final_norm: OwnedNorm,
    /// `None`: the head is the token embedding (tied).
    pub head: Option<OwnedLinear>,
    /// The weight format of the layers' matrices ("f32", "f16", "q8_0", "q4_0", "mixed").
    pub weight_format: &'static str,
}

impl ModelData {
    /// The kernels' view of the model (borrowing its weights).
    pub fn view(&self) -> Model<'_> {
        let c = &self.config;
        let layers = self
            .layers
            .iter()
            .map(|l| Layer {
                attention_norm: l.attention_norm.view(),
                query: l.query.view(),
                key: l.key.view(),
                value: l.value.view(),
                output: l.output.view(),
                feed_forward_norm: l.feed_forward_norm.view(),
                feed_forward: if c.swiglu {
                    FeedForward::SwiGlu {
                        gate: l.feed_forward[0].view(),
                        up: l.feed_forward[1].view(),
                        down: l.feed_forward[2].view(),
                    }
                } else {
                    FeedForward::Gelu {
                        expand: l.feed_forward[0].view(),
                        project: l.feed_forward[1].view(),
                        tanh: c.gelu_tanh,
                    }
                },
            })
            .collect();
        let head = match &self.head {
            Some(h) => h.view(),
            None => Linear {
                weight: Weight::F32(&self.token_embedding),
                rows: c.vocab_size,
                cols: c.d_model,
                bias: None,
            },
        };
        Model {
            d_model: c.d_model,
            vocab: c.vocab_size,
            heads: self.heads(),
            norm: if c.rms { Norm::Rms } else { Norm::Layer },
            eps: c.norm_eps as f32,
            rope_theta: c.rotary.then_some(c.rope_theta),
            token_embedding: &self.token_embedding,
            position_embedding: self.position_embedding.as_deref(),
            layers,
            final_norm: self.final_norm.view(),
            head,
        }
    }

    pub fn heads(&self) -> Heads {
        let c = &self.config;
        Heads {
            heads: c.n_heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim(),
            scale: (1.0 / (c.head_dim() as f64).sqrt()) as f32,
            causal: true,
            window: c.sliding_window,
        }
    }

    /// Every layer linear and an untied head in the decode step's tiles (the tied
    /// head reads the embedding's rows): each float32 or F16 matrix is rearranged
    /// once, in place, so the step reads it front to back with the same bits.
    pub fn tile(&mut self) {
        for l in &mut self.layers {
            for lin in [&mut l.query, &mut l.key, &mut l.value, &mut l.output] {
                lin.tile();
            }
            l.feed_forward.iter_mut().for_each(OwnedLinear::tile);
        }
        if let Some(h) = &mut self.head {
            h.tile();
        }
    }

    /// Check every weight against the configuration (the kernels' own check).
    pub fn check(&self) -> Result<()> {
        self.view().check().map_err(|e| Error::format(e.0))
    }

    /// Bytes of weights held.
    pub fn weight_bytes(&self) -> usize {
        let lin = |l: &OwnedLinear| {
            (match &l.weight {
                OwnedWeight::F32(w) | OwnedWeight::F32Tiled(w) => w.len() * 4,
                OwnedWeight::Block(_, d) | OwnedWeight::F16Tiled(d) => d.len(),
            }) + l.bias.as_ref().map_or(0, |b| b.len() * 4)
        };
        let norm = |n: &OwnedNorm| {
            4 * (n.weight.as_ref().map_or(0, Vec::len) + n.bias.as_ref().map_or(0, Vec::len))
        };
        let mut total = 4 * self.token_embedding.len()
            + 4 * self.position_embedding.as_ref().map_or(0, Vec::len);
        for l in &self.layers {
            total += norm(&l.attention_norm) + norm(&l.feed_forward_norm);
            total += lin(&l.query) + lin(&l.key) + lin(&l.value) + lin(&l.output);
            total += l.feed_forward.iter().map(lin).sum::<usize>();
        }
        total + norm(&self.final_norm) + self.head.as_ref().map_or(0, lin)
    }
}
