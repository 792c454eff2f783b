//! Reading a tokenizer from a file, in bounded memory: a tokenizer state JSON file
//! (riftco-text's `save`) or a `.rift` bundle, of which only the safetensors header is
//! read (the manifest lives in its `__metadata__` under `riftco.manifest`).
//!
//! FIFOs, devices, sockets and folders are refused before a byte is read (the file is
//! opened without blocking), and no more than the limits below is ever read.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, ErrorKind, Result};
use crate::json::{self, Value};
use crate::{state, Tokenizer};

/// Largest tokenizer state file read (riftco-text's `MAX_STATE_BYTES`).
pub const MAX_STATE_BYTES: u64 = 1 << 28;
/// Largest safetensors header read (riftco-interchange's `MAX_HEADER_BYTES`).
pub const MAX_HEADER_BYTES: u64 = 16 << 20;
pub const BUNDLE_FORMAT: &str = "riftco-interchange/bundle";
pub const MANIFEST_KEY: &str = "riftco.manifest";

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("{}: cannot read: {e}", path.display()),
    )
}

fn open_regular(path: &Path) -> Result<(File, u64)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(0o4000); // O_NONBLOCK: opening a FIFO does not wait for a writer
    }
    let file = options.open(path).map_err(|e| io(path, e))?;
    let meta = file.metadata().map_err(|e| io(path, e))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a folder"
        } else {
            "a special file (FIFO, device or socket)"
        };
        return Err(Error::new(
            ErrorKind::Io,
            format!("{}: expected a regular file; found {kind}", path.display()),
        ));
    }
    Ok((file, meta.len()))
}

fn read_exact_bounded(file: &mut File, path: &Path, n: u64) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    file.take(n)
        .read_to_end(&mut buf)
        .map_err(|e| io(path, e))?;
    if (buf.len() as u64) < n {
        return Err(Error::format(format!(
            "{}: expected {n} bytes; the file ended after {}",
            path.display(),
            buf.len()
        )));
    }
    Ok(buf)
}

/// Load the tokenizer of a `.rift` bundle or of a tokenizer state file (told apart by
/// their first byte: a state file is JSON, an object).
pub fn load(path: &Path) -> Result<Tokenizer> {
    let prefix = path.display().to_string();
    match read(path)? {
        Source::State(raw) => from_json(&raw),
        Source::Manifest(text) => from_manifest(&text),
    }
    .map_err(|e| e.context(&prefix))
}

/// What a tokenizer file holds, read in bounded memory.
pub enum Source {
    /// A tokenizer state document (JSON bytes).
    State(Vec<u8>),
    /// The manifest text of a `.rift` bundle (from its safetensors header).
    Manifest(String),
}

/// Read a tokenizer state file whole, or a `.rift` bundle's header and its manifest text.
pub fn read(path: &Path) -> Result<Source> {
    let (mut file, size) = open_regular(path)?;
    let mut head = [0u8; 1];
    let n = file.read(&mut head).map_err(|e| io(path, e))?;
    let prefix = path.display().to_string();
    if n == 1 && matches!(head[0], b'{' | b' ' | b'\t' | b'\n' | b'\r') {
        if size > MAX_STATE_BYTES {
            return Err(Error::limit(format!(
                "{prefix}: expected at most {MAX_STATE_BYTES} bytes; found {size}"
            )));
        }
        let mut raw = head[..n].to_vec();
        raw.extend(read_exact_bounded(&mut file, path, size - 1)?);
        return Ok(Source::State(raw));
    }
    let mut rest = [0u8; 7];
    let got = file.read(&mut rest).map_err(|e| io(path, e))?;
    if n + got < 8 {
        return Err(Error::format(format!(
            "{prefix}: expected a .rift bundle (a safetensors file) or a tokenizer state (JSON); found {size} bytes"
        )));
    }
    let mut len_bytes = [0u8; 8];
    len_bytes[0] = head[0];
    len_bytes[1..].copy_from_slice(&rest);
    let header_size = u64::from_le_bytes(len_bytes);
    if header_size > MAX_HEADER_BYTES {
        return Err(Error::limit(format!(
            "{prefix}: header: expected at most {MAX_HEADER_BYTES} bytes; found {header_size} (not a .rift bundle?)"
        )));
    }
    if 8 + header_size > size {
        return Err(Error::format(format!(
            "{prefix}: header: expected {header_size} bytes after the length; the file has {} (truncated?)",
            size - 8
        )));
    }
    let header = read_exact_bounded(&mut file, path, header_size)?;
    manifest_text(&header)
        .map(Source::Manifest)
        .map_err(|e| e.context(&prefix))
}

/// The tokenizer of a tokenizer state document.
pub fn from_json(raw: &[u8]) -> Result<Tokenizer> {
    state::from_state(&json::parse(raw)?)
}

/// The tokenizer in the manifest of a `.rift` bundle's safetensors header (the JSON
/// after the 8-byte length): [`manifest_text`] then [`from_manifest`].
pub fn from_safetensors_header(header: &[u8]) -> Result<Tokenizer> {
    from_manifest(&manifest_text(header)?)
}

/// The manifest text stored in a safetensors header's `__metadata__`.
pub fn manifest_text(header: &[u8]) -> Result<String> {
    let header = json::parse(header).map_err(|e| e.context("header"))?;
    let Value::Object(_) = header else {
        return Err(Error::format(format!(
            "header: expected an object; found {}",
            header.kind()
        )));
    };
    let metadata = match header.get("__metadata__") {
        Some(m @ Value::Object(_)) => m,
        Some(other) => return Err(Error::format(format!("header: __metadata__: expected an object; found {}", other.kind()))),
        None => {
            return Err(Error::format(format!(
                "expected a {MANIFEST_KEY:?} metadata entry; found no __metadata__ (a plain safetensors file, not a .rift bundle?)"
            )))
        }
    };
    match metadata.get(MANIFEST_KEY) {
        Some(Value::Str(s)) => Ok(s.clone()),
        Some(other) => Err(Error::format(format!(
            "{MANIFEST_KEY}: expected a string; found {}",
            other.kind()
        ))),
        None => Err(Error::format(format!(
            "expected a {MANIFEST_KEY:?} metadata entry; found none (a plain safetensors file, not a .rift bundle?)"
        ))),
    }
}

/// The tokenizer of a bundle's manifest text. The manifest's format and version are
/// checked and its tokenizer state is checked in full; the manifest's identity
/// (`artifact_id`) is libriftco's to verify (with the canonical JSON its model loader uses)
/// and the weights are the model loader's.
pub fn from_manifest(text: &str) -> Result<Tokenizer> {
    let manifest = json::parse(text.as_bytes()).map_err(|e| e.context("manifest"))?;
    match manifest.get("format") {
        Some(Value::Str(f)) if f == BUNDLE_FORMAT => {}
        _ => {
            return Err(Error::format(format!(
                "manifest: format: expected {BUNDLE_FORMAT:?}"
            )))
        }
    }
    match manifest.get("format_version") {
        Some(Value::Int(1)) => {}
        Some(Value::Int(v)) if *v > 1 => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("manifest: format_version: expected 1; found {v} (written by a newer riftco-interchange)"),
            ))
        }
        _ => return Err(Error::format("manifest: format_version: expected the integer 1")),
    }
    let state = manifest
        .get("tokenizer")
        .ok_or_else(|| Error::format("manifest: expected a \"tokenizer\" entry"))?;
    state::from_state(state).map_err(|e| e.context("manifest: tokenizer"))
}
