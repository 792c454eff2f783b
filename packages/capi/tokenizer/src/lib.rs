//! riftco-text's tokenizers in pure Rust, equal to it id for id: the byte tokenizer and
//! byte-level BPE (with its `none` and `gpt2` pre-tokenization), special tokens, the
//! chat template, the stop ids, and a UTF-8-safe incremental decoder. It reads the
//! tokenizer state riftco-text saves, alone (`tok.save(path)`) or inside a `.rift`
//! bundle's manifest, checked as riftco-text checks it. See README.md.

pub mod bpe;
pub mod chat;
pub mod decoder;
pub mod error;
pub mod file;
pub mod json;
pub mod pretokenize;
pub mod special;
pub mod state;
mod unicode_tables;

pub use chat::ChatTemplate;
pub use decoder::Decoder;
pub use error::{Error, ErrorKind, Result};
pub use unicode_tables::UNICODE_VERSION;

use bpe::BpeEncoder;
use special::{Piece, SpecialTokens};

/// At most this many ids, special tokens included (riftco-text's `MAX_VOCAB_SIZE`).
pub const MAX_VOCAB_SIZE: usize = 1 << 20;
/// Longest byte string one token may stand for.
pub const MAX_TOKEN_BYTES: usize = 1 << 16;
/// Most bytes all tokens may stand for together.
pub const MAX_DECODED_BYTES: usize = 1 << 26;
pub const MAX_SPECIAL_TOKENS: usize = 4096;
pub const MAX_SPECIAL_TOKEN_LENGTH: usize = 256;

/// How ordinary bytes become ids.
pub enum Method {
    /// Ids 0-255 are bytes; merge `k` makes `256 + k`.
    Bpe {
        encoder: BpeEncoder,
        merges: Vec<(u32, u32)>,
        gpt2: bool,
    },
    /// Id `k` is the `k`-th byte of `vocab` (ascending); other bytes cannot be encoded.
    Byte {
        vocab: Vec<u8>,
        to_id: Box<[Option<u32>; 256]>,
    },
}

/// A rendered conversation: ids, text, and 1 where a token is the assistant's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatEncoding {
    pub ids: Vec<u32>,
    pub text: String,
    pub assistant_mask: Vec<u8>,
}

/// A loaded tokenizer; immutable, so one may be shared by any number of threads.
pub struct Tokenizer {
    method: Method,
    base_size: usize,
    special: SpecialTokens,
    eos_token: Option<String>,
    chat_template: Option<ChatTemplate>,
    /// The bytes of every id, concatenated; id `i` is `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<usize>,
}

impl Tokenizer {
    /// Build from checked parts (see [`state::from_state`] for the checks).
    pub(crate) fn new(
        method: Method,
        special_tokens: Vec<String>,
        eos_token: Option<String>,
        chat_template: Option<ChatTemplate>,
    ) -> Result<Self> {
        let base_size = match &method {
            Method::Bpe { merges, .. } => bpe::NUM_BYTES + merges.len(),
            Method::Byte { vocab, .. } => vocab.len(),
        };
        if base_size + special_tokens.len() > MAX_VOCAB_SIZE {
            return Err(Error::limit(format!(
                "expected at most {MAX_VOCAB_SIZE} ids in all; found {base_size} ordinary and {} special",
                special_tokens.len()
            )));
        }
        let mut bytes = Vec::new();
        let mut offsets = vec![0];
        match &method {
            Method::Bpe { merges, .. } => {
                for b in 0..=255u8 {
                    bytes.push(b);
                    offsets.push(bytes.len());
                }
                for &(left, right) in merges {
                    let (l, r) = (left as usize, right as usize);
                    let (ls, le, rs, re) = (offsets[l], offsets[l + 1], offsets[r], offsets[r + 1]);
                    bytes.extend_from_within(ls..le);
                    bytes.extend_from_within(rs..re);
                    offsets.push(bytes.len());
                }
            }
            Method::Byte { vocab, .. } => {
                for &b in vocab {
                    bytes.push(b);
                    offsets.push(bytes.len());
                }
            }
        }
        for token in &special_tokens {
            bytes.extend_from_slice(token.as_bytes());
            offsets.push(bytes.len());
        }
        let special = SpecialTokens::new(special_tokens, base_size as u32);
        if let Some(eos) = &eos_token {
            if !special.ids.contains_key(eos) {
                return Err(Error::format(format!(
                    "eos_token: expected one of the special tokens {:?}; found {eos:?}",
                    special.tokens
                )));
            }
        }
        let tok = Tokenizer {
            method,
            base_size,
            special,
            eos_token,
            chat_template,
            bytes,
            offsets,
        };
        if let Some(template) = &tok.chat_template {
            tok.check_chat_template(template)?;
        }
        Ok(tok)
    }

    fn check_chat_template(&self, template: &ChatTemplate) -> Result<()> {
        for (where_, text) in template.template_strings() {
            self.encode(text, true)
                .map_err(|e| Error::format(format!("chat template {where_}: {}", e.message)))?;
        }
        for (role, fmt) in &template.roles {
            if !self
                .special
                .split(fmt.prefix.as_bytes())
                .iter()
                .any(|p| matches!(p, Piece::Special(_)))
            {
                return Err(Error::format(format!(
                    "chat template {role}.prefix: expected at least one special token, so that message content cannot forge it; found {:?}",
                    fmt.prefix
                )));
            }
        }
        Ok(())
    }

    /// Number of ids, special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.base_size + self.special.len()
    }

    /// Number of ordinary ids; special ids start here.
    pub fn base_vocab_size(&self) -> usize {
        self.base_size
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The special tokens in id order (the first has id `base_vocab_size()`).
    pub fn special_tokens(&self) -> &[String] {
        &self.special.tokens
    }

    /// The id of a special token given by its text.
    pub fn special_id(&self, token: &str) -> Option<u32> {
        self.special.ids.get(token).copied()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// The end-of-text id, if the tokenizer has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_token.as_ref().map(|t| self.special.ids[t])
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// The bytes one id stands for (a special token as its UTF-8 text).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        (i < self.vocab_size()).then(|| &self.bytes[self.offsets[i]..self.offsets[i + 1]])
    }

    /// Ordinary ids of `data` starting at byte `offset` of the caller's input.
    fn encode_plain(&self, data: &[u8], offset: usize, out: &mut Vec<u32>) -> Result<()> {
        match &self.method {
            Method::Bpe {
                encoder,
                gpt2: true,
                ..
            } => {
                for (a, b) in pretokenize::split_gpt2(data) {
                    encoder.encode_piece(&data[a..b], out);
                }
            }
            // Without pre-tokenization the whole input is one piece.
            Method::Bpe {
                encoder,
                gpt2: false,
                ..
            } => encoder.encode_whole(data, out),
            Method::Byte { vocab, to_id } => {
                for (k, &b) in data.iter().enumerate() {
                    match to_id[b as usize] {
                        Some(id) => out.push(id),
                        None => {
                            return Err(Error::invalid(format!(
                                "byte 0x{b:02x} at byte offset {} is not in the vocabulary (the {} bytes of the training corpus)",
                                offset + k,
                                vocab.len()
                            )))
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Ids for `data` (any bytes); special tokens are never recognised (riftco-text's
    /// `encode_bytes`).
    pub fn encode_bytes(&self, data: &[u8]) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.encode_plain(data, 0, &mut out)?;
        Ok(out)
    }

    /// Ids for `text`; special-token text is recognised only with `allow_special`
    /// (riftco-text's `encode`).
    pub fn encode(&self, text: &str, allow_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.encode_into(text, allow_special, &mut out)?;
        Ok(out)
    }

    fn encode_into(&self, text: &str, allow_special: bool, out: &mut Vec<u32>) -> Result<()> {
        if !allow_special {
            return self.encode_plain(text.as_bytes(), 0, out);
        }
        let mut offset = 0;
        for piece in self.special.split(text.as_bytes()) {
            match piece {
                Piece::Plain(data) => {
                    self.encode_plain(data, offset, out)?;
                    offset += data.len();
                }
                Piece::Special(id) => {
                    out.push(id);
                    offset += self.token_bytes(id).expect("a special id").len();
                }
            }
        }
        Ok(())
    }

    /// The exact bytes of `ids`; special tokens as their text unless `skip_special`.
    pub fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Result<Vec<u8>> {
        let size = self.vocab_size();
        let mut out = Vec::new();
        for (position, &id) in ids.iter().enumerate() {
            if id as usize >= size {
                return Err(Error::invalid(format!(
                    "expected ids in [0, {size}); found {id} at position {position}"
                )));
            }
            if skip_special && id as usize >= self.base_size {
                continue;
            }
            out.extend_from_slice(self.token_bytes(id).expect("checked"));
        }
        Ok(out)
    }

    /// Text of `ids`; bytes that are not UTF-8 become U+FFFD (riftco-text's `decode`).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids, skip_special)?).into_owned())
    }

    /// Whether `id` is a special token.
    pub fn is_special(&self, id: u32) -> bool {
        (id as usize) >= self.base_size && (id as usize) < self.vocab_size()
    }

    /// The ids that end generated text: end-of-text (if any) and, with `chat` and a chat
    /// template, every special token the template writes: the assistant's end marker
    /// first, then the role markers (riftco-text's `stop_ids`).
    pub fn stop_ids(&self, chat: bool) -> Vec<u32> {
        let mut stops: Vec<u32> = self.eos_id().into_iter().collect();
        if let (true, Some(template)) = (chat, &self.chat_template) {
            let assistant = template
                .role(&template.assistant_role)
                .expect("checked")
                .suffix
                .as_str();
            let strings = std::iter::once(assistant)
                .chain(template.template_strings().into_iter().map(|(_, s)| s));
            for text in strings {
                for piece in self.special.split(text.as_bytes()) {
                    if let Piece::Special(id) = piece {
                        if !stops.contains(&id) {
                            stops.push(id);
                        }
                    }
                }
            }
        }
        stops
    }

    /// `(role, content)` messages through the chat template (riftco-text's
    /// `apply_chat_template` for messages with string content).
    pub fn apply_chat_template(
        &self,
        messages: &[(&str, &str)],
        add_generation_prompt: bool,
    ) -> Result<ChatEncoding> {
        let Some(template) = &self.chat_template else {
            return Err(Error::invalid("this tokenizer has no chat template"));
        };
        let mut enc = ChatEncoding {
            ids: Vec::new(),
            text: String::new(),
            assistant_mask: Vec::new(),
        };
        for span in template.render(messages, add_generation_prompt)? {
            let before = enc.ids.len();
            self.encode_into(&span.text, span.is_template, &mut enc.ids)?;
            enc.assistant_mask.resize(enc.ids.len(), 0);
            if span.in_assistant_mask {
                enc.assistant_mask[before..].fill(1);
            }
            enc.text.push_str(&span.text);
        }
        Ok(enc)
    }
}

/// A tokenizer is immutable after loading, so one may be shared by threads.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Tokenizer>();
    shareable::<Decoder>();
};

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokenizer(vocab_size={}, special_tokens={})",
            self.vocab_size(),
            self.special.len()
        )
    }
}
