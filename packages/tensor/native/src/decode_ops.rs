//! The whole-step decoder of `riftco_kernels::decode`: a `DecodeProgram` holds
//! a model's weights (references to the numpy arrays that store them, which it
//! keeps alive) and runs one incremental step per call, writing keys and values
//! into the caller's cache arrays in place.
//!
//! The model arrives as riftco.tensor's lowered `DecodeSpec`, read by `decode_spec`.

use numpy::{PyArrayDyn, PyArrayMethods, PyReadwriteArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use riftco_kernels::attention::{Heads, Segment};
use riftco_kernels::decode::{self, Attend, Batch, CacheLayer, FeedForward, Layer, Model};
use riftco_kernels::norm::Norm;
use riftco_kernels::paged::{PagedLayout, PagedSegment};

use crate::convert::{alloc, error, run, slice};
use crate::decode_spec::{
    array, decode_features, linear, norm, only, opt_array, Array, Holder, Raw, RawLayer, RawLinear,
    RawNorm, TOPOLOGY,
};

/// A model compiled for whole-step decoding.
#[pyclass(name = "DecodeProgram", module = "riftco.tensor._native", frozen)]
pub struct DecodeProgram {
    _keep: Vec<Py<PyAny>>,
    d_model: usize,
    vocab: usize,
    heads: Heads,
    norm: Norm,
    eps: f32,
    rope_theta: Option<f64>,
    token_embedding: Raw,
    position_embedding: Option<Raw>,
    layers: Vec<RawLayer>,
    final_norm: RawNorm,
    head: RawLinear,
}

// SAFETY: the raw pointers are into arrays the program keeps alive; the program
// only reads them.
unsafe impl Send for DecodeProgram {}
unsafe impl Sync for DecodeProgram {}

impl DecodeProgram {
    fn model(&self) -> Model<'_> {
        // SAFETY: every Raw points into an array held in `_keep`.
        unsafe {
            let layers = self
                .layers
                .iter()
                .map(|l| {
                    let [q, k, v, o] = l.qkvo.map(|x| linear(&x));
                    let ff = &l.feed_forward;
                    let feed_forward = match l.gelu_tanh {
                        Some(tanh) => FeedForward::Gelu {
                            expand: linear(&ff[0]),
                            project: linear(&ff[1]),
                            tanh,
                        },
                        None => FeedForward::SwiGlu {
                            gate: linear(&ff[0]),
                            up: linear(&ff[1]),
                            down: linear(&ff[2]),
                        },
                    };
                    Layer {
                        attention_norm: norm(&l.attention_norm),
                        query: q,
                        key: k,
                        value: v,
                        output: o,
                        feed_forward_norm: norm(&l.feed_forward_norm),
                        feed_forward,
                    }
                })
                .collect();
            Model {
                d_model: self.d_model,
                vocab: self.vocab,
                heads: self.heads,
                norm: self.norm,
                eps: self.eps,
                rope_theta: self.rope_theta,
                token_embedding: self.token_embedding.get(),
                position_embedding: self.position_embedding.map(|p| p.get()),
                layers,
                final_norm: norm(&self.final_norm),
                head: linear(&self.head),
            }
        }
    }
}

/// Bytes a program may spend on tiled copies of its float32 and F16 weights: half the
/// memory the system has available when it is built (Linux's `MemAvailable`;
/// unbounded where the system does not say), or none with
/// `RIFTCO_CPU_DECODE_LAYOUT=rows`. A linear whose copy does not fit keeps the model's
/// row-major array, with the same bits.
fn tile_budget() -> usize {
    if std::env::var("RIFTCO_CPU_DECODE_LAYOUT").is_ok_and(|v| v.trim() == "rows") {
        return 0;
    }
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib.saturating_mul(1024))
        });
    available.map_or(usize::MAX, |bytes| bytes / 2)
}

/// A writable, C-contiguous float32 array, borrowed for writing (numpy's borrow
/// tracking refuses a second borrow of the same array, so caches cannot alias).
fn writable<'py>(a: &Array<'py>, what: &str) -> PyResult<PyReadwriteArrayDyn<'py, f32>> {
    let typed = a
        .cast::<PyArrayDyn<f32>>()
        .map_err(|_| error(format!("DecodeProgram: the {what} must be float32")))?;
    match typed.try_readwrite() {
        Ok(rw) if typed.is_c_contiguous() => Ok(rw),
        _ => Err(error(format!(
            "DecodeProgram: the {what} must be C-contiguous, writable and not in use twice"
        ))),
    }
}

#[pymethods]
impl DecodeProgram {
    /// Compile a lowered `DecodeSpec` (riftco.tensor.ops.decode): read by field name.
    #[new]
    fn new(spec: &Bound<'_, PyAny>) -> PyResult<Self> {
        let norm = match spec.getattr("norm")?.extract::<String>()?.as_str() {
            "layer" => Norm::Layer,
            "rms" => Norm::Rms,
            other => {
                return Err(error(format!(
                    "DecodeProgram: norm must be 'layer' or 'rms', found {other:?}"
                )))
            }
        };
        only(&spec.getattr("topology")?, &TOPOLOGY, "topology flag")?;
        let mut h = Holder {
            keep: Vec::new(),
            tile_budget: tile_budget(),
        };
        let layers = spec
            .getattr("layers")?
            .try_iter()?
            .enumerate()
            .map(|(i, layer)| h.layer(&layer?, &format!("layers[{i}]")))
            .collect::<PyResult<Vec<_>>>()?;
        let usize_of = |name: &str| -> PyResult<usize> { spec.getattr(name)?.extract() };
        let program = DecodeProgram {
            d_model: usize_of("d_model")?,
            vocab: usize_of("vocab")?,
            heads: Heads {
                heads: usize_of("heads")?,
                kv_heads: usize_of("kv_heads")?,
                head_dim: usize_of("head_dim")?,
                scale: spec.getattr("scale")?.extract()?,
                causal: true,
                window: usize_of("window")?,
            },
            norm,
            eps: spec.getattr("eps")?.extract()?,
            rope_theta: spec.getattr("rope_theta")?.extract()?,
            token_embedding: h
                .take::<f32>(&array(spec.getattr("token_embedding")?, "token_embedding")?)?,
            position_embedding: h.opt_f32(
                opt_array(spec.getattr("position_embedding")?, "position_embedding")?.as_ref(),
            )?,
            layers,
            final_norm: h.norm(&spec.getattr("final_norm")?, "final_norm")?,
            head: h.linear(&spec.getattr("head")?, "head")?,
            _keep: Vec::new(),
        };
        program.model().check().map_err(|e| error(e.0))?;
        Ok(DecodeProgram {
            _keep: h.keep,
            ..program
        })
    }

    /// One step: `tokens`, `positions` and `cache_rows` (int64 `[N]`), every layer's
    /// cache `keys` and `values` (float32, written in place), the rows whose logits
    /// come back (`[len(logit_rows), vocab]`), and the sequences: query rows
    /// `q_starts[j]..+q_counts[j]`, keys `kv_starts[j]..+kv_lengths[j]`, or with a
    /// `page_table` (int64 `[S, max_pages]`) its first `kv_lengths[j]` positions
    /// through pages of `page_size`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        tokens, positions, cache_rows, keys, values, logit_rows, q_starts, q_counts,
        kv_starts, kv_lengths, page_table=None, page_size=0
    ))]
    fn step<'py>(
        &self,
        py: Python<'py>,
        tokens: &Array<'py>,
        positions: &Array<'py>,
        cache_rows: &Array<'py>,
        keys: Vec<Array<'py>>,
        values: Vec<Array<'py>>,
        logit_rows: Vec<usize>,
        q_starts: Vec<usize>,
        q_counts: Vec<usize>,
        kv_starts: Vec<usize>,
        kv_lengths: Vec<usize>,
        page_table: Option<&Array<'py>>,
        page_size: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = q_starts.len();
        if q_counts.len() != s
            || kv_lengths.len() != s
            || (page_table.is_none() && kv_starts.len() != s)
        {
            return Err(error(
                "DecodeProgram.step: segment lists of different lengths",
            ));
        }
        if keys.len() != values.len() {
            return Err(error(format!(
                "DecodeProgram.step: {} key and {} value caches",
                keys.len(),
                values.len()
            )));
        }
        let mut guards = Vec::with_capacity(2 * keys.len());
        for (k, v) in keys.iter().zip(&values) {
            guards.push(writable(k, "key cache")?);
            guards.push(writable(v, "value cache")?);
        }
        let mut cache = Vec::with_capacity(keys.len());
        let mut it = guards.iter_mut();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            let (keys, values) = (k.as_slice_mut(), v.as_slice_mut());
            cache.push(CacheLayer {
                keys: keys
                    .map_err(|_| error("DecodeProgram.step: a key cache is not contiguous"))?,
                values: values
                    .map_err(|_| error("DecodeProgram.step: a value cache is not contiguous"))?,
            });
        }
        let (tokens, positions, cache_rows) = (
            slice::<i64>(tokens)?,
            slice::<i64>(positions)?,
            slice::<i64>(cache_rows)?,
        );
        let contiguous: Vec<Segment>;
        let paged: Vec<PagedSegment>;
        let attend = match page_table {
            None => {
                contiguous = (0..s)
                    .map(|j| Segment {
                        q_row: q_starts[j],
                        q_len: q_counts[j],
                        kv_row: kv_starts[j],
                        kv_len: kv_lengths[j],
                    })
                    .collect();
                Attend::Contiguous(&contiguous)
            }
            Some(table) => {
                let shape = table.shape();
                let kv = self.heads.kv_heads * self.heads.head_dim;
                let rows = cache.first().map_or(0, |c| c.keys.len() / kv);
                if shape.len() != 2 || shape[0] != s || page_size == 0 || rows % page_size != 0 {
                    return Err(error(format!(
                        "DecodeProgram.step: a page table {shape:?} for {s} sequences and pages \
                         of {page_size} over {rows} rows"
                    )));
                }
                paged = (0..s)
                    .map(|j| PagedSegment {
                        q_row: q_starts[j],
                        q_len: q_counts[j],
                        kv_len: kv_lengths[j],
                    })
                    .collect();
                Attend::Paged {
                    layout: PagedLayout {
                        pages: rows / page_size,
                        page_size,
                        max_pages: shape[1],
                    },
                    segments: &paged,
                    table: slice::<i64>(table)?,
                }
            }
        };
        let batch = Batch {
            tokens,
            positions,
            cache_rows,
            attend,
            logit_rows: &logit_rows,
        };
        let (out, os) = alloc::<f32>(py, &[logit_rows.len(), self.vocab]);
        let model = self.model();
        run(py, || decode::step(&model, &batch, &mut cache, os))?;
        Ok(out.into_any())
    }

    /// The number of blocks.
    #[getter]
    fn layers(&self) -> usize {
        self.layers.len()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DecodeProgram>()?;
    m.add_function(wrap_pyfunction!(decode_features, m)?)
}
