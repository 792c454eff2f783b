//! GGUF files in llama.cpp's `gpt2` and `llama` conventions (written by riftco or by
//! llama.cpp's converter): the structure checked first with riftco-interchange's fixed
//! limits (tensor and key counts, string and array lengths, a 1 GiB header, names of at
//! most 63 bytes, 1-4 dimensions, every offset and size against the real file, no
//! overlaps), then riftco's integrity records where present (`riftco.digest` over the
//! `riftco.*` keys, `riftco.tensors` over the tensors as stored), then the configuration
//! from llama.cpp's keys and the tensor shapes (reconciled with `riftco.config`). Linear
//! layers stored as F16, Q8_0 or Q4_0 run on the file's own blocks; the embeddings and
//! norms are float32 (quantized embeddings are dequantized); a quantized head runs on its
//! blocks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use riftco_kernels::blockq::{self, f16_to_f32, BlockFormat, BlockWeight};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::json::{self, Json};
use crate::model::{
    Config, ModelData, OwnedLayer, OwnedLinear, OwnedNorm, OwnedWeight, Source, LIMITS,
};
use crate::rift::{canonical, canonical_string, hex, py_float, read_regular};

pub const MAX_TENSORS: u64 = 1 << 16;
pub const MAX_KEYS: u64 = 1 << 16;
pub const MAX_KEY_BYTES: u64 = 1 << 16;
pub const MAX_STRING_BYTES: u64 = 64 << 20;
pub const MAX_ARRAY_ITEMS: u64 = 1 << 24;
pub const MAX_GGUF_HEADER_BYTES: u64 = 1 << 30;
pub const MAX_TENSOR_NAME_BYTES: usize = 63;
pub const MAX_DIMS: u32 = 4;
pub const MAX_ALIGNMENT: u64 = 1 << 20;

/// ggml types: (id, name, block elements, block bytes).
const GGML_TYPES: [(u32, &str, u64, u64); 34] = [
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
];

const VALUE_NAMES: [&str; 13] = [
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
    "UINT64", "INT64", "FLOAT64",
];

fn fixed_size(kind: u32) -> Option<u64> {
    Some(match kind {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        _ => return None,
    })
}

/// A metadata value (string arrays keep only their length).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array { item: u32, len: u64 },
}

#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub kind: u32,
    pub type_name: &'static str,
    /// numpy order (ggml's `ne` reversed).
    pub shape: Vec<usize>,
    pub offset: usize,
    pub nbytes: usize,
}

pub struct GgufFile {
    pub bytes: Vec<u8>,
    pub metadata: BTreeMap<String, (u32, Value)>,
    pub tensors: BTreeMap<String, TensorInfo>,
    pub data_start: usize,
}

impl GgufFile {
    fn data(&self, t: &TensorInfo) -> &[u8] {
        &self.bytes[self.data_start + t.offset..self.data_start + t.offset + t.nbytes]
    }
    fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key).map(|(_, v)| v)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    what: &'a str,
}

impl Reader<'_> {
    fn fail(&self, m: impl std::fmt::Display) -> Error {
        Error::format(format!("{}: {m}", self.what))
    }
    fn take(&mut self, n: u64, what: &str) -> Result<&[u8]> {
        let end = (self.pos as u64)
            .checked_add(n)
            .filter(|&e| e <= self.b.len() as u64);
        let Some(end) = end else {
            return Err(self.fail(format!(
                "truncated: {what} needs {n} bytes at offset {}, the file holds {}",
                self.pos,
                self.b.len()
            )));
        };
        if end > MAX_GGUF_HEADER_BYTES {
            return Err(Error::limit(format!(
                "{}: expected a header of at most {MAX_GGUF_HEADER_BYTES} bytes",
                self.what
            )));
        }
        let s = &self.b[self.pos..end as usize];
        self.pos = end as usize;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8"),
        ))
    }
    fn string(&mut self, what: &str, limit: u64) -> Result<String> {
        let n = self.u64(what)?;
        if n > limit {
            return Err(Error::limit(format!(
                "{}: {what}: expected at most {limit} bytes; found a length of {n}",
                self.what
            )));
        }
        let raw = self.take(n, what)?;
        String::from_utf8(raw.to_vec()).map_err(|e| {
            self.fail(format!(
                "{what}: expected UTF-8; invalid byte at {}",
                e.utf8_error().valid_up_to()
            ))
        })
    }
    fn value(&mut self, key: &str, kind: u32) -> Result<Value> {
        let raw = |r: &mut Self, n| -> Result<Vec<u8>> { Ok(r.take(n, key)?.to_vec()) };
        Ok(match kind {
            0 => Value::Uint(raw(self, 1)?[0] as u64),
            1 => Value::Int(raw(self, 1)?[0] as i8 as i64),
            2 => Value::Uint(u16::from_le_bytes(raw(self, 2)?.try_into().expect("2")) as u64),
            3 => Value::Int(i16::from_le_bytes(raw(self, 2)?.try_into().expect("2")) as i64),
            4 => Value::Uint(u32::from_le_bytes(raw(self, 4)?.try_into().expect("4")) as u64),
            5 => Value::Int(i32::from_le_bytes(raw(self, 4)?.try_into().expect("4")) as i64),
            6 => Value::Float(f32::from_le_bytes(raw(self, 4)?.try_into().expect("4")) as f64),
            7 => Value::Bool(raw(self, 1)?[0] != 0),
            8 => Value::Str(self.string(key, MAX_STRING_BYTES)?),
            9 => {
                let item = self.u32(&format!("the item type of {key}"))?;
                let len = self.u64(&format!("the length of {key}"))?;
                if len > MAX_ARRAY_ITEMS {
                    return Err(Error::limit(format!(
                        "{}: {key}: expected at most {MAX_ARRAY_ITEMS} items; found {len}",
                        self.what
                    )));
                }
                if let Some(size) = fixed_size(item) {
                    self.take(size * len, key)?;
                } else if item == 8 {
                    for i in 0..len {
                        self.string(&format!("{key}[{i}]"), MAX_STRING_BYTES)?;
                    }
                } else {
                    return Err(self.fail(format!(
                        "{key}: expected an array of numbers or strings; item type {item}"
                    )));
                }
                Value::Array { item, len }
            }
            10 => Value::Uint(u64::from_le_bytes(raw(self, 8)?.try_into().expect("8"))),
            11 => Value::Int(i64::from_le_bytes(raw(self, 8)?.try_into().expect("8"))),
            12 => Value::Float(f64::from_le_bytes(raw(self, 8)?.try_into().expect("8"))),
            _ => return Err(self.fail(format!("{key}: unknown value type {kind}"))),
        })
    }
}

/// Read and structurally check a GGUF file.
pub fn scan(path: &Path) -> Result<GgufFile> {
    let what = path.display().to_string();
    let bytes = read_regular(path, u64::MAX)?;
    let mut r = Reader {
        b: &bytes,
        pos: 0,
        what: &what,
    };
    if bytes.is_empty() {
        return Err(r.fail("expected a GGUF file; found an empty file"));
    }
    if r.take(4, "the magic number")? != b"GGUF" {
        return Err(r.fail("expected the GGUF magic b'GGUF'"));
    }
    let version = r.u32("the version")?;
    if version != 2 && version != 3 {
        return Err(Error::unsupported(format!(
            "{what}: expected GGUF version 2 or 3, little-endian; found {version}"
        )));
    }
    let n_tensors = r.u64("the tensor count")?;
    let n_keys = r.u64("the key count")?;
    if n_tensors > MAX_TENSORS || n_keys > MAX_KEYS {
        return Err(Error::limit(format!("{what}: expected at most {MAX_TENSORS} tensors and {MAX_KEYS} keys; found {n_tensors} and {n_keys}")));
    }
    let mut metadata = BTreeMap::new();
    let mut alignment: u64 = 32;
    for i in 0..n_keys {
        let key = r.string(&format!("key {i}"), MAX_KEY_BYTES)?;
        if metadata.contains_key(&key) {
            return Err(r.fail(format!("key {key:?} appears twice")));
        }
        let kind = r.u32(&format!("the type of {key}"))?;
        let value = r.value(&key, kind)?;
        if key == "general.alignment" {
            let Value::Uint(a) = value else {
                return Err(r.fail(format!(
                    "general.alignment: expected a uint32; found type {kind}"
                )));
            };
            if kind != 4 || a == 0 || a > MAX_ALIGNMENT || a & (a - 1) != 0 {
                return Err(r.fail(format!(
                    "general.alignment: expected a power of two up to {MAX_ALIGNMENT}; found {a}"
                )));
            }
            alignment = a;
        }
        metadata.insert(key, (kind, value));
    }
    let mut infos = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let name = r.string(&format!("the name of tensor {i}"), 1 << 16)?;
        if name.len() > MAX_TENSOR_NAME_BYTES {
            return Err(r.fail(format!(
                "tensor {:?}: expected a name of at most {MAX_TENSOR_NAME_BYTES} bytes",
                name.chars().take(80).collect::<String>()
            )));
        }
        let n_dims = r.u32(&format!("the dimension count of {name}"))?;
        if !(1..=MAX_DIMS).contains(&n_dims) {
            return Err(r.fail(format!(
                "{name}: expected 1 to {MAX_DIMS} dimensions; found {n_dims}"
            )));
        }
        let mut ne = Vec::new();
        for _ in 0..n_dims {
            ne.push(r.u64(&format!("a dimension of {name}"))?);
        }
        let kind = r.u32(&format!("the type of {name}"))?;
        let offset = r.u64(&format!("the offset of {name}"))?;
        infos.push((name, kind, ne, offset));
    }
    let data_start = (r.pos as u64).div_ceil(alignment) * alignment;
    if data_start > bytes.len() as u64 {
        return Err(r.fail("truncated: the file ends inside the padding before the data"));
    }
    let available = bytes.len() as u64 - data_start;
    let mut tensors = BTreeMap::new();
    for (name, kind, ne, offset) in infos {
        if tensors.contains_key(&name) {
            return Err(r.fail(format!("tensor {name:?} appears twice")));
        }
        let Some(&(_, type_name, block, size)) = GGML_TYPES.iter().find(|t| t.0 == kind) else {
            return Err(r.fail(format!("{name}: unknown ggml type {kind}")));
        };
        if ne.contains(&0) || ne[0] % block != 0 {
            return Err(r.fail(format!("{name}: expected positive dimensions, the first a multiple of {block} for {type_name}; found ne={ne:?}")));
        }
        let elements = ne.iter().try_fold(1u128, |a, &d| a.checked_mul(d as u128));
        let nbytes = elements.map(|e| e / block as u128 * size as u128);
        let fits = nbytes.is_some_and(|n| offset as u128 + n <= available as u128);
        if offset % alignment != 0 {
            return Err(r.fail(format!(
                "{name}: offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        if !fits {
            return Err(r.fail(format!(
                "{name}: {} bytes at data offset {offset} do not fit the {available} data bytes",
                nbytes.map_or("too many".into(), |n| n.to_string())
            )));
        }
        let shape = ne.iter().rev().map(|&d| d as usize).collect();
        tensors.insert(
            name,
            TensorInfo {
                kind,
                type_name,
                shape,
                offset: offset as usize,
                nbytes: nbytes.expect("fits") as usize,
            },
        );
    }
    let mut spans: Vec<(usize, usize, &str)> = tensors
        .iter()
        .map(|(n, t)| (t.offset, t.nbytes, n.as_str()))
        .collect();
    spans.sort();
    for w in spans.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(r.fail(format!("tensors {} and {} overlap", w[0].2, w[1].2)));
        }
    }
    Ok(GgufFile {
        bytes,
        metadata,
        tensors,
        data_start: data_start as usize,
    })
}

// -- integrity ------------------------------------------------------------------------

fn value_json(kind: u32, v: &Value) -> Result<Json> {
    Ok(match v {
        Value::Uint(u) => Json::Int(*u as i128),
        Value::Int(i) => Json::Int(*i as i128),
        Value::Float(f) if kind == 6 => Json::Float(*f),
        Value::Float(f) => Json::Float(*f),
        Value::Bool(b) => Json::Bool(*b),
        Value::Str(s) => Json::Str(s.clone()),
        Value::Array { .. } => return Err(Error::unsupported("an array-valued riftco.* key")),
    })
}

fn key_digest(key: &str, kind: u32, v: &Value) -> Result<String> {
    let mut s = String::from("[");
    json::write_str(&mut s, key);
    s.push(',');
    json::write_str(
        &mut s,
        VALUE_NAMES.get(kind as usize).copied().unwrap_or("?"),
    );
    s.push(',');
    let value = value_json(kind, v)?;
    if let Json::Float(f) = value {
        s.push_str(&py_float(f));
    } else {
        canonical(&value, &mut s);
    }
    s.push(']');
    Ok(hex(&Sha256::digest(s.as_bytes())))
}

const OLDER_KEYS: [&str; 6] = [
    "riftco.config",
    "riftco.format_version",
    "riftco.lineage",
    "riftco.tensors",
    "riftco.tokenizer",
    "riftco.tokenizer.llama_cpp",
];

fn parse_json_key(f: &GgufFile, key: &str) -> Result<Option<Json>> {
    match f.get(key) {
        None => Ok(None),
        Some(Value::Str(s)) => json::parse(s.as_bytes(), key).map(Some),
        Some(_) => Err(Error::format(format!("{key}: expected a JSON string"))),
    }
}

fn check_metadata(f: &GgufFile) -> Result<()> {
    let keys: Vec<&str> = f
        .metadata
        .keys()
        .filter(|k| k.starts_with("riftco."))
        .map(String::as_str)
        .collect();
    if keys.is_empty() || f.get("general.architecture") == Some(&Value::Str("riftco".into())) {
        return Ok(());
    }
    let Some(digest) = parse_json_key(f, "riftco.digest")? else {
        if keys != OLDER_KEYS {
            return Err(Error::checksum(format!("riftco.* keys without riftco.digest must be exactly {OLDER_KEYS:?}; found {keys:?}")));
        }
        return Ok(());
    };
    let table = digest
        .get("sha256")
        .and_then(Json::as_object)
        .ok_or_else(|| Error::checksum("riftco.digest: expected {\"sha256\": {key: digest}}"))?;
    let covered: BTreeSet<&str> = table.keys().map(String::as_str).collect();
    let present: BTreeSet<&str> = keys
        .iter()
        .copied()
        .filter(|k| *k != "riftco.digest")
        .collect();
    if covered != present {
        let missing: Vec<_> = covered.difference(&present).collect();
        let extra: Vec<_> = present.difference(&covered).collect();
        return Err(Error::checksum(format!(
            "riftco.digest: keys removed {missing:?}, keys not covered {extra:?}"
        )));
    }
    for (key, want) in table {
        let (kind, v) = &f.metadata[key];
        let got = key_digest(key, *kind, v)?;
        if want.as_str() != Some(got.as_str()) {
            return Err(Error::checksum(format!(
                "{key}: its value does not match riftco.digest (the key was changed)"
            )));
        }
    }
    Ok(())
}

fn check_tensors(f: &GgufFile) -> Result<()> {
    let Some(record) = parse_json_key(f, "riftco.tensors")? else {
        return Ok(());
    };
    let fields: BTreeSet<&str> = record
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let allowed: [&[&str]; 3] = [
        &["file_type", "sha256"],
        &["file_type", "layout_sha256", "metadata_digest", "sha256"],
        &[
            "file_type",
            "layout_sha256",
            "metadata_digest",
            "sha256",
            "tensor_sha256",
        ],
    ];
    if !allowed
        .iter()
        .any(|a| a.iter().copied().collect::<BTreeSet<_>>() == fields)
    {
        return Err(Error::format(format!(
            "riftco.tensors: unexpected fields {fields:?}"
        )));
    }
    let mut whole = Sha256::new();
    let mut layout = Sha256::new();
    let mut each = BTreeMap::new();
    for (name, t) in &f.tensors {
        let mut head = String::from("[");
        json::write_str(&mut head, name);
        head.push(',');
        json::write_str(&mut head, t.type_name);
        head.push_str(",[");
        head.push_str(
            &t.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
        head.push_str("]]");
        let data = f.data(t);
        whole.update(head.as_bytes());
        whole.update(data);
        layout.update(head.as_bytes());
        let mut one = Sha256::new();
        one.update(head.as_bytes());
        one.update(data);
        each.insert(name.as_str(), hex(&one.finalize()));
    }
    let (whole, layout) = (hex(&whole.finalize()), hex(&layout.finalize()));
    let found_type = match f.get("general.file_type") {
        Some(Value::Uint(u)) => Some(*u as i128),
        Some(Value::Int(i)) => Some(*i as i128),
        _ => None,
    };
    let same_layout = record.get("layout_sha256").and_then(Json::as_str) == Some(layout.as_str());
    if record.get("file_type").and_then(Json::as_i128) != found_type && !same_layout {
        // Re-encoded by another tool: each tensor still in its recorded type is checked.
        if let Some(Json::Object(per)) = record.get("tensor_sha256") {
            for (name, entry) in per {
                if let (Some(t), Json::Array(pair)) = (f.tensors.get(name), entry) {
                    if pair.first().and_then(Json::as_str) == Some(t.type_name)
                        && pair.get(1).and_then(Json::as_str) != Some(each[name.as_str()].as_str())
                    {
                        return Err(Error::checksum(format!(
                            "{name}: its data does not match riftco.tensors' tensor_sha256"
                        )));
                    }
                }
            }
        }
        return Ok(());
    }
    if record.get("sha256").and_then(Json::as_str) != Some(whole.as_str()) {
        return Err(Error::checksum(format!("tensors: SHA-256 is {whole}; riftco.tensors records another (the tensor data was changed or corrupted)")));
    }
    if record.get("layout_sha256").is_some() && !same_layout {
        return Err(Error::checksum(
            "riftco.tensors: layout_sha256 is not the one of the tensors its sha256 matches",
        ));
    }
    Ok(())
}

// -- the model ------------------------------------------------------------------------

fn count(f: &GgufFile, key: &str) -> Result<usize> {
    match f.get(key) {
        Some(Value::Uint(u)) if *u > 0 => Ok(*u as usize),
        Some(Value::Int(i)) if *i > 0 => Ok(*i as usize),
        other => Err(Error::format(format!(
            "{key}: expected a positive integer; found {other:?}"
        ))),
    }
}

fn number(f: &GgufFile, key: &str, default: f64) -> Result<f64> {
    let v = match f.get(key) {
        None => default,
        Some(Value::Float(x)) => *x,
        Some(Value::Uint(u)) => *u as f64,
        Some(Value::Int(i)) => *i as f64,
        other => {
            return Err(Error::format(format!(
                "{key}: expected a positive number; found {other:?}"
            )))
        }
    };
    if v.is_nan() || v <= 0.0 || !v.is_finite() {
        return Err(Error::format(format!(
            "{key}: expected a positive number; found {v}"
        )));
    }
    // GGUF stores float32: the shortest decimal that rounds to it.
    Ok(format!("{:?}", v as f32).parse().unwrap_or(v))
}

fn config_of(f: &GgufFile) -> Result<Config> {
    let arch = match f.get("general.architecture") {
        Some(Value::Str(s)) if s == "gpt2" || s == "llama" => s.clone(),
        other => {
            return Err(Error::unsupported(format!(
                "general.architecture: libriftco reads 'gpt2' and 'llama'; found {other:?}"
            )))
        }
    };
    for (key, ok) in [
        ("expert_count", "0"),
        ("rope.scaling.type", "none"),
        ("rope.scaling.factor", "1"),
    ] {
        let full = format!("{arch}.{key}");
        let fine = match f.get(&full) {
            None => true,
            Some(Value::Uint(0)) | Some(Value::Int(0)) => ok == "0",
            Some(Value::Str(s)) => s == ok,
            Some(Value::Float(x)) => *x == 1.0 && ok == "1",
            _ => false,
        };
        if !fine {
            return Err(Error::unsupported(format!(
                "{full} is not supported by libriftco"
            )));
        }
    }
    if f.tensors.contains_key("rope_freqs.weight") {
        return Err(Error::unsupported(
            "rope_freqs.weight: rotary frequency scaling is not implemented",
        ));
    }
    let emb = f
        .tensors
        .get("token_embd.weight")
        .filter(|t| t.shape.len() == 2)
        .ok_or_else(|| Error::format("tensors: expected token_embd.weight, a matrix"))?;
    let vocab_size = emb.shape[0];
    if let Some(Value::Array { len, .. }) = f.get("tokenizer.ggml.tokens") {
        if *len as usize != vocab_size {
            return Err(Error::format(format!("tokenizer.ggml.tokens: expected {vocab_size} tokens (the rows of token_embd.weight); found {len}")));
        }
    }
    let d_model = count(f, &format!("{arch}.embedding_length"))?;
    let n_heads = count(f, &format!("{arch}.attention.head_count"))?;
    let kv_heads = match f.get(&format!("{arch}.attention.head_count_kv")) {
        None => n_heads,
        Some(_) => count(f, &format!("{arch}.attention.head_count_kv"))?,
    };
    if d_model % n_heads != 0 {
        return Err(Error::format(format!(
            "{arch}: embedding_length {d_model} is not divisible by head_count {n_heads}"
        )));
    }
    let head_dim = d_model / n_heads;
    let mut lengths = vec!["attention.key_length", "attention.value_length"];
    if arch == "llama" {
        lengths.push("rope.dimension_count");
    }
    for key in lengths {
        let full = format!("{arch}.{key}");
        if f.get(&full).is_some() && count(f, &full)? != head_dim {
            return Err(Error::unsupported(format!("{full} is not supported (libriftco needs embedding_length / head_count = {head_dim})")));
        }
    }
    let gpt = arch == "gpt2";
    if gpt && kv_heads != n_heads {
        return Err(Error::format(format!("gpt2.attention.head_count_kv={kv_heads}: llama.cpp's gpt2 graph has one key/value head per query head ({n_heads})")));
    }
    let context_length = count(f, &format!("{arch}.context_length"))?;
    let n_layers = count(f, &format!("{arch}.block_count"))?;
    let d_ff = count(f, &format!("{arch}.feed_forward_length"))?;
    for (name, v) in [
        ("context_length", context_length),
        ("vocab_size", vocab_size),
        ("d_model", d_model),
        ("d_ff", d_ff),
        ("n_layers", n_layers),
        ("n_heads", n_heads),
    ] {
        let limit = LIMITS
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(i128::MAX, |l| l.1);
        if v as i128 > limit {
            return Err(Error::limit(format!(
                "config: {name} {v} is past the supported {limit}"
            )));
        }
    }
    if n_heads % kv_heads != 0 || (!gpt && head_dim % 2 != 0) {
        return Err(Error::format(format!(
            "{arch}: {n_heads} heads over {kv_heads} key/value heads of {head_dim}"
        )));
    }
    let derived = Config {
        vocab_size,
        context_length,
        d_model,
        n_layers,
        n_heads,
        kv_heads,
        d_ff,
        rms: !gpt,
        norm_eps: if gpt {
            number(f, "gpt2.attention.layer_norm_epsilon", 1e-5)?
        } else {
            number(f, "llama.attention.layer_norm_rms_epsilon", 1e-5)?
        },
        rotary: !gpt,
        rope_theta: if gpt {
            10000.0
        } else {
            number(f, "llama.rope.freq_base", 10000.0)?
        },
        swiglu: !gpt,
        gelu_tanh: gpt,
        linear_bias: gpt,
        head_bias: false,
        tie_embeddings: !f.tensors.contains_key("output.weight"),
        sliding_window: 0,
    };
    // riftco.config restores what llama.cpp's keys cannot say, when it agrees with them.
    let Some(stored) = parse_json_key(f, "riftco.config")? else {
        return Ok(derived);
    };
    let stored = Config::from_json(&stored).map_err(|e| e.context("riftco.config"))?;
    let d = &derived;
    let s = &stored;
    let shared = [
        ("vocab_size", s.vocab_size == d.vocab_size),
        ("context_length", s.context_length == d.context_length),
        ("d_model", s.d_model == d.d_model),
        ("n_layers", s.n_layers == d.n_layers),
        ("n_heads", s.n_heads == d.n_heads),
        ("d_ff", s.d_ff == d.d_ff),
        ("n_kv_heads", s.kv_heads == d.kv_heads),
        ("norm", s.rms == d.rms),
        ("positions", s.rotary == d.rotary),
        ("feed_forward", s.swiglu == d.swiglu),
        ("tie_embeddings", s.tie_embeddings == d.tie_embeddings),
        ("head_bias", s.head_bias == d.head_bias),
        ("sliding_window", s.sliding_window == d.sliding_window),
        (
            if gpt { "gelu" } else { "linear_bias" },
            if gpt {
                s.gelu_tanh == d.gelu_tanh
            } else {
                s.linear_bias == d.linear_bias
            },
        ),
        ("norm_eps", s.norm_eps as f32 == d.norm_eps as f32),
        (
            "rope_theta",
            gpt || s.rope_theta as f32 == d.rope_theta as f32,
        ),
    ];
    if let Some((name, _)) = shared.iter().find(|(_, same)| !same) {
        return Err(Error::format(format!("riftco.config: {name} disagrees with llama.cpp's keys and tensors (the file was changed after export?)")));
    }
    Ok(stored)
}

pub fn f16_bits_to_f32(h: u16) -> f32 {
    f16_to_f32(h)
}

fn block_format(t: &TensorInfo) -> Option<BlockFormat> {
    match t.kind {
        1 => Some(BlockFormat::F16),
        2 => Some(BlockFormat::Q4_0),
        8 => Some(BlockFormat::Q8_0),
        _ => None,
    }
}

struct Loader<'a> {
    f: &'a GgufFile,
    used: BTreeSet<String>,
}

impl Loader<'_> {
    fn info(&mut self, name: &str, shape: &[usize]) -> Result<&TensorInfo> {
        let t = self
            .f
            .tensors
            .get(name)
            .ok_or_else(|| Error::format(format!("tensors: expected {name}")))?;
        if t.shape != shape {
            return Err(Error::format(format!(
                "{name}: expected shape {shape:?} (numpy order); found {:?}",
                t.shape
            )));
        }
        self.used.insert(name.to_string());
        Ok(t)
    }

    /// A tensor as float32 (any supported type; blocks dequantized).
    fn floats(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let t = self.info(name, shape)?.clone();
        let data = self.f.data(&t);
        let v: Vec<f32> = match t.kind {
            0 => data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
                .collect(),
            1 => data
                .chunks_exact(2)
                .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
            30 => data
                .chunks_exact(2)
                .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
                .collect(),
            2 | 8 => {
                let cols = *t.shape.last().expect("dims");
                let rows = t.shape.iter().rev().skip(1).product::<usize>().max(1);
                let w = BlockWeight {
                    format: block_format(&t).expect("block"),
                    data,
                    rows,
                    cols,
                };
                let mut out = vec![0.0f32; rows * cols];
                blockq::dequantize(&w, &mut out)
                    .map_err(|e| Error::format(format!("{name}: {}", e.0)))?;
                out
            }
            _ => return Err(unsupported_type(name, &t)),
        };
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::format(format!(
                "{name}: element {i} is {} (weights must be finite)",
                v[i]
            )));
        }
        Ok(v)
    }

    /// A weight matrix `[rows, cols]` whose row `r` is the stored row `order(r)`.
    fn linear(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        first_row: usize,
        stored_rows: usize,
        order: &dyn Fn(usize) -> usize,
    ) -> Result<OwnedWeight> {
        let t = self.info(name, &[stored_rows, cols])?.clone();
        if let Some(format) = block_format(&t) {
            let data = self.f.data(&t);
            let rb = format.row_bytes(cols);
            let mut out = Vec::with_capacity(rows * rb);
            for r in 0..rows {
                let s = first_row + order(r);
                out.extend_from_slice(&data[s * rb..(s + 1) * rb]);
            }
            if format == BlockFormat::F16 {
                let bad = out
                    .chunks_exact(2)
                    .any(|c| !f16_to_f32(u16::from_le_bytes([c[0], c[1]])).is_finite());
                if bad {
                    return Err(Error::format(format!("{name}: holds a non-finite value")));
                }
            }
            return Ok(OwnedWeight::Block(format, out));
        }
        self.used.remove(name);
        let all = self.floats(name, &[stored_rows, cols])?;
        let mut out = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            let s = first_row + order(r);
            out.extend_from_slice(&all[s * cols..(s + 1) * cols]);
        }
        Ok(OwnedWeight::F32(out))
    }
}

fn unsupported_type(name: &str, t: &TensorInfo) -> Error {
    Error::unsupported(format!(
        "{name} is {}; libriftco reads F32, F16, BF16, Q8_0 and Q4_0 tensors",
        t.type_name
    ))
}

/// llama.cpp's adjacent-pair rotary rows back to split halves: row `h*hd + j*half + k`
/// is the stored row `h*hd + 2k + j`.
fn split_heads(head_dim: usize) -> impl Fn(usize) -> usize {
    let half = head_dim / 2;
    move |r| {
        let (h, i) = (r / head_dim, r % head_dim);
        let (j, k) = (i / half, i % half);
        h * head_dim + 2 * k + j
    }
}

pub fn load(path: &Path) -> Result<ModelData> {
    let f = scan(path)?;
    check_metadata(&f)?;
    check_tensors(&f)?;
    let c = config_of(&f)?;
    let mut l = Loader {
        f: &f,
        used: BTreeSet::new(),
    };
    let (v, d, ff, hd) = (c.vocab_size, c.d_model, c.d_ff, c.head_dim());
    let (q, kv) = (c.n_heads * hd, c.kv_heads * hd);
    let same = |r: usize| r;
    let gpt = !c.rotary;
    let token_embedding = l.floats("token_embd.weight", &[v, d])?;
    let position_embedding = if gpt {
        Some(l.floats("position_embd.weight", &[c.context_length, d])?)
    } else {
        None
    };
    let mut formats = BTreeSet::new();
    let mut layers = Vec::with_capacity(c.n_layers);
    // A bias the configuration does not have must be stored as zeros (llama.cpp's gpt2
    // graph needs the tensors), and is dropped.
    let bias = |l: &mut Loader, name: &str, n: usize, offset: usize| -> Result<Option<Vec<f32>>> {
        if !l.f.tensors.contains_key(name) && !gpt {
            return Ok(None);
        }
        let total =
            l.f.tensors
                .get(name)
                .map_or(n, |t| t.shape.iter().product());
        let all = l.floats(name, &[total])?;
        let part = all
            .get(offset..offset + n)
            .ok_or_else(|| Error::format(format!("{name}: expected {} elements", offset + n)))?
            .to_vec();
        if c.linear_bias {
            Ok(Some(part))
        } else if part.iter().all(|&x| x == 0.0) {
            Ok(None)
        } else {
            Err(Error::format(format!(
                "{name}: the configuration has no linear biases, the file holds a nonzero one"
            )))
        }
    };
    for i in 0..c.n_layers {
        let b = format!("blk.{i}");
        let norm = |l: &mut Loader, p: &str| -> Result<OwnedNorm> {
            Ok(OwnedNorm {
                weight: Some(l.floats(&format!("{b}.{p}.weight"), &[d])?),
                bias: if c.rms {
                    None
                } else {
                    Some(l.floats(&format!("{b}.{p}.bias"), &[d])?)
                },
            })
        };
        let attention_norm = norm(&mut l, "attn_norm")?;
        let feed_forward_norm = norm(&mut l, "ffn_norm")?;
        let mk = |w: OwnedWeight, rows, cols, bias| OwnedLinear {
            weight: w,
            rows,
            cols,
            bias,
        };
        let (query, key, value) = if gpt {
            let name = format!("{b}.attn_qkv.weight");
            let bname = format!("{b}.attn_qkv.bias");
            let mut part = |k: usize| -> Result<OwnedLinear> {
                let w = l.linear(&name, d, d, k * d, 3 * d, &same)?;
                l.used.remove(&bname);
                let bias = bias(&mut l, &bname, d, k * d)?;
                Ok(mk(w, d, d, bias))
            };
            let (a, bb, cc) = (part(0)?, part(1)?, part(2)?);
            l.used.insert(bname);
            (a, bb, cc)
        } else {
            let qw = l.linear(&format!("{b}.attn_q.weight"), q, d, 0, q, &split_heads(hd))?;
            let kw = l.linear(
                &format!("{b}.attn_k.weight"),
                kv,
                d,
                0,
                kv,
                &split_heads(hd),
            )?;
            let vw = l.linear(&format!("{b}.attn_v.weight"), kv, d, 0, kv, &same)?;
            (mk(qw, q, d, None), mk(kw, kv, d, None), mk(vw, kv, d, None))
        };
        let ow = l.linear(&format!("{b}.attn_output.weight"), d, q, 0, d, &same)?;
        let output = mk(
            ow,
            d,
            q,
            if gpt {
                bias(&mut l, &format!("{b}.attn_output.bias"), d, 0)?
            } else {
                None
            },
        );
        let feed_forward = if gpt {
            let up = l.linear(&format!("{b}.ffn_up.weight"), ff, d, 0, ff, &same)?;
            let up_b = bias(&mut l, &format!("{b}.ffn_up.bias"), ff, 0)?;
            let down = l.linear(&format!("{b}.ffn_down.weight"), d, ff, 0, d, &same)?;
            let down_b = bias(&mut l, &format!("{b}.ffn_down.bias"), d, 0)?;
            vec![mk(up, ff, d, up_b), mk(down, d, ff, down_b)]
        } else {
            let gate = l.linear(&format!("{b}.ffn_gate.weight"), ff, d, 0, ff, &same)?;
            let up = l.linear(&format!("{b}.ffn_up.weight"), ff, d, 0, ff, &same)?;
            let down = l.linear(&format!("{b}.ffn_down.weight"), d, ff, 0, d, &same)?;
            vec![
                mk(gate, ff, d, None),
                mk(up, ff, d, None),
                mk(down, d, ff, None),
            ]
        };
        let layer = OwnedLayer {
            attention_norm,
            query,
            key,
            value,
            output,
            feed_forward_norm,
            feed_forward,
        };
        for lin in [&layer.query, &layer.key, &layer.value, &layer.output]
            .into_iter()
            .chain(layer.feed_forward.iter())
        {
            formats.insert(lin.format_name());
        }
        layers.push(layer);
    }
    let final_norm = OwnedNorm {
        weight: Some(l.floats("output_norm.weight", &[d])?),
        bias: if c.rms {
            None
        } else {
            Some(l.floats("output_norm.bias", &[d])?)
        },
    };
    let head_source = if c.tie_embeddings {
        "token_embd.weight"
    } else {
        "output.weight"
    };
    let head_info = f
        .tensors
        .get(head_source)
        .cloned()
        .ok_or_else(|| Error::format(format!("tensors: expected {head_source}")))?;
    let head = if block_format(&head_info).is_some() {
        let w = l.linear(head_source, v, d, 0, v, &same)?;
        Some(OwnedLinear {
            weight: w,
            rows: v,
            cols: d,
            bias: None,
        })
    } else if c.tie_embeddings {
        None
    } else {
        Some(OwnedLinear::f32(
            l.floats("output.weight", &[v, d])?,
            v,
            d,
            None,
        ))
    };
    if let Some(extra) = f.tensors.keys().find(|n| !l.used.contains(*n)) {
        return Err(Error::format(format!(
            "tensors: unexpected {extra} (not part of a {} model)",
            if gpt { "gpt2" } else { "llama" }
        )));
    }
    let tokenizer_state = match f.get("riftco.tokenizer") {
        Some(Value::Str(s)) => Some(canonical_string(&json::parse(
            s.as_bytes(),
            "riftco.tokenizer",
        )?)),
        _ => None,
    };
    let artifact_id = parse_json_key(&f, "riftco.lineage")?
        .and_then(|j| {
            j.get("artifact_id")
                .and_then(Json::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default();
    let weight_format = match (formats.len(), formats.iter().next()) {
        (1, Some(&name)) => name,
        _ => "mixed",
    };
    let mut model = ModelData {
        config: c,
        source: Source::Gguf,
        artifact_id,
        tokenizer_state,
        token_embedding,
        position_embedding,
        layers,
        final_norm,
        head,
        weight_format,
    };
    model.check()?;
    model.tile();
    Ok(model)
}
