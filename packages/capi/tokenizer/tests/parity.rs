//! riftco-tokenizer against riftco-text, id for id, on the fixtures `make_fixtures.py`
//! wrote with riftco-text (see that script for what the inputs are).

use std::path::PathBuf;
use std::sync::Arc;

use riftco_tokenizer::json::{self, Value};
use riftco_tokenizer::{file, Decoder, ErrorKind, Tokenizer};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn expected() -> Value {
    json::parse(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    match v {
        Value::Array(xs) => xs
            .iter()
            .map(|x| match x {
                Value::Int(i) => *i as u32,
                _ => panic!("id"),
            })
            .collect(),
        _ => panic!("expected a list of ids; found {v:?}"),
    }
}

fn str_of(v: &Value) -> &str {
    match v {
        Value::Str(s) => s,
        _ => panic!("expected a string; found {v:?}"),
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn list(v: &Value) -> &[Value] {
    match v {
        Value::Array(xs) => xs,
        _ => panic!("expected a list; found {v:?}"),
    }
}

/// riftco-text's outcome (`{"ok": ids}` or `{"error": ...}`) against ours.
fn check_outcome(what: &str, want: &Value, got: riftco_tokenizer::Result<Vec<u32>>) {
    match (want.get("ok"), got) {
        (Some(w), Ok(g)) => assert_eq!(ids(w), g, "{what}"),
        (None, Err(e)) => {
            assert_eq!(str_of(want.get("error").unwrap()), "EncodeError", "{what}");
            assert_eq!(e.kind, ErrorKind::Invalid, "{what}: {e}");
        }
        (Some(_), Err(e)) => panic!("{what}: riftco-text encodes it; we refuse: {e}"),
        (None, Ok(g)) => panic!("{what}: riftco-text refuses ({want:?}); we give {g:?}"),
    }
}

fn check_tokenizer(name: &str, tok: &Tokenizer, want: &Value) {
    let int = |k: &str| match want.get(k).unwrap() {
        Value::Int(i) => *i as usize,
        v => panic!("{k}: {v:?}"),
    };
    assert_eq!(tok.vocab_size(), int("vocab_size"), "{name}");
    assert_eq!(tok.base_vocab_size(), int("base_vocab_size"), "{name}");
    let Value::Object(specials) = want.get("special_tokens").unwrap() else {
        panic!()
    };
    assert_eq!(tok.special_tokens().len(), specials.len());
    for (text, id) in specials {
        assert_eq!(
            tok.special_id(text),
            Some(ids(&Value::Array(vec![id.clone()]))[0]),
            "{name} {text}"
        );
    }
    match want.get("eos_id").unwrap() {
        Value::Int(i) => assert_eq!(tok.eos_id(), Some(*i as u32)),
        _ => assert_eq!(tok.eos_id(), None),
    }
    assert_eq!(
        tok.stop_ids(false),
        ids(want.get("stop_ids").unwrap()),
        "{name}"
    );
    assert_eq!(
        tok.stop_ids(true),
        ids(want.get("chat_stop_ids").unwrap()),
        "{name}"
    );

    for case in list(want.get("encode").unwrap()) {
        if let Some(text) = case.get("text") {
            let text = str_of(text);
            check_outcome(
                &format!("{name} encode {text:?}"),
                case.get("plain").unwrap(),
                tok.encode(text, false),
            );
            check_outcome(
                &format!("{name} encode special {text:?}"),
                case.get("special").unwrap(),
                tok.encode(text, true),
            );
        } else {
            let data = hex(str_of(case.get("bytes").unwrap()));
            check_outcome(
                &format!("{name} encode_bytes {data:?}"),
                case.get("plain").unwrap(),
                tok.encode_bytes(&data),
            );
        }
    }

    let tok_arc = Arc::new(file::load(&fixtures().join(format!("{name}.json"))).unwrap());
    for case in list(want.get("decode").unwrap()) {
        let seq = ids(case.get("ids").unwrap());
        assert_eq!(
            tok.decode_bytes(&seq, false).unwrap(),
            hex(str_of(case.get("bytes").unwrap())),
            "{name} {seq:?}"
        );
        assert_eq!(
            tok.decode_bytes(&seq, true).unwrap(),
            hex(str_of(case.get("bytes_skip").unwrap()))
        );
        assert_eq!(
            tok.decode(&seq, false).unwrap(),
            str_of(case.get("text").unwrap()),
            "{name} {seq:?}"
        );
        for (key, skip) in [("stream", false), ("stream_skip", true)] {
            let mut decoder = Decoder::new(tok_arc.clone(), skip);
            let mut got: Vec<String> = seq.iter().map(|&i| decoder.push(i).unwrap()).collect();
            got.push(decoder.flush());
            let want: Vec<&str> = list(case.get(key).unwrap()).iter().map(str_of).collect();
            assert_eq!(got, want, "{name} {key} {seq:?}");
        }
    }

    for case in list(want.get("chat").unwrap()) {
        let messages: Vec<(&str, &str)> = list(case.get("messages").unwrap())
            .iter()
            .map(|m| (str_of(&list(m)[0]), str_of(&list(m)[1])))
            .collect();
        let prompt = case.get("add_generation_prompt") == Some(&Value::Bool(true));
        let got = tok.apply_chat_template(&messages, prompt);
        match (case.get("ok"), got) {
            (Some(w), Ok(g)) => {
                assert_eq!(
                    g.ids,
                    ids(w.get("ids").unwrap()),
                    "{name} chat {messages:?}"
                );
                assert_eq!(g.text, str_of(w.get("text").unwrap()));
                let mask: Vec<u8> = ids(w.get("mask").unwrap())
                    .into_iter()
                    .map(|m| m as u8)
                    .collect();
                assert_eq!(g.assistant_mask, mask, "{name} mask {messages:?}");
            }
            (None, Err(e)) => assert_eq!(e.kind, ErrorKind::Invalid, "{e}"),
            (w, g) => panic!(
                "{name} chat {messages:?}: riftco-text {w:?}, ours {:?}",
                g.map(|e| e.ids)
            ),
        }
    }
}

#[test]
fn equal_to_riftco_text_on_every_fixture() {
    let expected = expected();
    let Value::Object(toks) = expected.get("tokenizers").unwrap() else {
        panic!()
    };
    assert_eq!(toks.len(), 3);
    for (name, want) in toks {
        let tok = file::load(&fixtures().join(format!("{name}.json"))).unwrap();
        check_tokenizer(name, &tok, want);
    }
}

#[test]
fn a_bundle_holds_the_same_tokenizer() {
    let expected = expected();
    let tok = file::load(&fixtures().join("bpe_gpt2.rift")).unwrap();
    check_tokenizer(
        "bpe_gpt2",
        &tok,
        expected.get("tokenizers").unwrap().get("bpe_gpt2").unwrap(),
    );
}

#[test]
fn hostile_states_are_refused_typed() {
    let expected = expected();
    let cases = list(expected.get("hostile").unwrap());
    assert!(cases.len() > 25);
    for case in cases {
        let name = str_of(case.get("name").unwrap());
        let err = file::from_json(str_of(case.get("state").unwrap()).as_bytes()).unwrap_err();
        assert!(
            matches!(
                err.kind,
                ErrorKind::Format | ErrorKind::Limit | ErrorKind::Unsupported
            ),
            "{name}: {err:?}"
        );
        assert!(err.message.contains("expected"), "{name}: {}", err.message);
    }
}

#[test]
fn hostile_files_are_refused_typed() {
    let dir = std::env::temp_dir().join(format!("riftco-tokenizer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bundle = std::fs::read(fixtures().join("bpe_gpt2.rift")).unwrap();
    let write = |name: &str, data: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    };
    let mut huge_header = bundle.clone();
    huge_header[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let mut truncated = bundle.clone();
    truncated.truncate(100);
    let mut not_json = bundle.clone();
    not_json[8] = b'x';
    let plain = {
        let header = br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header);
        v.extend_from_slice(&[0; 4]);
        v
    };
    let cases: Vec<(PathBuf, ErrorKind)> = vec![
        (dir.clone(), ErrorKind::Io),
        (dir.join("missing.rift"), ErrorKind::Io),
        (write("empty", b""), ErrorKind::Format),
        (write("short", b"abc"), ErrorKind::Format),
        (write("huge_header.rift", &huge_header), ErrorKind::Limit),
        (write("truncated.rift", &truncated), ErrorKind::Format),
        (write("not_json.rift", &not_json), ErrorKind::Format),
        (write("plain.safetensors", &plain), ErrorKind::Format),
        (
            write(
                "bad.json",
                b"{\"format\": \"riftco-text/tokenizer\", \"format\": 1}",
            ),
            ErrorKind::Format,
        ),
        (write("nan.json", b"[NaN]"), ErrorKind::Format),
    ];
    #[cfg(unix)]
    let cases = {
        let mut cases = cases;
        cases.push((PathBuf::from("/dev/zero"), ErrorKind::Io));
        let fifo = dir.join("fifo");
        if std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
        {
            cases.push((fifo, ErrorKind::Io)); // refused without waiting for a writer
        }
        cases
    };
    for (path, kind) in cases {
        let err = file::load(&path).unwrap_err();
        assert_eq!(err.kind, kind, "{}: {}", path.display(), err.message);
        assert!(
            err.message.contains("expected") || kind == ErrorKind::Io,
            "{}",
            err.message
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn chat_errors_and_queries() {
    let tok = file::load(&fixtures().join("bpe_gpt2.json")).unwrap();
    let err = tok
        .apply_chat_template(&[("robot", "hi")], false)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Invalid);
    assert!(err.message.contains("robot"), "{}", err.message);
    let err = tok
        .decode_bytes(&[1, tok.vocab_size() as u32], false)
        .unwrap_err();
    assert!(err.message.contains("at position 1"), "{}", err.message);
    assert_eq!(tok.token_bytes(97), Some(&b"a"[..]));
    assert_eq!(tok.token_bytes(tok.vocab_size() as u32), None);
}

/// Random corruptions of a state file and of a bundle's header: every one is loaded or
/// refused with a typed error, never a panic.
#[test]
fn corrupted_files_never_panic() {
    let state = std::fs::read(fixtures().join("bpe_gpt2.json")).unwrap();
    let bundle = std::fs::read(fixtures().join("bpe_gpt2.rift")).unwrap();
    let header_end = 8 + u64::from_le_bytes(bundle[..8].try_into().unwrap()) as usize;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let interesting = b"0123456789[]{}\",:-.eE\\u \x00\xff";
    let (mut refused, mut loaded) = (0, 0);
    for round in 0..3000 {
        let mut data = if round % 2 == 0 {
            state.clone()
        } else {
            bundle[8..header_end].to_vec()
        };
        for _ in 0..1 + next(4) {
            let at = next(data.len());
            match next(3) {
                0 => data[at] = interesting[next(interesting.len())],
                1 => {
                    data.remove(at);
                }
                _ => data.insert(at, interesting[next(interesting.len())]),
            }
        }
        let result = if round % 2 == 0 {
            file::from_json(&data)
        } else {
            file::from_safetensors_header(&data)
        };
        match result {
            Ok(tok) => {
                loaded += 1;
                let ids = tok.encode("hello world <|end|>", true).unwrap_or_default();
                let _ = tok.decode(&ids, false);
            }
            Err(e) => {
                refused += 1;
                assert!(!e.message.is_empty());
            }
        }
    }
    assert!(
        refused > 2000 && loaded > 50,
        "refused {refused}, loaded {loaded}"
    );
}
