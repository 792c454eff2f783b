"""Hostile GGUF and ONNX files: truncation at spread-out offsets, bit flips, huge
counts and lengths; each a typed error in bounded time. (Runs where gguf and onnx
are installed: tox env test-interchange-formats.)"""

from __future__ import annotations

import shutil
import struct
import time

import numpy as np
import pytest

from riftco.interchange import export_gguf_model, export_onnx_model, import_gguf, import_onnx
from riftco.nn import DecoderOnlyTransformer, TransformerConfig
from riftco.tensor import RiftcoError
from riftco.text import BpeTokenizer, TokenizerError

CORPUS = "the quick brown fox jumps over the lazy dog. hello world, hello there.\n" * 20


@pytest.fixture(scope="module")
def tiny():
    tokenizer = BpeTokenizer.train(CORPUS, vocab_size=280, pretokenize="gpt2")
    config = TransformerConfig.preset(
        "gpt2",
        vocab_size=tokenizer.vocab_size,
        context_length=16,
        d_model=8,
        n_layers=1,
        n_heads=2,
        d_ff=16,
    )
    return DecoderOnlyTransformer(config, seed=0), tokenizer


def _typed(call) -> None:
    try:
        call()
    except (RiftcoError, TokenizerError):
        pass


def _damaged(raw: bytes, count: int = 200):
    rng = np.random.default_rng(0)
    for offset in np.linspace(0, len(raw) - 1, count).astype(int):
        yield raw[:offset]
    for position in rng.integers(0, len(raw), count):
        flipped = bytearray(raw)
        flipped[position] ^= 1 << int(rng.integers(0, 8))
        yield bytes(flipped)


def test_gguf_truncations_and_bit_flips(tmp_path, tiny):
    pytest.importorskip("gguf")
    model, tokenizer = tiny
    path = tmp_path / "tiny.gguf"
    export_gguf_model(model, path, tokenizer)
    raw = path.read_bytes()
    damaged = tmp_path / "damaged.gguf"
    start = time.monotonic()
    for variant in _damaged(raw):
        damaged.write_bytes(variant)
        _typed(lambda: import_gguf(damaged, require_tokenizer=False))
    assert time.monotonic() - start < 120


@pytest.mark.parametrize("field", [8, 16])  # the tensor count, the metadata count
def test_gguf_huge_counts(tmp_path, tiny, field):
    pytest.importorskip("gguf")
    model, tokenizer = tiny
    path = tmp_path / "tiny.gguf"
    export_gguf_model(model, path, tokenizer)
    raw = bytearray(path.read_bytes())
    raw[field : field + 8] = struct.pack("<Q", 2**62)
    path.write_bytes(bytes(raw))
    with pytest.raises(RiftcoError):
        import_gguf(path, require_tokenizer=False)


def test_onnx_truncations_and_bit_flips(tmp_path, tiny):
    pytest.importorskip("onnx")
    model, tokenizer = tiny
    folder = tmp_path / "good"
    folder.mkdir()
    export_onnx_model(model, folder / "tiny.onnx", tokenizer, external_data=False)
    names = sorted(p.name for p in folder.iterdir())
    work = tmp_path / "work"
    start = time.monotonic()
    for name in names:
        raw = (folder / name).read_bytes()
        for variant in _damaged(raw, 60):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(folder, work)
            (work / name).write_bytes(variant)
            _typed(lambda: import_onnx(work / "tiny.onnx"))
    assert time.monotonic() - start < 180


HOSTILE_JSON = ["[" * 100_000 + "]" * 100_000, '{"a": ' + "9" * 5000 + "}", '{"a": 1, "a": 2}']


@pytest.mark.parametrize("value", HOSTILE_JSON)
def test_gguf_riftco_metadata_json_deeply_nested_or_huge(tiny, value):
    from riftco.interchange import ConversionError
    from riftco.interchange.gguf_import import _reconcile
    from riftco.interchange.gguf_tokenizer import _riftco_state
    from riftco.interchange.lineage import parse_lineage

    model, _ = tiny
    with pytest.raises(ConversionError, match="riftco.tokenizer"):
        _riftco_state({"riftco.tokenizer": value})
    with pytest.raises(ConversionError, match="riftco.config"):
        _reconcile(model.config, {"riftco.config": value})
    with pytest.raises(ConversionError, match="riftco.lineage"):
        parse_lineage(value, "riftco.lineage")
