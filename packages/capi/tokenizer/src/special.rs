//! Special tokens: ids right after the ordinary vocabulary, recognised in text only on
//! request; where two could match at one place, the longer wins (riftco-text's
//! longest-first alternation, scanned left to right).

use std::collections::HashMap;

pub struct SpecialTokens {
    pub tokens: Vec<String>,
    pub first_id: u32,
    /// By first byte: (token bytes, id), longest first.
    by_first: HashMap<u8, Vec<(Vec<u8>, u32)>>,
    pub ids: HashMap<String, u32>,
}

/// A piece of text cut by [`SpecialTokens::split`]: plain bytes, or one special token.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Plain(&'a [u8]),
    Special(u32),
}

impl SpecialTokens {
    pub fn new(tokens: Vec<String>, first_id: u32) -> Self {
        let mut by_first: HashMap<u8, Vec<(Vec<u8>, u32)>> = HashMap::new();
        let mut ids = HashMap::new();
        for (k, token) in tokens.iter().enumerate() {
            let id = first_id + k as u32;
            ids.insert(token.clone(), id);
            by_first
                .entry(token.as_bytes()[0])
                .or_default()
                .push((token.as_bytes().to_vec(), id));
        }
        for list in by_first.values_mut() {
            // Longest first; among equal lengths the order given (no two can match at once).
            list.sort_by_key(|(bytes, _)| Reverse(bytes.len()));
        }
        SpecialTokens {
            tokens,
            first_id,
            by_first,
            ids,
        }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Cut `text` into plain pieces and special tokens. Matching bytes is matching
    /// characters: a token starts with a UTF-8 lead byte, so it only matches at a
    /// character boundary.
    pub fn split<'a>(&self, text: &'a [u8]) -> Vec<Piece<'a>> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < text.len() {
            let found = self.by_first.get(&text[i]).and_then(|list| {
                list.iter()
                    .find(|(bytes, _)| text[i..].starts_with(bytes))
                    .map(|(b, id)| (b.len(), *id))
            });
            match found {
                Some((len, id)) => {
                    if i > start {
                        out.push(Piece::Plain(&text[start..i]));
                    }
                    out.push(Piece::Special(id));
                    i += len;
                    start = i;
                }
                None => i += 1,
            }
        }
        if start < text.len() {
            out.push(Piece::Plain(&text[start..]));
        }
        out
    }
}

use std::cmp::Reverse;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_match_wins() {
        let s = SpecialTokens::new(vec!["<a>".into(), "<a>b".into(), "<|x|>".into()], 10);
        assert_eq!(
            s.split(b"q<a>bc<a><|x|>"),
            [
                Piece::Plain(b"q"),
                Piece::Special(11),
                Piece::Plain(b"c"),
                Piece::Special(10),
                Piece::Special(12)
            ]
        );
        assert_eq!(s.split(b""), []);
    }
}
