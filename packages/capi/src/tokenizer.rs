//! The tokenizer through the C ABI: `riftco_tokenizer_*`, over the `riftco-tokenizer` crate
//! (riftco-text's tokenizers in Rust, equal to it id for id).
//!
//! Output buffers follow one convention: the caller passes `out` with room for `cap` items and
//! `n_out`. With `cap == 0` nothing is written (`out` may be NULL) and `*n_out` is set to the
//! number of items the result has: the size query. With `cap` at least that number, the result
//! is written and `*n_out` is its length. With a smaller nonzero `cap` nothing is written,
//! `*n_out` is the size needed and the call returns `RIFTCO_STATUS_INVALID_ARGUMENT`.
//!
//! The decoder's `push` and `flush` change state, so for them `cap == 0` is no query: a result
//! that fits (none, or 0 bytes) is taken and the call succeeds; one that does not fit, at any
//! `cap`, is refused with `RIFTCO_STATUS_INVALID_ARGUMENT`, `*n_out` the size needed and the
//! decoder unchanged (retry the same id with a larger buffer). A buffer of
//! `RIFTCO_TOKENIZER_MAX_PUSH_BYTES` always fits.

use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::Arc;

use riftco_tokenizer::{file, Decoder, ErrorKind, Tokenizer};

use crate::error::{guard, in_slice, out_ptr, out_slice, Error, Result, Status};
use crate::handle::{self, tag, Handle};

/// A loaded tokenizer (riftco-text's byte or byte-level BPE tokenizer, equal to it id for id).
/// Immutable: any number of threads may use one handle at the same time (all functions but
/// `riftco_tokenizer_free` only read it). Decoders made from it keep it alive, so it may be
/// freed before them.
///
/// Output buffers of the `riftco_tokenizer_*` functions: the caller passes `out` with room for
/// `cap` items, and `n_out`. With `cap == 0` nothing is written (`out` may be NULL) and
/// `*n_out` is the number of items of the result: the size query. With `cap` at least that,
/// the result is written and `*n_out` is its length. With a smaller nonzero `cap` nothing is
/// written, `*n_out` is the size needed and the call returns `RIFTCO_STATUS_INVALID_ARGUMENT`.
/// The decoder's push and flush change state, so for them `cap == 0` is no query: see
/// `riftco_tokenizer_decoder_push`.
pub struct RiftcoTokenizer {
    _opaque: [u8; 0],
}

/// A streaming decoder of one sequence. Not thread-safe: use one decoder from one thread at
/// a time (different decoders may run on different threads).
pub struct RiftcoTokenDecoder {
    _opaque: [u8; 0],
}

unsafe impl Handle for RiftcoTokenizer {
    type Inner = Arc<Tokenizer>;
    const TAG: u64 = tag(b"tokn");
    const NAME: &'static str = "RiftcoTokenizer";
}

unsafe impl Handle for RiftcoTokenDecoder {
    type Inner = Decoder;
    const TAG: u64 = tag(b"tokd");
    const NAME: &'static str = "RiftcoTokenDecoder";
}

/// `riftco_tokenizer_encode` flag: recognise special-token text (riftco-text's
/// `encode(text, allow_special=True)`); without it special-token text is ordinary text.
pub const RIFTCO_ENCODE_ALLOW_SPECIAL: u32 = 1;
/// `riftco_tokenizer_encode` flag: the input is any bytes, not necessarily UTF-8 (riftco-text's
/// `encode_bytes`); special tokens are never recognised, so it excludes ALLOW_SPECIAL.
pub const RIFTCO_ENCODE_BYTES: u32 = 2;
/// `riftco_tokenizer_decode` and `riftco_tokenizer_decoder_new` flag: leave special tokens out.
pub const RIFTCO_DECODE_SKIP_SPECIAL: u32 = 1;
/// `riftco_tokenizer_decode` flag: write valid UTF-8, each invalid sequence as U+FFFD
/// (riftco-text's `decode`); without it the bytes are exact (`decode_bytes`).
pub const RIFTCO_DECODE_REPLACE_INVALID: u32 = 2;
/// The most bytes one `riftco_tokenizer_decoder_push` or `_flush` releases: every byte of the
/// longest token (65,536) and the 3 held back, each at worst a 3-byte U+FFFD.
pub const RIFTCO_TOKENIZER_MAX_PUSH_BYTES: usize = 196617;
const _: () =
    assert!(RIFTCO_TOKENIZER_MAX_PUSH_BYTES == 3 * (riftco_tokenizer::MAX_TOKEN_BYTES + 3));

fn typed(e: riftco_tokenizer::Error) -> Error {
    let status = match e.kind {
        ErrorKind::Io => Status::Io,
        ErrorKind::Format => Status::Format,
        ErrorKind::Unsupported => Status::Unsupported,
        ErrorKind::Limit => Status::Limit,
        ErrorKind::Invalid => Status::InvalidArgument,
    };
    Error::new(status, e.message)
}

fn check_flags(flags: u32, known: u32, function: &str) -> Result<()> {
    if flags & !known != 0 {
        return Err(Error::invalid(format!(
            "{function}: unknown flags 0x{:x}; expected a combination of 0x{known:x}",
            flags & !known
        )));
    }
    Ok(())
}

/// Write `items` under the buffer convention of this module.
///
/// # Safety
/// `out` must be NULL or point to `cap` writable items; `n_out` NULL or writable.
unsafe fn deliver<T: Copy>(
    items: &[T],
    out: *mut T,
    cap: usize,
    n_out: *mut usize,
    what: &str,
) -> Result<()> {
    let n_out = out_ptr(n_out, "n_out")?;
    *n_out = items.len();
    if cap == 0 {
        return Ok(());
    }
    if cap < items.len() {
        return Err(Error::invalid(format!(
            "{what}: the output buffer holds {cap} items; the result needs {} (pass cap 0 to ask)",
            items.len()
        )));
    }
    out_slice(out, cap, "out")?[..items.len()].copy_from_slice(items);
    Ok(())
}

/// Write `bytes` if they fit in `cap` (a stateful call: `cap == 0` is no query); `Ok(true)` when
/// written, so that the caller commits its state change.
///
/// # Safety
/// As [`deliver`].
unsafe fn deliver_if_fits(
    bytes: &[u8],
    out: *mut u8,
    cap: usize,
    n_out: *mut usize,
    what: &str,
) -> Result<()> {
    let n_out = out_ptr(n_out, "n_out")?;
    *n_out = bytes.len();
    if bytes.len() > cap {
        return Err(Error::invalid(format!(
            "{what}: the output buffer holds {cap} bytes; the text released needs {} (the decoder \
             is unchanged: retry with a larger buffer)",
            bytes.len()
        )));
    }
    out_slice(out, cap, "out")?[..bytes.len()].copy_from_slice(bytes);
    Ok(())
}

/// Read a caller's NUL-terminated path (any bytes on Unix).
unsafe fn in_path(ptr: *const c_char) -> Result<PathBuf> {
    if ptr.is_null() {
        return Err(Error::null("path"));
    }
    let bytes = std::ffi::CStr::from_ptr(ptr).to_bytes();
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        std::str::from_utf8(bytes).map(PathBuf::from).map_err(|e| {
            Error::invalid(format!(
                "path is not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ))
        })
    }
}

fn utf8<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let at = e.valid_up_to();
        Error::invalid(format!(
            "{what}: expected UTF-8 text; found the invalid byte 0x{:02x} at byte offset {at}",
            bytes[at]
        ))
    })
}

/// Load the tokenizer of a `.rift` bundle, or a tokenizer state file written by riftco-text's
/// `Tokenizer.save` (JSON), told apart by the file's first byte. Reads at most the bundle's
/// safetensors header (16 MiB) or the state file (256 MiB); FIFOs, devices and folders are
/// refused before a byte is read. The state is checked as riftco-text checks it: a malformed
/// field is `RIFTCO_STATUS_FORMAT`, a newer format version `RIFTCO_STATUS_UNSUPPORTED`, a size
/// over a bound `RIFTCO_STATUS_LIMIT`, an unreadable file `RIFTCO_STATUS_IO`; the message names
/// the field, what was expected and what was found. On success `*out` is a new handle to free
/// with `riftco_tokenizer_free`; on failure `*out` is NULL.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_load(
    path: *const c_char,
    out: *mut *mut RiftcoTokenizer,
) -> Status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let path = in_path(path)?;
        let what = path.display().to_string();
        let tok = match file::read(&path).map_err(typed)? {
            file::Source::State(raw) => file::from_json(&raw),
            file::Source::Manifest(text) => {
                verify_identity(&text, &what)?;
                file::from_manifest(&text)
            }
        }
        .map_err(|e| typed(e.context(&what)))?;
        *out = handle::new(Arc::new(tok));
        Ok(())
    })
}

/// A bundle manifest's `artifact_id` against the SHA-256 of its canonical JSON without it,
/// as riftco-interchange's `read_manifest` checks it (and the model loader, with the same
/// canonical JSON).
fn verify_identity(text: &str, what: &str) -> Result<()> {
    use sha2::{Digest, Sha256};

    let manifest = crate::json::parse(text.as_bytes(), &format!("{what}: manifest"))?;
    let crate::json::Json::Object(mut fields) = manifest else {
        return Err(Error::format(format!(
            "{what}: manifest: expected an object; found {}",
            manifest.kind()
        )));
    };
    let claimed = match fields.remove("artifact_id") {
        Some(crate::json::Json::Str(s))
            if s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
        {
            s
        }
        _ => {
            return Err(Error::format(format!(
                "{what}: manifest: artifact_id: expected 64 lowercase hex digits"
            )))
        }
    };
    let canonical = crate::rift::canonical_string(&crate::json::Json::Object(fields));
    let id = crate::rift::hex(&Sha256::digest(canonical.as_bytes()));
    if id != claimed {
        return Err(Error::checksum(format!(
            "{what}: artifact_id: the manifest hashes to {id}; the file claims {claimed} \
             (the manifest was changed after it was written)"
        )));
    }
    Ok(())
}

/// Load a tokenizer from a tokenizer state document in memory (`len` bytes of JSON, as
/// riftco-text's `Tokenizer.to_state()` / `save` write it), checked as `riftco_tokenizer_load`
/// checks a file. `*out` is a new handle, NULL on failure.
///
/// # Safety
/// `data` must point to `len` readable bytes (NULL only when `len` is 0); `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_load_json(
    data: *const u8,
    len: usize,
    out: *mut *mut RiftcoTokenizer,
) -> Status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let data = in_slice(data, len, "data")?;
        if len as u64 > file::MAX_STATE_BYTES {
            return Err(Error::limit(format!(
                "expected a tokenizer state of at most {} bytes; found {len}",
                file::MAX_STATE_BYTES
            )));
        }
        *out = handle::new(Arc::new(file::from_json(data).map_err(typed)?));
        Ok(())
    })
}

/// Free a tokenizer handle. NULL is a no-op. Decoders made from it stay usable.
///
/// # Safety
/// `tok` must be NULL or a live handle from `riftco_tokenizer_load*`, used by no other thread.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_free(tok: *mut RiftcoTokenizer) -> Status {
    guard(|| handle::free(tok))
}

/// `*out` = the number of ids, special tokens included (ids are `0 .. *out - 1`).
///
/// # Safety
/// `tok` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_vocab_size(
    tok: *const RiftcoTokenizer,
    out: *mut u32,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        *out_ptr(out, "out")? = tok.vocab_size() as u32;
        Ok(())
    })
}

/// `*out` = the number of ordinary ids (bytes and merges); special ids start here.
///
/// # Safety
/// `tok` must be NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_base_vocab_size(
    tok: *const RiftcoTokenizer,
    out: *mut u32,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        *out_ptr(out, "out")? = tok.base_vocab_size() as u32;
        Ok(())
    })
}

/// Encode `len` bytes of `text` to ids, as riftco-text does. `flags`: 0 (the text must be
/// UTF-8; special-token text is ordinary text), `RIFTCO_ENCODE_ALLOW_SPECIAL` (special tokens
/// recognised, the longest match first) or `RIFTCO_ENCODE_BYTES` (any bytes). Text that is not
/// UTF-8 without `RIFTCO_ENCODE_BYTES`, or a byte a byte tokenizer lacks, is
/// `RIFTCO_STATUS_INVALID_ARGUMENT` naming the byte offset. Ids go to `out_ids` under the
/// buffer convention of `RiftcoTokenizer` (`cap` 0: `*n_out` = the number of ids).
///
/// # Safety
/// `tok` NULL or a live handle; `text` `len` readable bytes (NULL when `len` is 0);
/// `out_ids` NULL or `cap` writable ids; `n_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_encode(
    tok: *const RiftcoTokenizer,
    text: *const u8,
    len: usize,
    flags: u32,
    out_ids: *mut u32,
    cap: usize,
    n_out: *mut usize,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        check_flags(
            flags,
            RIFTCO_ENCODE_ALLOW_SPECIAL | RIFTCO_ENCODE_BYTES,
            "riftco_tokenizer_encode",
        )?;
        let data = in_slice(text, len, "text")?;
        let ids = if flags & RIFTCO_ENCODE_BYTES != 0 {
            if flags & RIFTCO_ENCODE_ALLOW_SPECIAL != 0 {
                return Err(Error::invalid(
                    "riftco_tokenizer_encode: RIFTCO_ENCODE_BYTES never recognises special tokens; \
                     expected it without RIFTCO_ENCODE_ALLOW_SPECIAL",
                ));
            }
            tok.encode_bytes(data)
        } else {
            tok.encode(
                utf8(data, "riftco_tokenizer_encode")?,
                flags & RIFTCO_ENCODE_ALLOW_SPECIAL != 0,
            )
        }
        .map_err(typed)?;
        deliver(&ids, out_ids, cap, n_out, "riftco_tokenizer_encode")
    })
}

/// Decode `n_ids` ids to bytes. `flags`: `RIFTCO_DECODE_SKIP_SPECIAL` leaves special tokens out
/// (otherwise they are their text); `RIFTCO_DECODE_REPLACE_INVALID` writes valid UTF-8 with
/// U+FFFD for invalid sequences (riftco-text's `decode`), otherwise the bytes are exact
/// (`decode_bytes`). No NUL is appended. An id outside the vocabulary is
/// `RIFTCO_STATUS_INVALID_ARGUMENT` naming its position. Bytes go to `out` under the buffer
/// convention of `RiftcoTokenizer`.
///
/// # Safety
/// `tok` NULL or a live handle; `ids` `n_ids` readable ids; `out` NULL or `cap` writable bytes;
/// `n_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_decode(
    tok: *const RiftcoTokenizer,
    ids: *const u32,
    n_ids: usize,
    flags: u32,
    out: *mut u8,
    cap: usize,
    n_out: *mut usize,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        check_flags(
            flags,
            RIFTCO_DECODE_SKIP_SPECIAL | RIFTCO_DECODE_REPLACE_INVALID,
            "riftco_tokenizer_decode",
        )?;
        let ids = in_slice(ids, n_ids, "ids")?;
        let skip = flags & RIFTCO_DECODE_SKIP_SPECIAL != 0;
        let bytes = if flags & RIFTCO_DECODE_REPLACE_INVALID != 0 {
            tok.decode(ids, skip).map(String::into_bytes)
        } else {
            tok.decode_bytes(ids, skip)
        }
        .map_err(typed)?;
        deliver(&bytes, out, cap, n_out, "riftco_tokenizer_decode")
    })
}

/// The bytes one id stands for (a special token as its UTF-8 text), under the buffer convention
/// of `RiftcoTokenizer`. At most 65,536 bytes for an ordinary id, 1,024 for a special one.
///
/// # Safety
/// `tok` NULL or a live handle; `out` NULL or `cap` writable bytes; `n_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_token_bytes(
    tok: *const RiftcoTokenizer,
    id: u32,
    out: *mut u8,
    cap: usize,
    n_out: *mut usize,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        let bytes = tok.token_bytes(id).ok_or_else(|| {
            Error::invalid(format!(
                "expected an id in [0, {}); found {id}",
                tok.vocab_size()
            ))
        })?;
        deliver(bytes, out, cap, n_out, "riftco_tokenizer_token_bytes")
    })
}

/// `*out_id` = the id of the special token whose text is the NUL-terminated UTF-8 string
/// `token` (for example `"<|endoftext|>"`); `RIFTCO_STATUS_INVALID_ARGUMENT` naming the
/// tokenizer's special tokens when it has no such token.
///
/// # Safety
/// `tok` NULL or a live handle; `token` NULL or NUL-terminated; `out_id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_special_token(
    tok: *const RiftcoTokenizer,
    token: *const c_char,
    out_id: *mut u32,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        let text = crate::error::in_str(token, "token")?;
        let out_id = out_ptr(out_id, "out_id")?;
        *out_id = tok.special_id(text).ok_or_else(|| {
            Error::invalid(format!(
                "expected one of the special tokens {:?}; found {text:?}",
                tok.special_tokens()
            ))
        })?;
        Ok(())
    })
}

/// `*out_id` = the end-of-text id; `RIFTCO_STATUS_INVALID_ARGUMENT` if the tokenizer has none.
///
/// # Safety
/// `tok` NULL or a live handle; `out_id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_eos_id(
    tok: *const RiftcoTokenizer,
    out_id: *mut u32,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        let out_id = out_ptr(out_id, "out_id")?;
        *out_id = tok.eos_id().ok_or_else(|| {
            Error::invalid(format!(
                "this tokenizer has no end-of-text token; its special tokens are {:?}",
                tok.special_tokens()
            ))
        })?;
        Ok(())
    })
}

/// The ids that end generated text, as riftco-text's `stop_ids(chat)`: the end-of-text id (if
/// any) and, with `chat` and a chat template, every special token the template writes (the
/// assistant's end marker first, then the role markers). Under the buffer convention of `RiftcoTokenizer`.
///
/// # Safety
/// `tok` NULL or a live handle; `out_ids` NULL or `cap` writable ids; `n_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_stop_ids(
    tok: *const RiftcoTokenizer,
    chat: bool,
    out_ids: *mut u32,
    cap: usize,
    n_out: *mut usize,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        deliver(
            &tok.stop_ids(chat),
            out_ids,
            cap,
            n_out,
            "riftco_tokenizer_stop_ids",
        )
    })
}

/// The ids of `n_messages` chat messages through the tokenizer's chat template, as
/// riftco-text's `apply_chat_template(messages, add_generation_prompt).ids`: each message
/// `prefix + content + suffix` of its role, template text with special tokens recognised,
/// content never (so content cannot forge a role marker); a message of the template's tool
/// role has its content wrapped in the result markers. `roles[i]` is a NUL-terminated UTF-8
/// role name; `contents[i]` is UTF-8 of `content_lens[i]` bytes, or NUL-terminated when
/// `content_lens` is NULL. An unknown role, content that is not UTF-8, or a tokenizer without a
/// template is `RIFTCO_STATUS_INVALID_ARGUMENT`. Under the buffer convention of `RiftcoTokenizer`.
///
/// # Safety
/// `tok` NULL or a live handle; `roles` and `contents` `n_messages` readable pointers each
/// (NULL when `n_messages` is 0), each a valid string as described; `content_lens` NULL or
/// `n_messages` readable lengths; `out_ids` NULL or `cap` writable ids; `n_out` NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn riftco_tokenizer_apply_chat_template(
    tok: *const RiftcoTokenizer,
    roles: *const *const c_char,
    contents: *const *const c_char,
    content_lens: *const usize,
    n_messages: usize,
    add_generation_prompt: bool,
    out_ids: *mut u32,
    cap: usize,
    n_out: *mut usize,
) -> Status {
    guard(|| {
        let tok = handle::get(tok)?;
        let roles = in_slice(roles, n_messages, "roles")?;
        let contents = in_slice(contents, n_messages, "contents")?;
        let lens = if content_lens.is_null() {
            None
        } else {
            Some(in_slice(content_lens, n_messages, "content_lens")?)
        };
        let mut messages = Vec::with_capacity(n_messages);
        for k in 0..n_messages {
            let role = crate::error::in_str(roles[k], &format!("roles[{k}]"))?;
            let content = match lens {
                Some(lens) => {
                    let bytes =
                        in_slice(contents[k] as *const u8, lens[k], &format!("contents[{k}]"))?;
                    utf8(bytes, &format!("contents[{k}]"))?
                }
                None => crate::error::in_str(contents[k], &format!("contents[{k}]"))?,
            };
            messages.push((role, content));
        }
        let encoding = tok
            .apply_chat_template(&messages, add_generation_prompt)
            .map_err(typed)?;
        deliver(
            &encoding.ids,
            out_ids,
            cap,
            n_out,
            "riftco_tokenizer_apply_chat_template",
        )
    })
}

/// A new streaming decoder over `tok`: feed it ids with `riftco_tokenizer_decoder_push` and
/// it releases text that is always valid UTF-8. The bytes of byte-level tokens can split a
/// character; an incomplete sequence at the end is held back (at most 3 bytes) until the next
/// token completes it, and invalid bytes become U+FFFD, exactly what Python's incremental
/// UTF-8 decoder with `errors="replace"` (riftco-serve's streaming) releases token by token.
/// `flags`: `RIFTCO_DECODE_SKIP_SPECIAL` leaves special tokens out. The decoder keeps the
/// tokenizer alive. Free it with `riftco_tokenizer_decoder_free`.
///
/// # Safety
/// `tok` NULL or a live handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_decoder_new(
    tok: *const RiftcoTokenizer,
    flags: u32,
    out: *mut *mut RiftcoTokenDecoder,
) -> Status {
    guard(|| {
        let out = out_ptr(out, "out")?;
        *out = std::ptr::null_mut();
        let tok = handle::get(tok)?;
        check_flags(
            flags,
            RIFTCO_DECODE_SKIP_SPECIAL,
            "riftco_tokenizer_decoder_new",
        )?;
        *out = handle::new(Decoder::new(
            Arc::clone(tok),
            flags & RIFTCO_DECODE_SKIP_SPECIAL != 0,
        ));
        Ok(())
    })
}

/// Add one id; the UTF-8 text it releases (often 0 bytes while a character is incomplete) goes
/// to `out` when it fits in `cap` bytes, and the id is taken. When it does not fit, nothing is
/// written, `*n_out` is the size needed, the id is not taken and the call returns
/// `RIFTCO_STATUS_INVALID_ARGUMENT` (`cap == 0` is no query here; a buffer of
/// `RIFTCO_TOKENIZER_MAX_PUSH_BYTES` always fits). An id outside the vocabulary is
/// `RIFTCO_STATUS_INVALID_ARGUMENT` and changes nothing.
///
/// # Safety
/// `dec` NULL or a live decoder used by no other thread; `out` NULL or `cap` writable bytes;
/// `n_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_decoder_push(
    dec: *mut RiftcoTokenDecoder,
    id: u32,
    out: *mut u8,
    cap: usize,
    n_out: *mut usize,
) -> Status {
    guard(|| {
        let dec = handle::get_mut(dec)?;
        let (text, _) = dec.peek(id).map_err(typed)?;
        deliver_if_fits(
            text.as_bytes(),
            out,
            cap,
            n_out,
            "riftco_tokenizer_decoder_push",
        )?;
        dec.push(id).map_err(typed)?;
        Ok(())
    })
}

/// End of the sequence: a held-back incomplete character is released as U+FFFD (3 bytes; 0
/// bytes when nothing is held) and the decoder is empty again, ready for a new sequence. When
/// the text does not fit in `cap`, nothing changes, `*n_out` is the size needed and the call
/// returns `RIFTCO_STATUS_INVALID_ARGUMENT`; a 3-byte buffer always fits.
///
/// # Safety
/// `dec` NULL or a live decoder used by no other thread; `out` NULL or `cap` writable bytes;
/// `n_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_decoder_flush(
    dec: *mut RiftcoTokenDecoder,
    out: *mut u8,
    cap: usize,
    n_out: *mut usize,
) -> Status {
    guard(|| {
        let dec = handle::get_mut(dec)?;
        let text = dec.peek_flush();
        deliver_if_fits(
            text.as_bytes(),
            out,
            cap,
            n_out,
            "riftco_tokenizer_decoder_flush",
        )?;
        dec.flush();
        Ok(())
    })
}

/// Free a decoder. NULL is a no-op.
///
/// # Safety
/// `dec` NULL or a live decoder used by no other thread.
#[no_mangle]
pub unsafe extern "C" fn riftco_tokenizer_decoder_free(dec: *mut RiftcoTokenDecoder) -> Status {
    guard(|| handle::free(dec))
}

/// Rust-side: a tokenizer handle from a tokenizer state document (for a model's own
/// tokenizer, whose state the model loader has already read).
pub fn tokenizer_handle_from_state(json: &[u8]) -> Result<*mut RiftcoTokenizer> {
    Ok(handle::new(Arc::new(file::from_json(json).map_err(typed)?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::last_error_message;

    /// A byte tokenizer over ASCII with riftco-text's default special tokens and template.
    fn state() -> String {
        let vocab: Vec<String> = (32..127).map(|b: u32| b.to_string()).collect();
        let specials = [
            "<|endoftext|>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|end|>",
        ];
        let entries: Vec<String> = specials
            .iter()
            .enumerate()
            .map(|(k, t)| format!(r#"{{"id": {}, "content": "{t}"}}"#, 95 + k))
            .collect();
        let role = |p: &str| format!(r#"{{"prefix": "<|{p}|>", "suffix": "<|end|>"}}"#);
        format!(
            r#"{{"format": "riftco-text/tokenizer", "format_version": 1, "method": "byte", "options": {{}},
            "byte_vocab": [{}], "special_tokens": [{}], "eos_token": "<|endoftext|>",
            "chat_template": {{"roles": {{"system": {}, "user": {}, "assistant": {}, "tool": {}}},
            "assistant_role": "assistant", "generation_prompt": "<|assistant|>"}}}}"#,
            vocab.join(","),
            entries.join(","),
            role("system"),
            role("user"),
            role("assistant"),
            role("user")
        )
    }

    fn load() -> *mut RiftcoTokenizer {
        let s = state();
        let mut tok = std::ptr::null_mut();
        let status = unsafe { riftco_tokenizer_load_json(s.as_ptr(), s.len(), &mut tok) };
        assert_eq!(status, Status::Ok, "{}", last_error_message());
        tok
    }

    #[test]
    fn encode_with_the_size_query_and_a_small_buffer() {
        let tok = load();
        let text = b"hi<|end|>";
        let mut n = 0usize;
        let flags = RIFTCO_ENCODE_ALLOW_SPECIAL;
        let st = unsafe {
            riftco_tokenizer_encode(
                tok,
                text.as_ptr(),
                9,
                flags,
                std::ptr::null_mut(),
                0,
                &mut n,
            )
        };
        assert_eq!((st, n), (Status::Ok, 3));
        let mut ids = [0u32; 3];
        let st = unsafe {
            riftco_tokenizer_encode(tok, text.as_ptr(), 9, flags, ids.as_mut_ptr(), 2, &mut n)
        };
        assert_eq!((st, n), (Status::InvalidArgument, 3));
        assert!(last_error_message().contains("needs 3"));
        let st = unsafe {
            riftco_tokenizer_encode(tok, text.as_ptr(), 9, flags, ids.as_mut_ptr(), 3, &mut n)
        };
        assert_eq!((st, ids), (Status::Ok, [104 - 32, 105 - 32, 99]));
        let st = unsafe {
            riftco_tokenizer_encode(tok, text.as_ptr(), 9, 0, ids.as_mut_ptr(), 3, &mut n)
        };
        assert_eq!((st, n), (Status::InvalidArgument, 9)); // without special tokens: 9 ids
        let bad = b"a\xffb";
        let st = unsafe {
            riftco_tokenizer_encode(tok, bad.as_ptr(), 3, 0, ids.as_mut_ptr(), 3, &mut n)
        };
        assert_eq!(st, Status::InvalidArgument);
        assert!(
            last_error_message().contains("0xff at byte offset 1"),
            "{}",
            last_error_message()
        );
        let st = unsafe {
            riftco_tokenizer_encode(tok, bad.as_ptr(), 3, 8, ids.as_mut_ptr(), 3, &mut n)
        };
        assert_eq!(st, Status::InvalidArgument);
        assert!(last_error_message().contains("unknown flags"));
        unsafe { riftco_tokenizer_free(tok) };
    }

    #[test]
    fn null_and_wrong_handles_are_errors() {
        let tok = load();
        let mut n = 0u32;
        assert_eq!(
            unsafe { riftco_tokenizer_vocab_size(std::ptr::null(), &mut n) },
            Status::NullHandle
        );
        assert_eq!(
            unsafe { riftco_tokenizer_vocab_size(tok, std::ptr::null_mut()) },
            Status::NullHandle
        );
        let mut dec = std::ptr::null_mut();
        assert_eq!(
            unsafe { riftco_tokenizer_decoder_new(tok, 0, &mut dec) },
            Status::Ok
        );
        // a decoder passed where a tokenizer is expected
        let st = unsafe { riftco_tokenizer_vocab_size(dec as *const RiftcoTokenizer, &mut n) };
        assert_eq!(st, Status::WrongHandle);
        assert!(last_error_message().contains("expected a RiftcoTokenizer handle"));
        assert_eq!(unsafe { riftco_tokenizer_free(tok) }, Status::Ok);
        // the decoder keeps the tokenizer alive
        let mut out = [0u8; 8];
        let mut len = 0usize;
        let st = unsafe { riftco_tokenizer_decoder_push(dec, 33, out.as_mut_ptr(), 8, &mut len) };
        assert_eq!((st, &out[..len]), (Status::Ok, &b"A"[..]));
        assert_eq!(unsafe { riftco_tokenizer_decoder_free(dec) }, Status::Ok);
        assert_eq!(
            unsafe { riftco_tokenizer_free(std::ptr::null_mut()) },
            Status::Ok
        );
        let mut t = std::ptr::null_mut();
        assert_eq!(
            unsafe { riftco_tokenizer_load(std::ptr::null(), &mut t) },
            Status::NullHandle
        );
        let missing = c"/nonexistent/tokenizer.json";
        assert_eq!(
            unsafe { riftco_tokenizer_load(missing.as_ptr(), &mut t) },
            Status::Io
        );
        assert!(t.is_null());
        let junk = b"{\"format\": 1}";
        assert_eq!(
            unsafe { riftco_tokenizer_load_json(junk.as_ptr(), junk.len(), &mut t) },
            Status::Format
        );
        assert!(
            last_error_message().contains("expected \"riftco-text/tokenizer\""),
            "{}",
            last_error_message()
        );
    }

    #[test]
    fn chat_template_and_stop_ids() {
        let tok = load();
        let roles = [c"user".as_ptr(), c"tool".as_ptr()];
        let contents = [c"hi".as_ptr(), c"ok".as_ptr()];
        let mut ids = [0u32; 64];
        let mut n = 0usize;
        let st = unsafe {
            riftco_tokenizer_apply_chat_template(
                tok,
                roles.as_ptr(),
                contents.as_ptr(),
                std::ptr::null(),
                2,
                true,
                ids.as_mut_ptr(),
                64,
                &mut n,
            )
        };
        assert_eq!(st, Status::Ok, "{}", last_error_message());
        // <|user|> h i <|end|> <|user|> then the tool result wrapped in its markers
        assert_eq!(&ids[..5], &[97, 104 - 32, 105 - 32, 99, 97]);
        assert_eq!(ids[n - 1], 98); // the generation prompt <|assistant|>
        assert_eq!(n, 5 + "<tool_response>ok</tool_response>".len() + 2);
        let mut stops = [0u32; 8];
        let st = unsafe { riftco_tokenizer_stop_ids(tok, true, stops.as_mut_ptr(), 8, &mut n) };
        assert_eq!((st, &stops[..n]), (Status::Ok, &[95, 99, 98, 96, 97][..]));
        let roles = [c"robot".as_ptr()];
        let st = unsafe {
            riftco_tokenizer_apply_chat_template(
                tok,
                roles.as_ptr(),
                contents.as_ptr(),
                std::ptr::null(),
                1,
                false,
                ids.as_mut_ptr(),
                64,
                &mut n,
            )
        };
        assert_eq!(st, Status::InvalidArgument);
        assert!(last_error_message().contains("\"robot\""));
        unsafe { riftco_tokenizer_free(tok) };
    }

    #[test]
    fn a_push_that_does_not_fit_keeps_its_token() {
        // The decoder's buffer rule, on a special token's text (7 bytes).
        let tok = load();
        let mut dec = std::ptr::null_mut();
        unsafe { riftco_tokenizer_decoder_new(tok, 0, &mut dec) };
        let mut out = [0u8; 16];
        let mut n = 0usize;
        let st = unsafe { riftco_tokenizer_decoder_push(dec, 99, out.as_mut_ptr(), 3, &mut n) };
        assert_eq!((st, n), (Status::InvalidArgument, 7)); // "<|end|>"
        let st = unsafe { riftco_tokenizer_decoder_push(dec, 99, std::ptr::null_mut(), 0, &mut n) };
        assert_eq!((st, n), (Status::InvalidArgument, 7)); // cap 0: no query, still not taken
        let st = unsafe { riftco_tokenizer_decoder_push(dec, 99, out.as_mut_ptr(), 16, &mut n) };
        assert_eq!((st, &out[..n]), (Status::Ok, &b"<|end|>"[..]));
        let st = unsafe { riftco_tokenizer_decoder_push(dec, 100, out.as_mut_ptr(), 16, &mut n) };
        assert_eq!(st, Status::InvalidArgument);
        assert!(last_error_message().contains("found 100"));
        let st = unsafe { riftco_tokenizer_decoder_flush(dec, std::ptr::null_mut(), 0, &mut n) };
        assert_eq!((st, n), (Status::Ok, 0));
        unsafe { riftco_tokenizer_decoder_free(dec) };
        unsafe { riftco_tokenizer_free(tok) };
    }

    #[test]
    fn a_bundle_must_match_its_identity() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tokenizer/tests/fixtures");
        let good = std::fs::read(dir.join("bpe_gpt2.rift")).unwrap();
        let load_path = |p: &std::path::Path| {
            let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
            let mut tok = std::ptr::null_mut();
            let status = unsafe { riftco_tokenizer_load(c.as_ptr(), &mut tok) };
            let message = last_error_message();
            unsafe { riftco_tokenizer_free(tok) };
            (status, message)
        };
        let (status, message) = load_path(&dir.join("bpe_gpt2.rift"));
        assert_eq!(status, Status::Ok, "{message}");
        // the same length, one letter of the manifest changed: the identity no longer holds
        let at = good.windows(11).position(|w| w == b"pretraining").unwrap();
        let mut bad = good.clone();
        bad[at + 10] = b'a';
        let tmp = std::env::temp_dir().join(format!("riftco-capi-tok-{}.rift", std::process::id()));
        std::fs::write(&tmp, &bad).unwrap();
        let (status, message) = load_path(&tmp);
        assert_eq!(status, Status::Checksum, "{message}");
        assert!(message.contains("the manifest hashes to"), "{message}");
        std::fs::remove_file(&tmp).unwrap();
    }
}
