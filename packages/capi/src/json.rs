//! A strict JSON reader for `.rift` headers and manifests: duplicate keys, NaN and
//! infinity literals, trailing data and nesting deeper than [`MAX_DEPTH`] are refused,
//! as riftco-core's `strict_json` refuses them. Objects keep their keys sorted.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// The deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// An integer literal (no fraction, no exponent) that fits an i128.
    Int(i128),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

impl Json {
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Int(_) => "an integer",
            Json::Float(_) => "a number",
            Json::Str(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(m) => m.get(key),
            _ => None,
        }
    }
    pub fn as_object(&self) -> Option<&BTreeMap<String, Json>> {
        match self {
            Json::Object(m) => Some(m),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_i128(&self) -> Option<i128> {
        match self {
            Json::Int(i) => Some(*i),
            _ => None,
        }
    }
    /// A number (integer or float) as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Int(i) => Some(*i as f64),
            Json::Float(f) => Some(*f),
            _ => None,
        }
    }
}

/// Parse `text` (the whole of it) strictly; `what` names the document in errors.
pub fn parse(text: &[u8], what: &str) -> Result<Json> {
    let mut p = Parser {
        s: text,
        i: 0,
        what,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("end of the document", "trailing data"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    what: &'a str,
}

impl Parser<'_> {
    fn err(&self, expected: &str, found: &str) -> Error {
        Error::format(format!(
            "{}: invalid JSON at byte {}: expected {expected}, found {found}",
            self.what, self.i
        ))
    }

    fn found(&self) -> String {
        match self.s.get(self.i) {
            None => "the end of the data".to_string(),
            Some(&b) if b.is_ascii_graphic() => format!("'{}'", b as char),
            Some(&b) => format!("byte 0x{b:02x}"),
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn literal(&mut self, word: &str, v: Json) -> Result<Json> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("a JSON value", &self.found()))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json> {
        match self.s.get(self.i) {
            None => Err(self.err("a JSON value", "the end of the data")),
            Some(b'{') | Some(b'[') if depth >= MAX_DEPTH => Err(Error::limit(format!(
                "{}: JSON nested deeper than {MAX_DEPTH} levels",
                self.what
            ))),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("a JSON value", &self.found())),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json> {
        self.i += 1;
        let mut map = BTreeMap::new();
        self.ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Json::Object(map));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.err("a string key", &self.found()));
            }
            let key = self.string()?;
            self.ws();
            if self.s.get(self.i) != Some(&b':') {
                return Err(self.err("':'", &self.found()));
            }
            self.i += 1;
            self.ws();
            let v = self.value(depth + 1)?;
            if map.insert(key.clone(), v).is_some() {
                return Err(Error::format(format!(
                    "{}: duplicate JSON key {key:?}",
                    self.what
                )));
            }
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Json::Object(map));
                }
                _ => return Err(self.err("',' or '}'", &self.found())),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.err("',' or ']'", &self.found())),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let end = self.i + 4;
        let digits = self
            .s
            .get(self.i..end)
            .ok_or_else(|| self.err("4 hex digits", "the end of the data"))?;
        let text =
            std::str::from_utf8(digits).map_err(|_| self.err("4 hex digits", "other bytes"))?;
        let v = u32::from_str_radix(text, 16)
            .map_err(|_| self.err("4 hex digits", &format!("{text:?}")))?;
        self.i = end;
        Ok(v)
    }

    fn string(&mut self) -> Result<String> {
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(&b) = self.s.get(self.i) else {
                return Err(self.err("'\"'", "the end of the data"));
            };
            self.i += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("an escape", "the end of the data"));
                    };
                    self.i += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if self.s.get(self.i..self.i + 2) != Some(b"\\u") {
                                    return Err(
                                        self.err("a low surrogate", "a lone high surrogate")
                                    );
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("a low surrogate", "another escape"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code)
                                .ok_or_else(|| self.err("a Unicode scalar", "a lone surrogate"))?
                        }
                        _ => return Err(self.err("a JSON escape", &format!("'\\{}'", e as char))),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => {
                    return Err(self.err(
                        "no raw control characters in a string",
                        &format!("byte 0x{b:02x}"),
                    ))
                }
                _ => out.push(b),
            }
        }
        String::from_utf8(out)
            .map_err(|_| Error::format(format!("{}: a JSON string is not UTF-8", self.what)))
    }

    fn number(&mut self) -> Result<Json> {
        let start = self.i;
        let mut float = false;
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        let digits = |p: &mut Self| {
            let at = p.i;
            while let Some(b'0'..=b'9') = p.s.get(p.i) {
                p.i += 1;
            }
            p.i - at
        };
        let int_start = self.i;
        if digits(self) == 0 {
            return Err(self.err("a digit", &self.found()));
        }
        if self.s[int_start] == b'0' && self.i - int_start > 1 {
            return Err(self.err("no leading zeros", "a number starting with 0"));
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            float = true;
            if digits(self) == 0 {
                return Err(self.err("a digit after '.'", &self.found()));
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            self.i += 1;
            float = true;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return Err(self.err("an exponent", &self.found()));
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
        if !float {
            if let Ok(v) = text.parse::<i128>() {
                return Ok(Json::Int(v));
            }
        }
        let v: f64 = text.parse().map_err(|_| self.err("a number", text))?;
        if !v.is_finite() {
            return Err(Error::format(format!(
                "{}: the number {text} is out of range",
                self.what
            )));
        }
        Ok(Json::Float(v))
    }
}

/// `s` as a JSON string the way Python's `json.dumps(ensure_ascii=False)` writes it.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_refusals() {
        assert!(parse(br#"{"a":1,"a":2}"#, "t").is_err());
        assert!(parse(b"NaN", "t").is_err());
        assert!(parse(b"[1] x", "t").is_err());
        assert!(parse(b"1e999", "t").is_err());
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert_eq!(
            parse(deep.as_bytes(), "t").unwrap_err().status,
            crate::error::Status::Limit
        );
        let v = parse(br#"{"b":[1,2.5,"x\u00e9"],"a":null}"#, "t").unwrap();
        assert_eq!(
            v.get("b"),
            Some(&Json::Array(vec![
                Json::Int(1),
                Json::Float(2.5),
                Json::Str("xé".into())
            ]))
        );
    }
}
