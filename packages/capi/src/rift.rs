//! The `.rift` bundle reader: the checks riftco-interchange's `read_bundle` and
//! `validate_bundle` make, in the same order (container, header, manifest, identity,
//! tensor count, weights' SHA-256, dtypes and finiteness, the tensors against the
//! configuration), each refusal typed. Reads are bounded: a non-regular file is refused
//! before a byte is read, the header is at most 16 MiB, every offset is checked against
//! the real file, and a configuration implying far more tensors than the file holds is
//! refused before anything is listed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result, Status};
use crate::json::{self, Json};
use crate::model::{Config, ModelData, OwnedLayer, OwnedLinear, OwnedNorm, Source};

/// The largest safetensors header read (riftco-interchange's `MAX_HEADER_BYTES`).
pub const MAX_HEADER_BYTES: u64 = 16 << 20;
/// The largest `metadata` object of a manifest.
pub const MAX_METADATA_BYTES: usize = 1 << 20;

/// Read a regular file's bytes, refusing FIFOs, devices, sockets and folders before reading.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| Error::io(format!("{shown}: {e}")))?;
    if !meta.is_file() {
        return Err(Error::io(format!(
            "{shown}: expected a regular file; found {}",
            kind_of(&meta)
        )));
    }
    if meta.len() > limit {
        return Err(Error::limit(format!(
            "{shown}: {} bytes, past the limit of {limit}",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(meta.len() as usize).map_err(|_| {
        Error::new(
            Status::OutOfMemory,
            format!("{shown}: cannot allocate {} bytes", meta.len()),
        )
    })?;
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Error::io(format!("{shown}: {e}")))?;
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(format!("{shown}: {e}")))?;
    Ok(bytes)
}

/// Open a regular file (FIFOs, devices, sockets and folders refused before a byte is read).
pub fn open_regular(path: &Path) -> Result<(std::fs::File, u64)> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| Error::io(format!("{shown}: {e}")))?;
    if !meta.is_file() {
        return Err(Error::io(format!(
            "{shown}: expected a regular file; found {}",
            kind_of(&meta)
        )));
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io(format!("{shown}: {e}")))?;
    Ok((file, meta.len()))
}

/// The length field and, when it is within bounds, the header of a safetensors file.
fn read_head(file: &mut std::fs::File, file_len: u64, what: &str) -> Result<Vec<u8>> {
    let mut head = vec![0u8; file_len.min(8) as usize];
    read_at(file, 0, &mut head, what)?;
    if head.len() == 8 {
        let n = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        if n <= MAX_HEADER_BYTES && 8 + n <= file_len {
            head.resize(8 + n as usize, 0);
            read_at(file, 8, &mut head[8..], what)?;
        }
    }
    Ok(head)
}

fn read_at(file: &mut std::fs::File, at: u64, buf: &mut [u8], what: &str) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(at))
        .and_then(|_| file.read_exact(buf))
        .map_err(|e| Error::io(format!("{what}: reading {} bytes at {at}: {e}", buf.len())))
}

fn alloc_f32(n: usize, what: &str) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::new(
            Status::OutOfMemory,
            format!("{what}: cannot allocate {n} floats"),
        )
    })?;
    v.resize(n, 0.0);
    Ok(v)
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "something else"
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, fixed notation for decimal
/// exponents in [-4, 16), else `d.ddde+XX`.
pub fn py_float(v: f64) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{:e}", v);
    let (mantissa, exp) = sci.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::from(sign);
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.push_str(&"0".repeat(int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

/// riftco-core's `canonical_json`: sorted keys, `,` and `:`, UTF-8, floats as Python writes them.
pub fn canonical(v: &Json, out: &mut String) {
    match v {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Json::Float(f) => out.push_str(&py_float(*f)),
        Json::Str(s) => json::write_str(out, s),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        Json::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json::write_str(out, k);
                out.push(':');
                canonical(item, out);
            }
            out.push('}');
        }
    }
}

pub fn canonical_string(v: &Json) -> String {
    let mut s = String::new();
    canonical(v, &mut s);
    s
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One tensor of a safetensors file.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub dtype: String,
    pub shape: Vec<usize>,
    pub begin: usize,
    pub end: usize,
}

/// The parsed container: header tensors (sorted by name), metadata, and where the data starts.
pub struct Container {
    pub tensors: BTreeMap<String, TensorInfo>,
    pub metadata: BTreeMap<String, String>,
    pub data_start: usize,
}

fn dtype_size(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "I8" | "U8" | "BOOL" => 1,
        _ => return None,
    })
}

/// Parse and check a safetensors container of `file_len` bytes whose first bytes are
/// `bytes` (at least the length field and the header, when the file holds them).
pub fn parse_container(bytes: &[u8], file_len: u64, what: &str) -> Result<Container> {
    if file_len < 8 || bytes.len() < 8 {
        return Err(Error::format(format!(
            "{what}: truncated: {file_len} bytes, no header length"
        )));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if n > MAX_HEADER_BYTES {
        return Err(Error::limit(format!(
            "{what}: header of {n} bytes, past the limit of {MAX_HEADER_BYTES}"
        )));
    }
    if 8 + n > file_len || 8 + n > bytes.len() as u64 {
        return Err(Error::format(format!(
            "{what}: truncated: the header claims {n} bytes, the file holds {}",
            file_len - 8
        )));
    }
    let data_start = 8 + n as usize;
    let header = json::parse(&bytes[8..data_start], &format!("{what}: header"))?;
    let Json::Object(entries) = header else {
        return Err(Error::format(format!(
            "{what}: the header is {}, expected an object",
            header.kind()
        )));
    };
    let data_len = (file_len - data_start as u64) as usize;
    let mut tensors = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for (name, entry) in entries {
        if name == "__metadata__" {
            let Json::Object(m) = entry else {
                return Err(Error::format(format!(
                    "{what}: __metadata__ is {}, expected an object",
                    entry.kind()
                )));
            };
            for (k, v) in m {
                let Json::Str(s) = v else {
                    return Err(Error::format(format!(
                        "{what}: __metadata__[{k:?}] is {}, expected a string",
                        v.kind()
                    )));
                };
                metadata.insert(k, s);
            }
            continue;
        }
        let at = |m: &str| Error::format(format!("{what}: tensor {name:?}: {m}"));
        let map = entry
            .as_object()
            .ok_or_else(|| at(&format!("expected an object, found {}", entry.kind())))?;
        if let Some(k) = map
            .keys()
            .find(|k| !["dtype", "shape", "data_offsets"].contains(&k.as_str()))
        {
            return Err(at(&format!("unknown field {k:?}")));
        }
        let dtype = map
            .get("dtype")
            .and_then(Json::as_str)
            .ok_or_else(|| at("dtype must be a string"))?
            .to_string();
        let size = dtype_size(&dtype).ok_or_else(|| at(&format!("unknown dtype {dtype:?}")))?;
        let Some(Json::Array(dims)) = map.get("shape") else {
            return Err(at("shape must be an array"));
        };
        let mut shape = Vec::with_capacity(dims.len());
        let mut count: u128 = 1;
        for d in dims {
            let d = d
                .as_i128()
                .filter(|d| (0..=(1i128 << 48)).contains(d))
                .ok_or_else(|| at(&format!("shape entry {} is not a size", show_json(d))))?;
            count = count.saturating_mul(d as u128);
            shape.push(d as usize);
        }
        let Some(Json::Array(offs)) = map.get("data_offsets") else {
            return Err(at("data_offsets must be an array"));
        };
        let (begin, end) = match offs.as_slice() {
            [a, b] => (a.as_i128(), b.as_i128()),
            _ => (None, None),
        };
        let (Some(begin), Some(end)) = (begin, end) else {
            return Err(at("data_offsets must be two integers"));
        };
        if begin < 0 || end < begin || end as u128 > data_len as u128 {
            return Err(at(&format!(
                "data_offsets [{begin}, {end}] outside the {data_len} data bytes"
            )));
        }
        let nbytes = count.saturating_mul(size as u128);
        if nbytes != (end - begin) as u128 {
            return Err(at(&format!(
                "{nbytes} bytes for shape {shape:?} {dtype}, the offsets hold {}",
                end - begin
            )));
        }
        tensors.insert(
            name,
            TensorInfo {
                dtype,
                shape,
                begin: begin as usize,
                end: end as usize,
            },
        );
    }
    let mut spans: Vec<(usize, usize, &str)> = tensors
        .iter()
        .map(|(n, t)| (t.begin, t.end, n.as_str()))
        .collect();
    spans.sort();
    let mut at = 0usize;
    for (b, e, n) in spans {
        if b != at {
            return Err(Error::format(format!(
                "{what}: tensor {n:?} starts at {b}, expected {at} (tensors must be contiguous, without overlap)"
            )));
        }
        at = e;
    }
    if at != data_len {
        return Err(Error::format(format!(
            "{what}: {} trailing bytes after the tensors",
            data_len - at
        )));
    }
    Ok(Container {
        tensors,
        metadata,
        data_start,
    })
}

fn show_json(v: &Json) -> String {
    let s = canonical_string(v);
    if s.len() > 40 {
        format!(
            "{}...",
            &s[..s.char_indices().nth(40).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}

fn manifest_err(m: String) -> Error {
    Error::format(format!("manifest: {m}"))
}

/// Load and fully verify a `.rift` bundle.
pub fn load(path: &Path) -> Result<ModelData> {
    let what = path.display().to_string();
    let (mut file, file_len) = open_regular(path)?;
    let head = read_head(&mut file, file_len, &what)?;
    let container = parse_container(&head, file_len, &what)?;
    drop(head);
    let raw = container.metadata.get("riftco.manifest").ok_or_else(|| {
        Error::format(format!(
            "{what}: no riftco.manifest in the header's __metadata__ (not a .rift bundle)"
        ))
    })?;
    if let Some(k) = container
        .metadata
        .keys()
        .find(|k| k.as_str() != "riftco.manifest")
    {
        return Err(Error::format(format!(
            "{what}: unexpected __metadata__ entry {k:?}"
        )));
    }
    let manifest = json::parse(raw.as_bytes(), &format!("{what}: manifest"))?;
    let Json::Object(fields) = &manifest else {
        return Err(manifest_err(format!(
            "expected an object, found {}",
            manifest.kind()
        )));
    };
    const KEYS: [&str; 9] = [
        "artifact_id",
        "config",
        "format",
        "format_version",
        "metadata",
        "parent_id",
        "stage",
        "tokenizer",
        "weights",
    ];
    let keys: Vec<&str> = fields.keys().map(String::as_str).collect();
    if keys != KEYS {
        return Err(manifest_err(format!(
            "expected the keys {KEYS:?}, found {keys:?}"
        )));
    }
    if fields["format"].as_str() != Some("riftco-interchange/bundle") {
        return Err(manifest_err(format!(
            "format must be \"riftco-interchange/bundle\", found {}",
            show_json(&fields["format"])
        )));
    }
    if fields["format_version"] != Json::Int(1) {
        return Err(Error::unsupported(format!(
            "manifest: format_version {} (this build reads 1)",
            show_json(&fields["format_version"])
        )));
    }
    let artifact_id = fields["artifact_id"]
        .as_str()
        .filter(|s| is_hex64(s))
        .ok_or_else(|| manifest_err("artifact_id must be 64 hex digits".into()))?
        .to_string();
    let stage_ok = fields["stage"].as_str().is_some_and(|s| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && s.as_bytes()[0].is_ascii_lowercase()
    });
    if !stage_ok {
        return Err(manifest_err(format!(
            "stage must be a lowercase identifier, found {}",
            show_json(&fields["stage"])
        )));
    }
    match &fields["parent_id"] {
        Json::Null => {}
        Json::Str(s) if is_hex64(s) => {}
        other => {
            return Err(manifest_err(format!(
                "parent_id must be null or 64 hex digits, found {}",
                show_json(other)
            )))
        }
    }
    let meta = &fields["metadata"];
    if meta.as_object().is_none() {
        return Err(manifest_err(format!(
            "metadata must be an object, found {}",
            meta.kind()
        )));
    }
    if canonical_string(meta).len() > MAX_METADATA_BYTES {
        return Err(Error::limit("manifest: metadata is larger than 1 MiB"));
    }
    // Identity: SHA-256 of the canonical JSON of the manifest without artifact_id.
    let mut rest = fields.clone();
    rest.remove("artifact_id");
    let id = hex(&Sha256::digest(
        canonical_string(&Json::Object(rest)).as_bytes(),
    ));
    if id != artifact_id {
        return Err(Error::checksum(format!(
            "{what}: identity mismatch: artifact_id {artifact_id}, the manifest hashes to {id}"
        )));
    }
    let weights = fields["weights"]
        .as_object()
        .ok_or_else(|| manifest_err("weights must be an object".into()))?;
    let wkeys: Vec<&str> = weights.keys().map(String::as_str).collect();
    if wkeys != ["parameters", "sha256", "tensors"] {
        return Err(manifest_err(format!(
            "weights must have parameters, sha256 and tensors, found {wkeys:?}"
        )));
    }
    let tensors_claimed = weights["tensors"]
        .as_i128()
        .ok_or_else(|| manifest_err("weights.tensors must be an integer".into()))?;
    if tensors_claimed != container.tensors.len() as i128 {
        return Err(Error::format(format!(
            "{what}: the manifest records {tensors_claimed} tensors, the file holds {}",
            container.tensors.len()
        )));
    }
    let config = Config::from_json(&fields["config"])?;
    let expected_count = config.tensor_count();
    if expected_count > container.tensors.len() + 64 {
        return Err(Error::format(format!(
            "tensors disagree with the configuration: it implies {expected_count} tensors (n_layers={}); the file holds {}",
            config.n_layers,
            container.tensors.len()
        )));
    }
    // The weights' digest, in sorted name order, each tensor read once from the file
    // (float32 tensors straight into their arrays: the model is held once in memory).
    let mut h = Sha256::new();
    let mut arrays: BTreeMap<String, Vec<f32>> = BTreeMap::new();
    let mut other_dtype: Option<(&str, &str)> = None;
    let mut parameters: u128 = 0;
    for (name, t) in &container.tensors {
        let mut head = String::from("[");
        json::write_str(&mut head, name);
        head.push(',');
        json::write_str(&mut head, &t.dtype);
        head.push_str(",[");
        for (i, d) in t.shape.iter().enumerate() {
            if i > 0 {
                head.push(',');
            }
            let _ = write!(head, "{d}");
        }
        head.push_str("]]");
        h.update(head.as_bytes());
        let at = (container.data_start + t.begin) as u64;
        let nbytes = t.end - t.begin;
        if t.dtype == "F32" {
            let mut v = alloc_f32(nbytes / 4, &what)?;
            // SAFETY: a float32 vector's memory viewed as its bytes, for reading into.
            let raw = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, nbytes) };
            read_at(&mut file, at, raw, &what)?;
            h.update(&*raw);
            for x in v.iter_mut() {
                *x = f32::from_bits(u32::from_le(x.to_bits()));
            }
            arrays.insert(name.clone(), v);
        } else {
            let mut raw = vec![0u8; nbytes];
            read_at(&mut file, at, &mut raw, &what)?;
            h.update(&raw);
            other_dtype.get_or_insert((name.as_str(), t.dtype.as_str()));
        }
        parameters += t.shape.iter().map(|&d| d as u128).product::<u128>();
    }
    let digest = hex(&h.finalize());
    if weights["sha256"].as_str() != Some(digest.as_str()) {
        return Err(Error::checksum(format!(
            "{what}: weights checksum mismatch: the manifest records {}, the tensors hash to {digest}",
            show_json(&weights["sha256"])
        )));
    }
    if weights["parameters"].as_i128() != Some(parameters as i128) {
        return Err(Error::format(format!(
            "{what}: the manifest records {} parameters, the tensors hold {parameters}",
            show_json(&weights["parameters"])
        )));
    }
    // Every tensor float32 and finite, and exactly those the configuration implies.
    let expected = config.expected_shapes();
    let mut problems = Vec::new();
    for (name, shape) in &expected {
        match container.tensors.get(name) {
            None => problems.push(format!("missing {name}")),
            Some(t) if &t.shape != shape => problems.push(format!(
                "mis-shaped {name} {:?} (expected {shape:?})",
                t.shape
            )),
            Some(_) => {}
        }
    }
    let names: std::collections::HashSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    for name in container.tensors.keys() {
        if !names.contains(name.as_str()) {
            problems.push(format!("unexpected {name}"));
        }
    }
    if !problems.is_empty() {
        problems.truncate(5);
        return Err(Error::format(format!(
            "tensors disagree with the configuration: {}",
            problems.join("; ")
        )));
    }
    if let Some((name, dtype)) = other_dtype {
        return Err(Error::format(format!(
            "{what}: tensor {name} is {dtype}, a bundle holds F32 only"
        )));
    }
    for (name, v) in &arrays {
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(Error::format(format!(
                "{what}: tensor {name} holds {} at element {i} (weights must be finite)",
                v[i]
            )));
        }
    }
    let tokenizer = &fields["tokenizer"];
    if tokenizer.as_object().is_none() {
        return Err(manifest_err(format!(
            "tokenizer must be an object, found {}",
            tokenizer.kind()
        )));
    }
    let mut model = assemble(config, arrays, Source::Rift)?;
    model.artifact_id = artifact_id;
    model.tokenizer_state = Some(canonical_string(tokenizer));
    model.check()?;
    model.tile();
    Ok(model)
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Build a model from float32 arrays under riftco's parameter names (checked against the
/// configuration before).
pub fn assemble(
    config: Config,
    mut a: BTreeMap<String, Vec<f32>>,
    source: Source,
) -> Result<ModelData> {
    let mut take = |name: &str| -> Result<Vec<f32>> {
        a.remove(name)
            .ok_or_else(|| Error::format(format!("missing tensor {name}")))
    };
    let c = config.clone();
    let (d, hd) = (c.d_model, c.head_dim());
    let norm = |take: &mut dyn FnMut(&str) -> Result<Vec<f32>>, p: &str| -> Result<OwnedNorm> {
        Ok(OwnedNorm {
            weight: Some(take(&format!("{p}.weight"))?),
            bias: if c.rms {
                None
            } else {
                Some(take(&format!("{p}.bias"))?)
            },
        })
    };
    let linear = |take: &mut dyn FnMut(&str) -> Result<Vec<f32>>,
                  p: &str,
                  rows: usize,
                  cols: usize|
     -> Result<OwnedLinear> {
        let w = take(&format!("{p}.weight"))?;
        let bias = if c.linear_bias {
            Some(take(&format!("{p}.bias"))?)
        } else {
            None
        };
        Ok(OwnedLinear::f32(w, rows, cols, bias))
    };
    let token_embedding = take("token_embedding.weight")?;
    let position_embedding = if c.rotary {
        None
    } else {
        Some(take("position_embedding.weight")?)
    };
    let mut layers = Vec::with_capacity(c.n_layers);
    let (q, kv) = (c.n_heads * hd, c.kv_heads * hd);
    for i in 0..c.n_layers {
        let b = format!("blocks.{i}");
        let attention_norm = norm(&mut take, &format!("{b}.attention_norm"))?;
        let query = linear(&mut take, &format!("{b}.attention.query"), q, d)?;
        let key = linear(&mut take, &format!("{b}.attention.key"), kv, d)?;
        let value = linear(&mut take, &format!("{b}.attention.value"), kv, d)?;
        let output = linear(&mut take, &format!("{b}.attention.output"), d, q)?;
        let feed_forward_norm = norm(&mut take, &format!("{b}.feed_forward_norm"))?;
        let feed_forward = if c.swiglu {
            vec![
                linear(&mut take, &format!("{b}.feed_forward.gate"), c.d_ff, d)?,
                linear(&mut take, &format!("{b}.feed_forward.up"), c.d_ff, d)?,
                linear(&mut take, &format!("{b}.feed_forward.down"), d, c.d_ff)?,
            ]
        } else {
            vec![
                linear(&mut take, &format!("{b}.feed_forward.expand"), c.d_ff, d)?,
                linear(&mut take, &format!("{b}.feed_forward.project"), d, c.d_ff)?,
            ]
        };
        layers.push(OwnedLayer {
            attention_norm,
            query,
            key,
            value,
            output,
            feed_forward_norm,
            feed_forward,
        });
    }
    let final_norm = norm(&mut take, "final_norm")?;
    let head_bias = if c.head_bias {
        Some(take("language_model_head.bias")?)
    } else {
        None
    };
    let head = if c.tie_embeddings {
        if head_bias.is_some() {
            Some(OwnedLinear::f32(
                token_embedding.clone(),
                c.vocab_size,
                d,
                head_bias,
            ))
        } else {
            None
        }
    } else {
        Some(OwnedLinear::f32(
            take("language_model_head.weight")?,
            c.vocab_size,
            d,
            head_bias,
        ))
    };
    Ok(ModelData {
        config,
        source,
        artifact_id: String::new(),
        tokenizer_state: None,
        token_embedding,
        position_embedding,
        layers,
        final_norm,
        head,
        weight_format: "f32",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr() {
        for (v, s) in [
            (1e-5, "1e-05"),
            (10000.0, "10000.0"),
            (0.02, "0.02"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (123.456, "123.456"),
            (1e-6, "1e-06"),
            (0.0001, "0.0001"),
            (1234567890123456.0, "1234567890123456.0"),
            (-2.5, "-2.5"),
        ] {
            assert_eq!(py_float(v), s);
        }
    }
}
