"""libriftco's tokenizer through ctypes against riftco-text, id for id.

Fresh tokenizers are trained with riftco-text, saved (state file and ``.rift``
bundle), loaded through the C ABI and compared on seeded random text over all of
Unicode, random bytes, riftco-text's hard strings, every code point, random id
sequences (decode and streamed decode, token by token) and random conversations.
Characters a different Python's Unicode version classes otherwise than the
library's generated table (``gen_tables.py``) are left out of the random text.
The library is ``$RIFTCO_CAPI_LIB``, else ``build/capi/lib`` or ``target/release``
of the repository (``make capi`` builds it).
"""

from __future__ import annotations

import codecs
import ctypes
import functools
import json
import os
import random
import re
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from riftco.text import BpeTokenizer, ByteTokenizer, Tokenizer, tokenizer_from_state
from riftco.text.errors import TokenizerError

ROOT = Path(__file__).resolve().parents[3]
STATUS = {
    0: "ok",
    1: "invalid_argument",
    2: "null_handle",
    3: "wrong_handle",
    4: "io",
    5: "format",
    6: "checksum",
    7: "unsupported",
    8: "limit",
}
ALLOW_SPECIAL, BYTES = 1, 2
SKIP_SPECIAL, REPLACE_INVALID = 1, 2


def library_path() -> Path | None:
    """$RIFTCO_CAPI_LIB, else the staged or the cargo-built shared library."""
    env = os.environ.get("RIFTCO_CAPI_LIB")
    suffix = {"darwin": "dylib", "win32": "dll"}.get(sys.platform, "so")
    candidates = [Path(env)] if env else []
    candidates += [
        ROOT / f"build/capi/lib/libriftco.{suffix}",
        ROOT / f"target/release/libriftco.{suffix}",
    ]
    return next((p for p in candidates if p.is_file()), None)


class CError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{STATUS.get(status, status)}: {message}")
        self.status = STATUS.get(status, str(status))
        self.message = message


class Lib:
    """The tokenizer functions of libriftco, with the buffer convention handled."""

    def __init__(self, path: Path) -> None:
        lib = self.lib = ctypes.CDLL(str(path))
        P, U32, SZ = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t
        u8p, u32p, szp = ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(U32), ctypes.POINTER(SZ)
        sigs = {
            "riftco_last_error": ([], ctypes.c_char_p),
            "riftco_tokenizer_load": ([ctypes.c_char_p, ctypes.POINTER(P)], ctypes.c_int),
            "riftco_tokenizer_load_json": ([ctypes.c_char_p, SZ, ctypes.POINTER(P)], ctypes.c_int),
            "riftco_tokenizer_free": ([P], ctypes.c_int),
            "riftco_tokenizer_vocab_size": ([P, u32p], ctypes.c_int),
            "riftco_tokenizer_base_vocab_size": ([P, u32p], ctypes.c_int),
            "riftco_tokenizer_encode": ([P, ctypes.c_char_p, SZ, U32, u32p, SZ, szp], ctypes.c_int),
            "riftco_tokenizer_decode": ([P, u32p, SZ, U32, u8p, SZ, szp], ctypes.c_int),
            "riftco_tokenizer_token_bytes": ([P, U32, u8p, SZ, szp], ctypes.c_int),
            "riftco_tokenizer_special_token": ([P, ctypes.c_char_p, u32p], ctypes.c_int),
            "riftco_tokenizer_eos_id": ([P, u32p], ctypes.c_int),
            "riftco_tokenizer_stop_ids": ([P, ctypes.c_bool, u32p, SZ, szp], ctypes.c_int),
            "riftco_tokenizer_apply_chat_template": (
                [P, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p), szp, SZ]
                + [ctypes.c_bool, u32p, SZ, szp],
                ctypes.c_int,
            ),
            "riftco_tokenizer_decoder_new": ([P, U32, ctypes.POINTER(P)], ctypes.c_int),
            "riftco_tokenizer_decoder_push": ([P, U32, u8p, SZ, szp], ctypes.c_int),
            "riftco_tokenizer_decoder_flush": ([P, u8p, SZ, szp], ctypes.c_int),
            "riftco_tokenizer_decoder_free": ([P], ctypes.c_int),
        }
        for name, (args, res) in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res

    def check(self, status: int) -> None:
        if status != 0:
            raise CError(status, self.lib.riftco_last_error().decode())

    def sized(self, call, ctype) -> list:
        """Run ``call(out, cap, n_out)`` twice: the size query, then the real call."""
        n = ctypes.c_size_t()
        self.check(call(None, 0, ctypes.byref(n)))
        buf = (ctype * max(n.value, 1))()
        self.check(call(buf, n.value, ctypes.byref(n)))
        return buf[: n.value]


class CTokenizer:
    def __init__(self, lib: Lib, handle: ctypes.c_void_p) -> None:
        self.lib, self.h, self.f = lib, handle, lib.lib

    @classmethod
    def load(cls, lib: Lib, path: Path) -> CTokenizer:
        h = ctypes.c_void_p()
        lib.check(lib.lib.riftco_tokenizer_load(os.fsencode(path), ctypes.byref(h)))
        return cls(lib, h)

    @classmethod
    def from_json(cls, lib: Lib, text: bytes) -> CTokenizer:
        h = ctypes.c_void_p()
        lib.check(lib.lib.riftco_tokenizer_load_json(text, len(text), ctypes.byref(h)))
        return cls(lib, h)

    def close(self) -> None:
        self.lib.check(self.f.riftco_tokenizer_free(self.h))

    def size(self, base: bool = False) -> int:
        n = ctypes.c_uint32()
        fn = self.f.riftco_tokenizer_base_vocab_size if base else self.f.riftco_tokenizer_vocab_size
        self.lib.check(fn(self.h, ctypes.byref(n)))
        return n.value

    def encode(self, data: bytes, flags: int) -> list[int]:
        return self.lib.sized(
            lambda o, c, n: self.f.riftco_tokenizer_encode(self.h, data, len(data), flags, o, c, n),
            ctypes.c_uint32,
        )

    def decode(self, ids: list[int], flags: int) -> bytes:
        arr = (ctypes.c_uint32 * max(len(ids), 1))(*ids)
        out = self.lib.sized(
            lambda o, c, n: self.f.riftco_tokenizer_decode(self.h, arr, len(ids), flags, o, c, n),
            ctypes.c_uint8,
        )
        return bytes(out)

    def special(self, token: str) -> int:
        n = ctypes.c_uint32()
        self.lib.check(
            self.f.riftco_tokenizer_special_token(self.h, token.encode(), ctypes.byref(n))
        )
        return n.value

    def eos_id(self) -> int:
        n = ctypes.c_uint32()
        self.lib.check(self.f.riftco_tokenizer_eos_id(self.h, ctypes.byref(n)))
        return n.value

    def stop_ids(self, chat: bool) -> list[int]:
        return self.lib.sized(
            lambda o, c, n: self.f.riftco_tokenizer_stop_ids(self.h, chat, o, c, n), ctypes.c_uint32
        )

    def chat(self, messages: list[tuple[str, str]], prompt: bool) -> list[int]:
        k = len(messages)
        roles = (ctypes.c_char_p * max(k, 1))(*[r.encode() for r, _ in messages])
        data = [c.encode() for _, c in messages]
        contents = (ctypes.c_char_p * max(k, 1))(*data)
        lens = (ctypes.c_size_t * max(k, 1))(*map(len, data))
        return self.lib.sized(
            lambda o, c, n: self.f.riftco_tokenizer_apply_chat_template(
                self.h, roles, contents, lens, k, prompt, o, c, n
            ),
            ctypes.c_uint32,
        )

    def stream(self, ids: list[int], flags: int) -> list[str]:
        """Push each id into a small buffer, grown when the decoder says it does not fit."""
        dec = ctypes.c_void_p()
        self.lib.check(self.f.riftco_tokenizer_decoder_new(self.h, flags, ctypes.byref(dec)))
        buf = (ctypes.c_uint8 * 4)()
        n = ctypes.c_size_t()

        def take(call) -> str:
            nonlocal buf
            while (status := call(buf, len(buf))) == 1 and n.value > len(buf):
                buf = (ctypes.c_uint8 * n.value)()  # nothing was taken: retry, larger
            self.lib.check(status)
            return bytes(buf[: n.value]).decode("utf-8")  # always valid UTF-8

        try:
            out = [
                take(
                    lambda o, c, i=i: self.f.riftco_tokenizer_decoder_push(
                        dec, i, o, c, ctypes.byref(n)
                    )
                )
                for i in ids
            ]
            out.append(
                take(lambda o, c: self.f.riftco_tokenizer_decoder_flush(dec, o, c, ctypes.byref(n)))
            )
            return out
        finally:
            self.lib.check(self.f.riftco_tokenizer_decoder_free(dec))


@pytest.fixture(scope="module")
def tok_lib() -> Lib:
    path = library_path()
    if path is None:
        if os.environ.get("RIFTCO_CAPI_REQUIRED"):
            pytest.fail("libriftco not found (make capi builds it; or set RIFTCO_CAPI_LIB)")
        pytest.skip("libriftco is not built (make capi, or set RIFTCO_CAPI_LIB)")
    return Lib(path)


TABLES = ROOT / "packages/capi/tokenizer/src/unicode_tables.rs"


@functools.cache
def unlike_the_table() -> frozenset[int]:
    """Code points this Python classes otherwise than the library's generated table (none
    when both use the same Unicode version; newly assigned characters when they do not)."""
    source = TABLES.read_text()
    version = re.search(r'UNICODE_VERSION: &str = "([^"]+)"', source)
    if version and version.group(1) == unicodedata.unidata_version:
        return frozenset()
    from riftco.text import pretokenize

    runs = [
        (int(cp, 16), name) for cp, name in re.findall(r"\(0x([0-9A-F]+), Class::(\w+)\)", source)
    ]
    patterns = {
        "Letter": pretokenize._LETTER,
        "Number": pretokenize._NUMBER,
        "Space": pretokenize._WS,
        "Other": pretokenize._OTHER,
    }
    ends = [cp for cp, _ in runs[1:]] + [sys.maxunicode + 1]
    differ: set[int] = set()
    for (start, name), end in zip(runs, ends, strict=True):
        pattern = re.compile(patterns[name])
        differ.update(cp for cp in range(start, end) if not pattern.fullmatch(chr(cp)))
    return frozenset(differ)


def documentation() -> str:
    import pydoc_data.topics

    return "".join(pydoc_data.topics.topics.values())


def random_text(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            cp = rng.randrange(0x20, 0x7F)
        elif r < 0.45:
            cp = rng.choice([0x20, 0x20, 0x09, 0x0A, 0x0D, 0xA0, 0x3000, 0x1C, 0x1F, 0x85, 0x2028])
        elif r < 0.55:
            cp = rng.randrange(0x80, 0x100)
        elif r < 0.65:
            cp = ord(rng.choice("'sdtmlrev_0123456789<|>"))
        elif r < 0.85:
            cp = rng.randrange(0x100, 0x3000)
        else:
            cp = rng.randrange(0x3000, 0x110000)
        unlike = 0xD800 <= cp < 0xE000 or cp in unlike_the_table()
        out.append(chr(0xFFFD if unlike else cp))
    if rng.random() < 0.3:  # special-token text inside
        at = rng.randrange(len(out) + 1)
        out.insert(at, rng.choice(["<|endoftext|>", "<|user|>", "<|end|>", "<|assistant|>", "<|"]))
    return "".join(out)


def streamed(tok: Tokenizer, ids: list[int], skip: bool) -> list[str]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out = [
        decoder.decode(b"" if skip and i >= tok.base_vocab_size else tok.token_bytes(i))
        for i in ids
    ]
    return [*out, decoder.decode(b"", final=True)]


def outcome(fn, message: bool = True):
    """The result, or ``("refused", message)``: riftco-text's EncodeError and libriftco's
    invalid_argument say the same thing (the byte and its offset)."""
    try:
        return fn()
    except TokenizerError as exc:
        return ("refused", str(exc) if message else "")
    except CError as exc:
        assert exc.status == "invalid_argument", exc
        return ("refused", exc.message if message else "")


def corpus(rng: random.Random) -> str:
    return documentation()[:30_000] + "".join(random_text(rng, 200) for _ in range(20))


@pytest.fixture(scope="module", params=["bpe-none", "bpe-gpt2", "byte", "bpe-gpt2-rift"])
def pair(request, tok_lib, tmp_path_factory):
    rng = random.Random(hash(request.param) & 0xFFFF)
    kind = request.param
    if kind.startswith("bpe"):
        tok: Tokenizer = BpeTokenizer.train(corpus(rng), 600, 2, kind.split("-")[1])
    else:  # printable ASCII only: much of the random text holds a byte it cannot encode
        tok = ByteTokenizer.train("".join(map(chr, range(32, 127))) + "<|endoftext|><|system|>")
    folder = tmp_path_factory.mktemp(kind)
    if kind.endswith("rift"):
        from riftco.interchange import write_bundle

        path = folder / "model.rift"
        write_bundle(path, {"preset": "x"}, {"w": np.zeros(2, np.float32)}, tok.to_state())
    else:
        path = folder / "tokenizer.json"
        tok.save(path)
    ctok = CTokenizer.load(tok_lib, path)
    yield tok, ctok
    ctok.close()


def test_sizes_special_tokens_and_stop_ids(pair):
    tok, ctok = pair
    assert ctok.size() == tok.vocab_size
    assert ctok.size(base=True) == tok.base_vocab_size
    for text, i in tok.special_tokens.items():
        assert ctok.special(text) == i
    with pytest.raises(CError, match="expected one of the special tokens"):
        ctok.special("<|nope|>")
    assert ctok.eos_id() == tok.eos_id
    assert ctok.stop_ids(False) == list(tok.stop_ids())
    assert ctok.stop_ids(True) == list(tok.stop_ids(chat=True))


def test_encode_equals_riftco_text_on_random_text(pair):
    tok, ctok = pair
    rng = random.Random(1)
    for _ in range(300):
        text = random_text(rng, rng.randrange(0, 80))
        data = text.encode()
        for flags in (0, ALLOW_SPECIAL):
            ours = outcome(lambda d=data, f=flags: ctok.encode(d, f))
            theirs = outcome(lambda t=text, f=flags: tok.encode(t, allow_special=bool(f)))
            assert ours == theirs, text


def test_encode_bytes_equals_riftco_text_on_random_bytes(pair):
    tok, ctok = pair
    rng = random.Random(2)
    for _ in range(200):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        data += rng.choice([b"", "é€😀".encode(), b"\xed\xa0\x80", b"\xf0\x9f"])
        ours = outcome(lambda d=data: ctok.encode(d, BYTES))
        assert ours == outcome(lambda d=data: tok.encode_bytes(d))
    with pytest.raises(CError, match="expected UTF-8 text; found the invalid byte 0xff at byte"):
        ctok.encode(b"ok\xff", 0)


def test_encode_equals_riftco_text_on_documentation_and_every_code_point(pair):
    tok, ctok = pair
    text = documentation()[100_000:160_000]
    ours = outcome(lambda: ctok.encode(text.encode(), 0))
    assert ours == outcome(lambda: tok.encode(text))  # a byte tokenizer refuses "\n" alike
    if not isinstance(tok, BpeTokenizer) or tok.pretokenize != "gpt2":
        return
    rng = random.Random(3)
    unlike = unlike_the_table()
    points = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and cp not in unlike]
    rng.shuffle(points)
    for start in range(0, len(points), 50_000):  # every character, among others of every class
        chars = [chr(cp) for cp in points[start : start + 50_000]]
        text = "".join(c + (" " if rng.random() < 0.2 else "") for c in chars)
        assert ctok.encode(text.encode(), 0) == tok.encode(text)


def test_decode_and_streamed_decode_equal_riftco_text(pair):
    tok, ctok = pair
    rng = random.Random(4)
    multibyte = [b for b in "é€😀".encode() if b < tok.base_vocab_size]
    for _ in range(150):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(0, 30))]
        if multibyte and rng.random() < 0.5:
            ids = rng.sample(multibyte, len(multibyte)) + ids + multibyte[:2]
        assert ctok.decode(ids, 0) == tok.decode_bytes(ids)
        assert ctok.decode(ids, SKIP_SPECIAL) == tok.decode_bytes(ids, skip_special=True)
        assert ctok.decode(ids, REPLACE_INVALID).decode() == tok.decode(ids)
        assert ctok.stream(ids, 0) == streamed(tok, ids, False)
        assert ctok.stream(ids, SKIP_SPECIAL) == streamed(tok, ids, True)
    with pytest.raises(CError, match=f"found {tok.vocab_size} at position 1"):
        ctok.decode([0, tok.vocab_size], 0)


def test_chat_template_equals_riftco_text(pair):
    tok, ctok = pair
    rng = random.Random(5)
    roles = ["system", "user", "assistant", "tool"]
    for _ in range(100):
        messages = [
            (rng.choice(roles), random_text(rng, rng.randrange(0, 30)))
            for _ in range(rng.randrange(0, 5))
        ]
        prompt = rng.random() < 0.5
        ours = outcome(lambda m=messages, p=prompt: ctok.chat(m, p))
        theirs = outcome(
            lambda m=messages, p=prompt: (
                tok.apply_chat_template([{"role": r, "content": c} for r, c in m], p).ids
            )
        )
        assert ours == theirs, messages
    # content with a NUL byte, passed by length (a byte tokenizer without that byte refuses it)
    nul = [{"role": "user", "content": "a\x00b"}]
    ours = outcome(lambda: ctok.chat([("user", "a\x00b")], True))
    assert ours == outcome(lambda: tok.apply_chat_template(nul, True).ids)
    with pytest.raises(CError, match="expected a role among"):
        ctok.chat([("robot", "hi")], False)


def hostile_states(state: dict) -> list[dict]:
    def changed(fn) -> dict:
        s = json.loads(json.dumps(state))
        fn(s)
        return s

    out = [
        changed(lambda s: s.update(format_version=2)),
        changed(lambda s: s.update(method="unigram")),
        changed(lambda s: s.pop("chat_template")),
        changed(lambda s: s["special_tokens"][0].update(id=3)),
        changed(lambda s: s["special_tokens"][1].update(content="<|endoftext|>")),
        changed(lambda s: s.update(eos_token="<|missing|>")),
        changed(lambda s: s["chat_template"].update(assistant_role="bot")),
        changed(lambda s: s["chat_template"]["roles"]["user"].update(prefix="User:")),
    ]
    if "merges" in state:
        out += [
            changed(lambda s: s["merges"][1].__setitem__(2, 1000)),
            changed(lambda s: s["merges"][0].__setitem__(0, 9999)),
            changed(
                lambda s: s.update(
                    merges=[[97, 97, 256]] + [[256 + k, 256 + k, 257 + k] for k in range(24)]
                )
            ),
        ]
    else:
        out.append(changed(lambda s: s.update(byte_vocab=[66, 65])))
    return out


def test_hostile_states_are_refused_as_riftco_text_refuses_them(pair, tok_lib):
    tok, _ = pair
    for state in hostile_states(tok.to_state()):
        with pytest.raises(TokenizerError):
            tokenizer_from_state(state)
        with pytest.raises(CError) as info:
            CTokenizer.from_json(tok_lib, json.dumps(state).encode())
        assert info.value.status in ("format", "limit", "unsupported"), info.value
        assert "expected" in info.value.message


def test_hostile_files_are_refused_typed(tok_lib, tmp_path):
    cases = {
        tmp_path: "io",
        tmp_path / "missing.json": "io",
        Path("/dev/zero"): "io",
    }
    big = tmp_path / "big.rift"
    big.write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    cases[big] = "limit"
    trunc = tmp_path / "trunc.rift"
    trunc.write_bytes((100).to_bytes(8, "little") + b'{"__metadata__": {}}')
    cases[trunc] = "format"
    plain = tmp_path / "plain.safetensors"
    header = b'{"__metadata__": {"x": "y"}}'
    plain.write_bytes(len(header).to_bytes(8, "little") + header)
    cases[plain] = "format"
    dup = tmp_path / "dup.json"
    dup.write_bytes(b'{"format": "riftco-text/tokenizer", "format": "x"}')
    cases[dup] = "format"
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        cases[fifo] = "io"  # refused without waiting for a writer
    for path, status in cases.items():
        with pytest.raises(CError) as info:
            CTokenizer.load(tok_lib, path)
        assert info.value.status == status, (path, info.value)


def test_a_bundle_whose_manifest_was_changed_is_refused(tok_lib, tmp_path):
    from riftco.interchange import read_manifest, write_bundle
    from riftco.interchange.errors import IntegrityError

    tok = BpeTokenizer.train("hello there, general kenobi " * 20, 300)
    path = tmp_path / "model.rift"
    write_bundle(path, {"preset": "x"}, {"w": np.zeros(2, np.float32)}, tok.to_state())
    CTokenizer.load(tok_lib, path).close()
    data = path.read_bytes()
    at = data.index(b"<|user|>")  # inside the tokenizer state: same length, other text
    path.write_bytes(data[:at] + b"<|usor|>" + data[at + 8 :])
    with pytest.raises(IntegrityError):
        read_manifest(path)
    with pytest.raises(CError) as info:
        CTokenizer.load(tok_lib, path)
    assert info.value.status == "checksum", info.value
    assert "the manifest hashes to" in info.value.message


def test_null_and_wrong_handles_are_errors(tok_lib, pair):
    lib, (_, ctok) = tok_lib, pair
    n = ctypes.c_uint32()
    f = lib.lib
    assert STATUS[f.riftco_tokenizer_vocab_size(None, ctypes.byref(n))] == "null_handle"
    dec = ctypes.c_void_p()
    lib.check(f.riftco_tokenizer_decoder_new(ctok.h, 0, ctypes.byref(dec)))
    assert STATUS[f.riftco_tokenizer_vocab_size(dec, ctypes.byref(n))] == "wrong_handle"
    assert "expected a RiftcoTokenizer handle" in f.riftco_last_error().decode()
    size = ctypes.c_size_t()
    assert STATUS[f.riftco_tokenizer_decoder_push(ctok.h, 0, None, 0, ctypes.byref(size))] == (
        "wrong_handle"
    )
    lib.check(f.riftco_tokenizer_decoder_free(dec))
    assert STATUS[f.riftco_tokenizer_encode(ctok.h, b"x", 1, 0, None, 0, None)] == "null_handle"
