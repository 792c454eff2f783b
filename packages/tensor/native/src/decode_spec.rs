//! Reading riftco.tensor's lowered `DecodeSpec` (riftco.tensor.ops.decode documents the
//! schema) into the arrays a `DecodeProgram` keeps: each field by name, each layer's
//! parts by role; a role or topology flag this build does not decode is refused, and
//! `decode_features` lists what it decodes.
//!
//! A linear is `format`, `arrays`, `shape` `(rows, cols)`, `bias`, `block_size` and
//! `offset`: `f32` with `[weight]`; `q8_0`, `q4_0` or `f16` with `[data]` (uint8, GGUF
//! rows); `nf4` with `[codes, absmax]` (float32 scales) or `[codes, absmax,
//! group_range]` (double-quantized), its block size and scale offset.

use numpy::{PyArrayMethods, PyUntypedArray};
use pyo3::prelude::*;
use riftco_kernels::blockq::tiles::{self, TileKind, Tiles};
use riftco_kernels::blockq::{f16_tiles, BlockFormat, BlockWeight};
use riftco_kernels::decode::{Linear, NormWeights, Weight};
use riftco_kernels::f32_rows::tiles as f32_tiles;
use riftco_kernels::nf4::{Nf4Weight, Scales};

use crate::convert::{error, slice};

pub(crate) type Array<'py> = Bound<'py, PyUntypedArray>;

/// An array's data, held alive by the program (numpy never moves the data of
/// an array that something references).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Raw {
    pub(crate) ptr: usize,
    pub(crate) len: usize,
}

impl Raw {
    /// # Safety
    /// The array behind `self` holds `len` elements of `T` and is alive.
    pub(crate) unsafe fn get<'a, T>(self) -> &'a [T] {
        std::slice::from_raw_parts(self.ptr as *const T, self.len)
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum RawWeight {
    F32(Raw),
    /// A float32 weight in the program's own tiled copy (`riftco_kernels::f32_rows::tiles`).
    F32Tiled(Raw),
    /// An F16 weight in the program's own tiled copy (`riftco_kernels::blockq::f16_tiles`).
    F16Tiled(Raw),
    /// The GGUF bytes, and the tiles the program made of them (Q8_0 / Q4_0 on a CPU that reads them).
    Block(BlockFormat, Raw, Option<Raw>),
    Nf4 {
        codes: Raw,
        scales: Raw,
        ranges: Option<Raw>,
        offset: f32,
        block: usize,
        tiles: Option<Raw>,
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct RawLinear {
    pub(crate) weight: RawWeight,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) bias: Option<Raw>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct RawNorm {
    pub(crate) weight: Option<Raw>,
    pub(crate) bias: Option<Raw>,
}

#[derive(Debug, Clone)]
pub(crate) struct RawLayer {
    pub(crate) attention_norm: RawNorm,
    pub(crate) qkvo: [RawLinear; 4],
    pub(crate) feed_forward_norm: RawNorm,
    /// `None`: SwiGLU (gate, up, down); else GELU (tanh or not) with expand, project.
    pub(crate) gelu_tanh: Option<bool>,
    pub(crate) feed_forward: Vec<RawLinear>,
}

/// The arrays a program keeps alive, and how to read them.
pub(crate) struct Holder {
    pub(crate) keep: Vec<Py<PyAny>>,
    /// Bytes of tiled copies of float32 and F16 linears still to make
    /// (`Holder::tiled_f32`, `Holder::tiled_f16`); 0 keeps the row-major arrays.
    pub(crate) tile_budget: usize,
}

impl Holder {
    pub(crate) fn take<T: numpy::Element>(&mut self, a: &Array<'_>) -> PyResult<Raw> {
        let s = slice::<T>(a)?;
        let raw = Raw {
            ptr: s.as_ptr() as usize,
            len: s.len(),
        };
        self.keep.push(a.clone().into_any().unbind());
        Ok(raw)
    }

    pub(crate) fn opt_f32(&mut self, a: Option<&Array<'_>>) -> PyResult<Option<Raw>> {
        a.map(|a| self.take::<f32>(a)).transpose()
    }

    pub(crate) fn norm(&mut self, spec: &Bound<'_, PyAny>, what: &str) -> PyResult<RawNorm> {
        Ok(RawNorm {
            weight: self.opt_f32(opt_array(spec.getattr("weight")?, what)?.as_ref())?,
            bias: self.opt_f32(opt_array(spec.getattr("bias")?, what)?.as_ref())?,
        })
    }

    pub(crate) fn linear(&mut self, spec: &Bound<'_, PyAny>, what: &str) -> PyResult<RawLinear> {
        let format: String = spec.getattr("format")?.extract()?;
        let (rows, cols): (usize, usize) = spec.getattr("shape")?.extract()?;
        let block: usize = spec.getattr("block_size")?.extract()?;
        let offset: f32 = spec.getattr("offset")?.extract()?;
        let arrays = spec
            .getattr("arrays")?
            .try_iter()?
            .map(|a| array(a?, what))
            .collect::<PyResult<Vec<_>>>()?;
        let bias = opt_array(spec.getattr("bias")?, what)?;
        let weight = match (format.as_str(), arrays.as_slice()) {
            ("f32", [w]) => {
                let raw = self.take::<f32>(w)?;
                self.tiled_f32(spec.py(), raw, rows, cols)?
                    .map_or(RawWeight::F32(raw), RawWeight::F32Tiled)
            }
            ("nf4", [codes, absmax, rest @ ..]) if rest.len() <= 1 => {
                let codes = self.take::<u8>(codes)?;
                let ranges = rest.first().map(|r| self.take::<f32>(r)).transpose()?;
                let scales = if ranges.is_some() {
                    self.take::<u8>(absmax)?
                } else {
                    self.take::<f32>(absmax)?
                };
                RawWeight::Nf4 {
                    codes,
                    scales,
                    ranges,
                    offset,
                    block,
                    tiles: None,
                }
            }
            (name, [data]) => {
                let f = BlockFormat::parse(name).map_err(|e| error(e.0))?;
                let raw = self.take::<u8>(data)?;
                match f {
                    BlockFormat::F16 => self
                        .tiled_f16(spec.py(), raw, rows, cols)?
                        .map_or(RawWeight::Block(f, raw, None), RawWeight::F16Tiled),
                    _ => RawWeight::Block(f, raw, None),
                }
            }
            (name, found) => {
                return Err(error(format!(
                    "DecodeProgram: {what} is a {name} linear with {} arrays",
                    found.len()
                )))
            }
        };
        let mut lin = RawLinear {
            weight,
            rows,
            cols,
            bias: self.opt_f32(bias.as_ref())?,
        };
        self.tile(spec.py(), &mut lin)?;
        Ok(lin)
    }

    /// A copy of the float32 weight `w` (`[rows, cols]`) in tiles of rows, aligned to a
    /// cache line and kept with the arrays: the step reads each tile front to back.
    /// None when the program keeps the row-major layout (the copy would overrun
    /// `tile_budget`) or the
    /// weight does not have its shape (the program's check reports it).
    fn tiled_f32(
        &mut self,
        py: Python<'_>,
        w: Raw,
        rows: usize,
        cols: usize,
    ) -> PyResult<Option<Raw>> {
        let len = rows * cols;
        if w.len != len || len == 0 || !self.spend(4 * len) {
            return Ok(None);
        }
        const LINE: usize = 16; // floats in 64 bytes
        let array = numpy::PyArray1::<f32>::zeros(py, len + LINE - 1, false);
        let base = array.data() as usize;
        let skip = (64 - base % 64) % 64 / std::mem::size_of::<f32>();
        // SAFETY: the new array is ours alone, holds `len + LINE - 1` floats, and
        // numpy aligns float32 data to 4 bytes, so `skip < LINE` floats reach a line;
        // `w` is alive (held by `self.keep`).
        unsafe {
            let out = std::slice::from_raw_parts_mut((base as *mut f32).add(skip), len);
            f32_tiles::pack(w.get(), rows, cols, out);
        }
        self.keep.push(array.into_any().unbind());
        Ok(Some(Raw {
            ptr: base + skip * std::mem::size_of::<f32>(),
            len,
        }))
    }

    /// Whether a tiled copy of `bytes` fits what is left of the budget (taken if so).
    fn spend(&mut self, bytes: usize) -> bool {
        let fits = bytes <= self.tile_budget;
        if fits {
            self.tile_budget -= bytes;
        }
        fits
    }

    /// A copy of the F16 weight `data` (`[rows, cols]` halves) in tiles of rows, kept
    /// with the arrays; None as for [`Holder::tiled_f32`].
    fn tiled_f16(
        &mut self,
        py: Python<'_>,
        data: Raw,
        rows: usize,
        cols: usize,
    ) -> PyResult<Option<Raw>> {
        let len = 2 * rows * cols;
        if data.len != len || len == 0 || !self.spend(len) {
            return Ok(None);
        }
        let mut tiled = vec![0u8; len];
        // SAFETY: `data` is alive (held by `self.keep`) and holds `len` bytes.
        f16_tiles::pack(unsafe { data.get() }, rows, cols, &mut tiled);
        let array = numpy::PyArray1::from_vec(py, tiled).into_any();
        self.take::<u8>(&array.cast_into::<PyUntypedArray>()?)
            .map(Some)
    }

    /// Give a Q8_0, Q4_0 or NF4 linear its tiles (made once, kept with the arrays)
    /// where this CPU reads them and they fit the budget of tiled copies; a weight
    /// that does not fit its shape stays as it is (the program's check reports it).
    fn tile(&mut self, py: Python<'_>, lin: &mut RawLinear) -> PyResult<()> {
        if !tiles::useful() {
            return Ok(());
        }
        let kind = match lin.weight {
            RawWeight::Block(BlockFormat::F16, ..) => return Ok(()),
            RawWeight::Block(f, ..) => format_kind(f),
            RawWeight::Nf4 { .. } => TileKind::Nf4,
            _ => return Ok(()),
        };
        if !lin.cols.is_multiple_of(32) || !self.spend(tiles::tile_bytes(kind, lin.rows, lin.cols))
        {
            return Ok(());
        }
        // SAFETY: the arrays behind `lin` are held by `self.keep`.
        let made = match unsafe { linear(lin) }.weight {
            Weight::Block(b) => tiles::tile_block(&b),
            Weight::Nf4(w) => tiles::tile_nf4(&w),
            _ => None,
        };
        let Some(made) = made else {
            return Ok(());
        };
        let array = numpy::PyArray1::from_vec(py, made).into_any();
        let raw = self.take::<u8>(&array.cast_into::<PyUntypedArray>()?)?;
        match &mut lin.weight {
            RawWeight::Block(_, _, tiles) | RawWeight::Nf4 { tiles, .. } => *tiles = Some(raw),
            RawWeight::F32(_) | RawWeight::F32Tiled(_) | RawWeight::F16Tiled(_) => {}
        }
        Ok(())
    }
}

/// The norm roles of a layer, its attention linears, the feed-forward kinds with their
/// linears, and the topology flags this build decodes (riftco.tensor.ops.decode).
const NORMS: [&str; 2] = ["attention", "feed_forward"];
const ATTENTION: [&str; 4] = ["query", "key", "value", "output"];
const FEED_FORWARDS: [(&str, &[&str]); 3] = [
    ("gelu", &["expand", "project"]),
    ("gelu_tanh", &["expand", "project"]),
    ("swiglu", &["gate", "up", "down"]),
];
pub(crate) const TOPOLOGY: [&str; 0] = [];

pub(crate) fn array<'py>(o: Bound<'py, PyAny>, what: &str) -> PyResult<Array<'py>> {
    o.cast_into::<PyUntypedArray>().map_err(|_| {
        error(format!(
            "DecodeProgram: {what} holds something other than an array"
        ))
    })
}

pub(crate) fn opt_array<'py>(o: Bound<'py, PyAny>, what: &str) -> PyResult<Option<Array<'py>>> {
    if o.is_none() {
        Ok(None)
    } else {
        array(o, what).map(Some)
    }
}

/// `mapping[key]`, or an error naming `what` and the key.
fn entry<'py>(mapping: &Bound<'py, PyAny>, key: &str, what: &str) -> PyResult<Bound<'py, PyAny>> {
    mapping
        .get_item(key)
        .map_err(|_| error(format!("DecodeProgram: {what} has no {key:?}")))
}

/// Refuse a key of `mapping` outside `known` (a part this build would ignore).
pub(crate) fn only(mapping: &Bound<'_, PyAny>, known: &[&str], what: &str) -> PyResult<()> {
    for key in mapping.try_iter()? {
        let key: String = key?.extract()?;
        if !known.contains(&key.as_str()) {
            return Err(error(format!(
                "DecodeProgram: unsupported {what} {key:?} (this build decodes {known:?})"
            )));
        }
    }
    Ok(())
}

impl Holder {
    pub(crate) fn layer(&mut self, spec: &Bound<'_, PyAny>, at: &str) -> PyResult<RawLayer> {
        let kind: String = spec.getattr("feed_forward")?.extract()?;
        let Some(&(_, ff_roles)) = FEED_FORWARDS.iter().find(|(k, _)| *k == kind) else {
            return Err(error(format!(
                "DecodeProgram: unsupported feed-forward {kind:?} in {at}"
            )));
        };
        let norms = spec.getattr("norms")?;
        only(&norms, &NORMS, &format!("norm role of {at}"))?;
        let linears = spec.getattr("linears")?;
        let known: Vec<&str> = ATTENTION.iter().chain(ff_roles).copied().collect();
        only(&linears, &known, &format!("linear role of {at}"))?;
        let mut lin = |role: &str| -> PyResult<RawLinear> {
            let what = format!("{at}.{role}");
            self.linear(&entry(&linears, role, at)?, &what)
        };
        let qkvo = [lin("query")?, lin("key")?, lin("value")?, lin("output")?];
        let feed_forward = ff_roles.iter().map(|r| lin(r)).collect::<PyResult<_>>()?;
        Ok(RawLayer {
            attention_norm: self.norm(&entry(&norms, "attention", at)?, at)?,
            qkvo,
            feed_forward_norm: self.norm(&entry(&norms, "feed_forward", at)?, at)?,
            gelu_tanh: match kind.as_str() {
                "swiglu" => None,
                k => Some(k == "gelu_tanh"),
            },
            feed_forward,
        })
    }
}

/// What this build's whole-step program decodes: `(norm roles, linear roles, feed-forward
/// kinds, topology flags)`; riftco.tensor's CPU backend refuses a description outside it
/// before compiling, so the model decodes op by op instead.
#[pyfunction]
pub(crate) fn decode_features() -> (
    Vec<&'static str>,
    Vec<&'static str>,
    Vec<&'static str>,
    Vec<&'static str>,
) {
    let mut linears: Vec<&str> = ATTENTION.to_vec();
    for (_, roles) in FEED_FORWARDS {
        for r in roles {
            if !linears.contains(r) {
                linears.push(r);
            }
        }
    }
    (
        NORMS.to_vec(),
        linears,
        FEED_FORWARDS.iter().map(|(k, _)| *k).collect(),
        TOPOLOGY.to_vec(),
    )
}

/// The tile kind of a Q8_0 / Q4_0 format.
fn format_kind(f: BlockFormat) -> TileKind {
    match f {
        BlockFormat::Q8_0 => TileKind::Q8_0,
        _ => TileKind::Q4_0,
    }
}

/// # Safety
/// The tiles behind `t` are alive.
unsafe fn tile_view<'a>(t: Raw, kind: TileKind, r: &RawLinear) -> Tiles<'a> {
    Tiles {
        kind,
        data: t.get(),
        rows: r.rows,
        cols: r.cols,
    }
}

/// # Safety
/// `r`'s arrays are alive.
pub(crate) unsafe fn linear<'a>(r: &RawLinear) -> Linear<'a> {
    let weight = match r.weight {
        RawWeight::F32(w) => Weight::F32(w.get()),
        RawWeight::F32Tiled(w) => Weight::F32Tiled(w.get()),
        RawWeight::F16Tiled(w) => Weight::F16Tiled(w.get()),
        RawWeight::Block(format, data, tiled) => {
            let b = BlockWeight {
                format,
                data: data.get(),
                rows: r.rows,
                cols: r.cols,
            };
            match tiled {
                Some(t) => Weight::TiledBlock(b, tile_view(t, format_kind(format), r)),
                None => Weight::Block(b),
            }
        }
        RawWeight::Nf4 {
            codes,
            scales,
            ranges,
            offset,
            block,
            tiles: tiled,
        } => {
            let w = Nf4Weight {
                codes: codes.get(),
                scales: match ranges {
                    Some(ranges) => Scales::Double {
                        codes: scales.get(),
                        ranges: ranges.get(),
                        offset,
                    },
                    None => Scales::Plain(scales.get()),
                },
                rows: r.rows,
                cols: r.cols,
                block,
            };
            match tiled {
                Some(t) => Weight::TiledNf4(w, tile_view(t, TileKind::Nf4, r)),
                None => Weight::Nf4(w),
            }
        }
    };
    Linear {
        weight,
        rows: r.rows,
        cols: r.cols,
        bias: r.bias.map(|b| b.get()),
    }
}

/// # Safety
/// `r`'s arrays are alive.
pub(crate) unsafe fn norm<'a>(r: &RawNorm) -> NormWeights<'a> {
    NormWeights {
        weight: r.weight.map(|w| w.get()),
        bias: r.bias.map(|b| b.get()),
    }
}
