//! riftco-text's tokenizer state (format `riftco-text/tokenizer`, version 1), read and
//! checked field by field as `tokenizer_from_state` checks it: the format and version,
//! the keys present, the merges (each joins earlier ids, results sequential, token
//! lengths bounded from the lengths alone), the byte vocabulary, the special tokens,
//! the end-of-text token and the chat template.

use crate::bpe::{BpeEncoder, NUM_BYTES};
use crate::chat::ChatTemplate;
use crate::error::{Error, ErrorKind, Result};
use crate::json::Value;
use crate::{Method, Tokenizer};
use crate::{
    MAX_DECODED_BYTES, MAX_SPECIAL_TOKENS, MAX_SPECIAL_TOKEN_LENGTH, MAX_TOKEN_BYTES,
    MAX_VOCAB_SIZE,
};

pub const FORMAT: &str = "riftco-text/tokenizer";
pub const FORMAT_VERSION: i64 = 1;
const COMMON: [&str; 7] = [
    "format",
    "format_version",
    "method",
    "options",
    "special_tokens",
    "eos_token",
    "chat_template",
];

fn check_keys(where_: &str, value: &Value, expected: &[&str]) -> Result<()> {
    let Value::Object(pairs) = value else {
        return Err(Error::format(format!(
            "{where_}: expected an object; found {}",
            value.kind()
        )));
    };
    let mut missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|k| value.get(k).is_none())
        .collect();
    let mut unexpected: Vec<&str> = pairs
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !expected.contains(k))
        .collect();
    if !missing.is_empty() || !unexpected.is_empty() {
        missing.sort();
        unexpected.sort();
        return Err(Error::format(format!(
            "{where_}: missing keys {missing:?}, unexpected keys {unexpected:?}"
        )));
    }
    Ok(())
}

fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// The tokenizer a state document describes; every failure is typed and names the field.
pub fn from_state(state: &Value) -> Result<Tokenizer> {
    if !matches!(state, Value::Object(_)) {
        return Err(Error::format(format!(
            "expected a JSON object; found {}",
            state.kind()
        )));
    }
    match state.get("format") {
        Some(Value::Str(f)) if f == FORMAT => {}
        other => {
            return Err(Error::format(format!(
                "format: expected {FORMAT:?}; found {}",
                other.map_or("nothing".to_string(), describe)
            )))
        }
    }
    match state.get("format_version").and_then(as_int) {
        Some(v) if (1..=FORMAT_VERSION).contains(&v) => {}
        Some(v) if v > FORMAT_VERSION => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("format_version: expected an integer from 1 to {FORMAT_VERSION}; found {v} (written by a newer riftco-text)"),
            ))
        }
        _ => {
            return Err(Error::format(format!(
                "format_version: expected an integer from 1 to {FORMAT_VERSION}; found {}",
                state.get("format_version").map_or("nothing".to_string(), describe)
            )))
        }
    }
    let method = match state.get("method") {
        Some(Value::Str(m)) if m == "bpe" || m == "byte" => m.as_str(),
        other => {
            return Err(Error::format(format!(
                "method: expected one of [\"bpe\", \"byte\"]; found {}",
                other.map_or("nothing".to_string(), describe)
            )))
        }
    };
    let body = if method == "bpe" {
        "merges"
    } else {
        "byte_vocab"
    };
    let mut keys = COMMON.to_vec();
    keys.push(body);
    check_keys("the state", state, &keys)?;
    let options = state.get("options").expect("checked");
    check_keys(
        "options",
        options,
        if method == "bpe" {
            &["pretokenize"]
        } else {
            &[]
        },
    )?;
    let chat_template = match state.get("chat_template").expect("checked") {
        Value::Null => None,
        template => Some(ChatTemplate::from_state(template)?),
    };
    let (method, base_size) = if method == "bpe" {
        let merges = merges(state.get("merges").expect("checked"))?;
        let gpt2 = match options.get("pretokenize").expect("checked") {
            Value::Str(m) if m == "gpt2" => true,
            Value::Str(m) if m == "none" => false,
            other => {
                return Err(Error::format(format!(
                    "options.pretokenize: expected one of [\"none\", \"gpt2\"]; found {}",
                    describe(other)
                )))
            }
        };
        let size = NUM_BYTES + merges.len();
        (
            Method::Bpe {
                encoder: BpeEncoder::new(&merges),
                merges,
                gpt2,
            },
            size,
        )
    } else {
        let vocab = byte_vocab(state.get("byte_vocab").expect("checked"))?;
        let mut to_id = Box::new([None; 256]);
        for (k, &b) in vocab.iter().enumerate() {
            to_id[b as usize] = Some(k as u32);
        }
        let size = vocab.len();
        (Method::Byte { vocab, to_id }, size)
    };
    let specials = special_tokens(state.get("special_tokens").expect("checked"), base_size)?;
    let eos_token = match state.get("eos_token").expect("checked") {
        Value::Null => None,
        Value::Str(s) => Some(s.clone()),
        other => {
            return Err(Error::format(format!(
                "eos_token: expected null or one of the special tokens {specials:?}; found {}",
                describe(other)
            )))
        }
    };
    Tokenizer::new(method, specials, eos_token, chat_template)
}

fn describe(value: &Value) -> String {
    match value {
        Value::Str(s) => format!("{s:?}"),
        Value::Int(i) => i.to_string(),
        other => other.kind().to_string(),
    }
}

fn merges(value: &Value) -> Result<Vec<(u32, u32)>> {
    let Value::Array(items) = value else {
        return Err(Error::format(format!(
            "merges: expected a list; found {}",
            value.kind()
        )));
    };
    if items.len() > MAX_VOCAB_SIZE - NUM_BYTES {
        return Err(Error::limit(format!(
            "merges: expected at most {}; found {}",
            MAX_VOCAB_SIZE - NUM_BYTES,
            items.len()
        )));
    }
    let mut pairs = Vec::with_capacity(items.len());
    let mut lengths: Vec<usize> = vec![1; NUM_BYTES];
    let mut total = NUM_BYTES;
    for (k, merge) in items.iter().enumerate() {
        let new = (NUM_BYTES + k) as i64;
        let triple: Option<Vec<i64>> = match merge {
            Value::Array(xs) if xs.len() == 3 => xs.iter().map(as_int).collect(),
            _ => None,
        };
        let Some(triple) = triple else {
            return Err(Error::format(format!(
                "merges[{k}]: expected [left, right, id] integers; found {}",
                merge.kind()
            )));
        };
        let (left, right, result) = (triple[0], triple[1], triple[2]);
        if result != new {
            return Err(Error::format(format!(
                "merges[{k}]: expected result id {new} (results are sequential); found {result}"
            )));
        }
        if !((0..new).contains(&left) && (0..new).contains(&right)) {
            return Err(Error::format(format!(
                "merges[{k}]: expected operands that are earlier ids in [0, {new}); found {left}, {right}"
            )));
        }
        let length = lengths[left as usize] + lengths[right as usize];
        total += length;
        if length > MAX_TOKEN_BYTES || total > MAX_DECODED_BYTES {
            return Err(Error::limit(format!(
                "merge {k} (making id {new}): expected tokens of at most {MAX_TOKEN_BYTES} bytes and at most \
                 {MAX_DECODED_BYTES} bytes over all tokens; this merge makes a token of {length} bytes and {total} bytes in all"
            )));
        }
        lengths.push(length);
        pairs.push((left as u32, right as u32));
    }
    Ok(pairs)
}

fn byte_vocab(value: &Value) -> Result<Vec<u8>> {
    let Value::Array(items) = value else {
        return Err(Error::format(format!(
            "byte_vocab: expected a list; found {}",
            value.kind()
        )));
    };
    let mut vocab = Vec::with_capacity(items.len());
    for item in items {
        match as_int(item) {
            Some(b @ 0..=255) => vocab.push(b as u8),
            _ => {
                return Err(Error::format(
                    "byte_vocab: expected a sequence of integers in [0, 256)",
                ))
            }
        }
    }
    if vocab.is_empty() {
        return Err(Error::format(
            "byte_vocab: expected at least one byte; found none",
        ));
    }
    if vocab.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::format(format!(
            "byte_vocab: expected strictly ascending bytes; found {vocab:?}"
        )));
    }
    Ok(vocab)
}

fn special_tokens(value: &Value, first_id: usize) -> Result<Vec<String>> {
    let Value::Array(entries) = value else {
        return Err(Error::format(format!(
            "special_tokens: expected a list; found {}",
            value.kind()
        )));
    };
    if entries.len() > MAX_SPECIAL_TOKENS {
        return Err(Error::limit(format!(
            "special_tokens: expected at most {MAX_SPECIAL_TOKENS}; found {}",
            entries.len()
        )));
    }
    let mut tokens: Vec<String> = Vec::with_capacity(entries.len());
    let mut seen = std::collections::HashSet::new();
    for (k, entry) in entries.iter().enumerate() {
        let ok_keys = matches!(entry, Value::Object(p) if p.len() == 2)
            && entry.get("id").is_some()
            && entry.get("content").is_some();
        if !ok_keys {
            return Err(Error::format(format!(
                "special_tokens[{k}]: expected {{id, content}}; found {}",
                entry.kind()
            )));
        }
        let expected = (first_id + k) as i64;
        if as_int(entry.get("id").expect("checked")) != Some(expected) {
            return Err(Error::format(format!(
                "special_tokens[{k}]: expected id {expected} (right after the ordinary ids, in order); found {}",
                describe(entry.get("id").expect("checked"))
            )));
        }
        let where_ = format!("special token {k}");
        let token = match entry.get("content").expect("checked") {
            Value::Str(s) => s,
            Value::BadStr => {
                return Err(Error::format(format!(
                    "{where_}: expected valid Unicode; found an unpaired surrogate"
                )))
            }
            other => {
                return Err(Error::format(format!(
                    "{where_}: expected a string; found {}",
                    other.kind()
                )))
            }
        };
        let chars = token.chars().count();
        if !(1..=MAX_SPECIAL_TOKEN_LENGTH).contains(&chars) {
            return Err(Error::format(format!(
                "{where_}: expected 1 to {MAX_SPECIAL_TOKEN_LENGTH} characters; found {chars}"
            )));
        }
        if !seen.insert(token.as_str()) {
            return Err(Error::format(format!(
                "{where_}: expected distinct special tokens; found {token:?} twice"
            )));
        }
        tokens.push(token.clone());
    }
    Ok(tokens)
}
