//! riftco-text's `gpt2` pre-tokenization, ported by hand from its pattern
//!
//! ```text
//! 's|'t|'re|'ve|'m|'ll|'d| ?L+| ?N+| ?O+|W+(?!\S)|W+
//! ```
//!
//! as Python's `re` runs it (`findall`: at each position the first alternative that
//! matches, greedy with backtracking). `L`, `N`, `W` and `O` are the four classes every
//! character falls in: letters (`[^\W\d_]`), decimal numbers (`\d`), Unicode
//! White_Space, and everything else (`_`, U+001C..U+001F and the rest); the table of
//! classes is generated from riftco-text's own patterns (`gen_tables.py`). Bytes that
//! are not UTF-8 are single characters of class `O`, as Python's `surrogateescape` makes
//! them.

use crate::unicode_tables::RUNS;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Letter,
    Number,
    Space,
    Other,
}

/// The class of one code point.
pub fn class_of(c: char) -> Class {
    let cp = c as u32;
    if cp < 128 {
        return ASCII[cp as usize];
    }
    let k = RUNS.partition_point(|&(start, _)| start <= cp);
    RUNS[k - 1].1
}

static ASCII: [Class; 128] = {
    let mut table = [Class::Other; 128];
    let mut k = 0;
    while k < RUNS.len() && RUNS[k].0 < 128 {
        let end = if k + 1 < RUNS.len() && RUNS[k + 1].0 < 128 {
            RUNS[k + 1].0
        } else {
            128
        };
        let mut cp = RUNS[k].0;
        while cp < end {
            table[cp as usize] = RUNS[k].1;
            cp += 1;
        }
        k += 1;
    }
    table
};

#[derive(Clone, Copy)]
struct Unit {
    ch: Option<char>, // None: a byte that is not part of a UTF-8 character
    class: Class,
    start: usize,
}

fn units(data: &[u8]) -> Vec<Unit> {
    let mut out = Vec::with_capacity(data.len());
    let mut base = 0;
    let mut rest = data;
    loop {
        let (valid, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s, 0),
            Err(e) => {
                let s = std::str::from_utf8(&rest[..e.valid_up_to()]).expect("valid prefix");
                (s, e.error_len().unwrap_or(rest.len() - e.valid_up_to()))
            }
        };
        for (i, ch) in valid.char_indices() {
            out.push(Unit {
                ch: Some(ch),
                class: class_of(ch),
                start: base + i,
            });
        }
        let at = base + valid.len();
        for k in 0..bad {
            out.push(Unit {
                ch: None,
                class: Class::Other,
                start: at + k,
            });
        }
        let used = valid.len() + bad;
        if used == rest.len() {
            return out;
        }
        base += used;
        rest = &rest[used..];
    }
}

/// The byte ranges of the pieces of `data`; their concatenation is `data` (as in
/// Python, a character no alternative matches would be dropped, but every character
/// is in one of the four classes, so none is).
pub fn split_gpt2(data: &[u8]) -> Vec<(usize, usize)> {
    let u = units(data);
    let n = u.len();
    let at = |k: usize| if k < n { u[k].start } else { data.len() };
    let is = |k: usize, c: char| k < n && u[k].ch == Some(c);
    let class = |k: usize| if k < n { Some(u[k].class) } else { None };
    let run = |k: usize, c: Class| {
        let mut j = k;
        while j < n && u[j].class == c {
            j += 1;
        }
        j
    };
    let mut pieces = Vec::new();
    let mut i = 0;
    while i < n {
        let end = match_at(i, n, &is, &class, &run);
        match end {
            Some(j) => {
                pieces.push((at(i), at(j)));
                i = j;
            }
            None => i += 1,
        }
    }
    pieces
}

fn match_at(
    i: usize,
    n: usize,
    is: &dyn Fn(usize, char) -> bool,
    class: &dyn Fn(usize) -> Option<Class>,
    run: &dyn Fn(usize, Class) -> usize,
) -> Option<usize> {
    // 's|'t|'re|'ve|'m|'ll|'d
    if is(i, '\'') {
        for suffix in [
            &['s'][..],
            &['t'],
            &['r', 'e'],
            &['v', 'e'],
            &['m'],
            &['l', 'l'],
            &['d'],
        ] {
            if suffix.iter().enumerate().all(|(k, &c)| is(i + 1 + k, c)) {
                return Some(i + 1 + suffix.len());
            }
        }
    }
    // ` ?L+`, ` ?N+`, ` ?O+`
    for c in [Class::Letter, Class::Number, Class::Other] {
        if is(i, ' ') && class(i + 1) == Some(c) {
            return Some(run(i + 1, c));
        }
        if class(i) == Some(c) {
            return Some(run(i, c));
        }
    }
    // W+(?!\S): the longest run of white space not followed by a non-space
    if class(i) == Some(Class::Space) {
        let j = run(i, Class::Space);
        if j == n {
            return Some(j);
        }
        if j - i >= 2 {
            return Some(j - 1);
        }
        // W+
        return Some(j);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> Vec<&str> {
        split_gpt2(s.as_bytes())
            .into_iter()
            .map(|(a, b)| &s[a..b])
            .collect()
    }

    #[test]
    fn splits_like_the_gpt2_pattern() {
        assert_eq!(split("Hello world"), ["Hello", " world"]);
        assert_eq!(split("I'm here's"), ["I", "'m", " here", "'s"]);
        assert_eq!(split("a  b"), ["a", " ", " b"]);
        assert_eq!(split("a  \n"), ["a", "  \n"]);
        assert_eq!(split("x123 45!!"), ["x", "123", " 45", "!!"]);
        assert_eq!(split("snake_case"), ["snake", "_", "case"]);
        assert_eq!(class_of('\u{1c}'), Class::Other);
        assert_eq!(class_of('\u{3000}'), Class::Space);
        assert_eq!(class_of('\u{b2}'), Class::Letter); // superscript two: not a decimal digit
        assert_eq!(class_of('\u{663}'), Class::Number);
        for cp in 0..128u32 {
            let c = char::from_u32(cp).unwrap();
            let k = RUNS.partition_point(|&(start, _)| start <= cp);
            assert_eq!(class_of(c), RUNS[k - 1].1, "{cp}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_other() {
        let data = b"ab\xff\xfe cd\xe2\x82";
        let pieces: Vec<&[u8]> = split_gpt2(data)
            .into_iter()
            .map(|(a, b)| &data[a..b])
            .collect();
        assert_eq!(pieces, [&b"ab"[..], b"\xff\xfe", b" cd", b"\xe2\x82"]);
    }
}
