//! Incremental decoding, UTF-8 safe across token boundaries: the bytes of byte-level
//! tokens can split a character, so an incomplete sequence at the end is held back
//! until the next token completes it. Invalid bytes become U+FFFD, one per maximal
//! invalid subpart, exactly as Python's incremental UTF-8 decoder with
//! `errors="replace"` (what riftco-serve's `TextStream` streams) does.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::Tokenizer;

pub struct Decoder {
    tokenizer: Arc<Tokenizer>,
    skip_special: bool,
    /// The start of a character whose remaining bytes have not come yet (at most 3 bytes).
    pending: Vec<u8>,
}

/// Decode `data` as far as it is complete: the text, and the incomplete tail held back.
fn decode_prefix(data: &[u8]) -> (String, Vec<u8>) {
    let mut text = String::new();
    let mut rest = data;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                text.push_str(s);
                return (text, Vec::new());
            }
            Err(e) => {
                let valid = e.valid_up_to();
                text.push_str(std::str::from_utf8(&rest[..valid]).expect("valid prefix"));
                match e.error_len() {
                    Some(bad) => {
                        text.push('\u{FFFD}');
                        rest = &rest[valid + bad..];
                    }
                    None => return (text, rest[valid..].to_vec()),
                }
            }
        }
    }
}

impl Decoder {
    pub fn new(tokenizer: Arc<Tokenizer>, skip_special: bool) -> Self {
        Decoder {
            tokenizer,
            skip_special,
            pending: Vec::new(),
        }
    }

    /// The text that adding `id` would release, without adding it.
    pub fn peek(&self, id: u32) -> Result<(String, Vec<u8>)> {
        let tok = &self.tokenizer;
        let bytes = tok.token_bytes(id).ok_or_else(|| {
            Error::invalid(format!(
                "expected an id in [0, {}); found {id}",
                tok.vocab_size()
            ))
        })?;
        if self.skip_special && tok.is_special(id) {
            return Ok((String::new(), self.pending.clone()));
        }
        let mut data = self.pending.clone();
        data.extend_from_slice(bytes);
        Ok(decode_prefix(&data))
    }

    /// Add one token; the newly complete text.
    pub fn push(&mut self, id: u32) -> Result<String> {
        let (text, pending) = self.peek(id)?;
        self.pending = pending;
        Ok(text)
    }

    /// What [`Decoder::flush`] would return.
    pub fn peek_flush(&self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            "\u{FFFD}".to_string()
        }
    }

    /// The end of the text: a held-back incomplete character becomes one U+FFFD.
    pub fn flush(&mut self) -> String {
        let text = self.peek_flush();
        self.pending.clear();
        text
    }

    /// Bytes held back, waiting for the rest of a character (0 to 3).
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}
