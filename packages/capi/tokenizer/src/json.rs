//! Strict JSON (RFC 8259), as riftco-core's `loads_strict` reads it: duplicate keys,
//! `NaN`/`Infinity`, numbers beyond a finite float, nesting deeper than [`MAX_DEPTH`]
//! and integers of more than [`MAX_INT_DIGITS`] digits are refused. Time and memory
//! are linear in the text.

use crate::error::{Error, Result};

pub const MAX_DEPTH: usize = 64;
pub const MAX_INT_DIGITS: usize = 100;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer outside `i64` (at most [`MAX_INT_DIGITS`] digits).
    BigInt,
    Float(f64),
    Str(String),
    /// A string holding an unpaired surrogate escape (`"\ud800"`): valid JSON, not Unicode.
    BadStr,
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    /// A short name of the JSON type, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) | Value::BigInt => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) | Value::BadStr => "a string",
            Value::Array(_) => "a list",
            Value::Object(_) => "an object",
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Parse one JSON document from UTF-8 bytes.
pub fn parse(bytes: &[u8]) -> Result<Value> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        Error::format(format!(
            "expected UTF-8 JSON; found an invalid byte at offset {}",
            e.valid_up_to()
        ))
    })?;
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.ws();
    let value = p.value(1)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("expected the end of the document"));
    }
    Ok(value)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> Error {
        let found = match self.s.get(self.i) {
            None => "the end of the text".to_string(),
            Some(b) if b.is_ascii_graphic() => format!("'{}'", *b as char),
            Some(b) => format!("byte 0x{b:02x}"),
        };
        Error::format(format!(
            "expected JSON: {what}; found {found} at byte {}",
            self.i
        ))
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        match self.s.get(self.i) {
            Some(b'{') | Some(b'[') if depth > MAX_DEPTH => Err(Error::format(format!(
                "JSON nested too deeply: expected at most {MAX_DEPTH} levels of arrays and objects; found more at byte {}",
                self.i
            ))),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string(),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ if self.eat(b"null") => Ok(Value::Null),
            _ if self.eat(b"true") => Ok(Value::Bool(true)),
            _ if self.eat(b"false") => Ok(Value::Bool(false)),
            _ if self.s[self.i..].starts_with(b"NaN") || self.s[self.i..].starts_with(b"Infinity") => {
                Err(self.err("standard JSON (no NaN or Infinity)"))
            }
            _ => Err(self.err("a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value> {
        self.i += 1;
        let mut pairs: Vec<(String, Value)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        self.ws();
        if self.eat(b"}") {
            return Ok(Value::Object(pairs));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.err("a string key"));
            }
            let key = match self.string_raw()? {
                Ok(k) => k,
                Err(lossy) => lossy,
            };
            if !seen.insert(key.clone()) {
                return Err(Error::format(format!(
                    "expected JSON without duplicate keys; found {key:?} twice"
                )));
            }
            self.ws();
            if !self.eat(b":") {
                return Err(self.err("':'"));
            }
            self.ws();
            let value = self.value(depth + 1)?;
            pairs.push((key, value));
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"}") {
                return Ok(Value::Object(pairs));
            }
            return Err(self.err("',' or '}'"));
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.eat(b"]") {
            return Ok(Value::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"]") {
                return Ok(Value::Array(items));
            }
            return Err(self.err("',' or ']'"));
        }
    }

    fn string(&mut self) -> Result<Value> {
        Ok(match self.string_raw()? {
            Ok(s) => Value::Str(s),
            Err(_) => Value::BadStr,
        })
    }

    /// The string at `self.i` (a `"`): `Ok(text)`, or `Err(text with U+FFFD)` when it holds
    /// an unpaired surrogate escape.
    fn string_raw(&mut self) -> Result<std::result::Result<String, String>> {
        self.i += 1;
        let mut out = String::new();
        let mut bad = false;
        loop {
            let start = self.i;
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            // The input is valid UTF-8 and we stopped at ASCII, so this is a char boundary.
            out.push_str(std::str::from_utf8(&self.s[start..self.i]).expect("utf-8 checked"));
            match self.s.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(if bad { Err(out) } else { Ok(out) });
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = match self.s.get(self.i) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.i += 1;
                            let hi = self.hex4()?;
                            if (0xD800..0xDC00).contains(&hi)
                                && self.s[self.i..].starts_with(b"\\u")
                            {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                                    out.push(char::from_u32(cp).expect("a valid pair"));
                                    continue;
                                }
                                self.i = save;
                            }
                            match char::from_u32(hi) {
                                Some(c) => out.push(c),
                                None => {
                                    bad = true;
                                    out.push('\u{FFFD}');
                                }
                            }
                            continue;
                        }
                        _ => return Err(self.err("a string escape")),
                    };
                    self.i += 1;
                    out.push(c);
                }
                Some(_) => return Err(self.err("no control character inside a string")),
                None => return Err(self.err("the end of a string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let digits = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("four hex digits"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.err("four hex digits"))?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.err("four hex digits"));
        }
        self.i += 4;
        Ok(u32::from_str_radix(text, 16).expect("hex checked"))
    }

    fn number(&mut self) -> Result<Value> {
        let start = self.i;
        self.eat(b"-");
        if self.s[self.i..].starts_with(b"Infinity") {
            return Err(self.err("standard JSON (no -Infinity)"));
        }
        let digits_start = self.i;
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = self.s.get(self.i) {
                    self.i += 1;
                }
            }
            _ => return Err(self.err("a digit")),
        }
        let int_digits = self.i - digits_start;
        let mut is_float = false;
        if self.s.get(self.i) == Some(&b'.') && matches!(self.s.get(self.i + 1), Some(b'0'..=b'9'))
        {
            is_float = true;
            self.i += 1;
            while let Some(b'0'..=b'9') = self.s.get(self.i) {
                self.i += 1;
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            let save = self.i;
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            if let Some(b'0'..=b'9') = self.s.get(self.i) {
                is_float = true;
                while let Some(b'0'..=b'9') = self.s.get(self.i) {
                    self.i += 1;
                }
            } else {
                self.i = save;
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).expect("ascii");
        if is_float {
            let value: f64 = text.parse().map_err(|_| self.err("a number"))?;
            if !value.is_finite() {
                return Err(Error::format(
                    "expected standard JSON; found a number beyond a finite float",
                ));
            }
            return Ok(Value::Float(value));
        }
        if int_digits > MAX_INT_DIGITS {
            return Err(Error::format(format!(
                "expected integers of at most {MAX_INT_DIGITS} digits; found one of {int_digits}"
            )));
        }
        Ok(text.parse::<i64>().map(Value::Int).unwrap_or(Value::BigInt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let v = parse(br#" {"a": [1, -2, 3.5e0, "x\u00e9\ud83d\ude00", true, null]} "#).unwrap();
        let Value::Array(items) = v.get("a").unwrap() else {
            panic!()
        };
        assert_eq!(items[0], Value::Int(1));
        assert_eq!(items[1], Value::Int(-2));
        assert_eq!(items[2], Value::Float(3.5));
        assert_eq!(items[3], Value::Str("x\u{e9}\u{1F600}".into()));
        assert_eq!(parse(br#""\ud800""#).unwrap(), Value::BadStr);
        for bad in [
            &br#"{"a": 1, "a": 2}"#[..],
            b"NaN",
            b"[-Infinity]",
            b"1e400",
            b"[1,]",
            b"{\"a\":1} x",
            b"\"a\x01\"",
            b"01",
            b"\xff",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind, crate::error::ErrorKind::Format, "{bad:?}");
        }
        let deep = "[".repeat(65) + &"]".repeat(65);
        assert!(parse(deep.as_bytes())
            .unwrap_err()
            .message
            .contains("nested too deeply"));
        let ok = "[".repeat(64) + &"]".repeat(64);
        assert!(parse(ok.as_bytes()).is_ok());
        assert!(parse(("1".repeat(101)).as_bytes()).is_err());
        assert_eq!(parse(("1".repeat(30)).as_bytes()).unwrap(), Value::BigInt);
    }
}
