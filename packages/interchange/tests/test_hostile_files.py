"""Hostile files against every reader here: each ends in a typed error, in bounded time
and memory. Truncation at every offset and bit flips of a small bundle, non-regular
files, chained merges, configurations larger than their tensors, wrongly typed
config.json fields, and integers past Python's digit limit."""

from __future__ import annotations

import json
import os
import struct
import time

import numpy as np
import pytest

from riftco.core import read_bounded
from riftco.interchange import (
    BundleError,
    ContainerError,
    ConversionError,
    WeightsError,
    load_bundle,
    read_bundle,
    read_safetensors,
    write_bundle,
)
from riftco.interchange.container import strict_json
from riftco.interchange.huggingface import export_huggingface, import_huggingface
from riftco.interchange.layout import check_shapes, expected_shapes, tensor_count
from riftco.nn import TransformerConfig
from riftco.tensor import RiftcoError
from riftco.text import StateError, tokenizer_from_state
from riftco.text.base import FORMAT, FORMAT_VERSION

SIZES = dict(vocab_size=300, context_length=16, d_model=8, n_layers=2, n_heads=2, d_ff=32)
GPT = TransformerConfig.preset("gpt2", **SIZES)
LLAMA = TransformerConfig.preset("llama", **dict(SIZES, d_ff=24), kv_heads=1)


@pytest.fixture
def small_bundle(tmp_path, tokenizer, random_arrays):
    config = GPT.replace(vocab_size=tokenizer.vocab_size)
    path = tmp_path / "small.rift"
    write_bundle(path, config.to_dict(), random_arrays(config), tokenizer.to_state())
    return path


def _typed(call) -> BaseException | None:
    """Run ``call``; a typed riftco error (or success) is fine, anything else fails."""
    try:
        call()
    except (RiftcoError, ValueError) as exc:
        assert type(exc).__module__.startswith("riftco."), repr(exc)
        return exc
    return None


# -- truncation and bit flips ---------------------------------------------------------


def test_truncation_at_every_offset_is_a_typed_error(small_bundle, tmp_path):
    raw = small_bundle.read_bytes()
    cut = tmp_path / "cut.rift"
    start = time.monotonic()
    for offset in range(0, len(raw), max(1, len(raw) // 1500)):
        cut.write_bytes(raw[:offset])
        assert _typed(lambda: load_bundle(cut)) is not None, offset
    assert time.monotonic() - start < 120


def test_bit_flips_are_typed_errors(small_bundle, tmp_path):
    raw = bytearray(small_bundle.read_bytes())
    rng = np.random.default_rng(0)
    flipped = tmp_path / "flipped.rift"
    for position in rng.integers(0, len(raw), 300):
        damaged = bytearray(raw)
        damaged[position] ^= 1 << int(rng.integers(0, 8))
        flipped.write_bytes(bytes(damaged))
        assert _typed(lambda: load_bundle(flipped)) is not None, position


@pytest.mark.parametrize("size", [2**63 - 1, 2**64 - 1, 2**40, 0])
def test_huge_header_size_fields(tmp_path, size):
    path = tmp_path / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", size) + b"{}")
    with pytest.raises(ContainerError):
        read_safetensors(path)


def test_huge_and_negative_offsets(tmp_path):
    path = tmp_path / "offsets.safetensors"
    for offsets in ([0, 2**62], [-4, 4], [8, 0], [0, "4"]):
        header = json.dumps({"x": {"dtype": "F32", "shape": [1], "data_offsets": offsets}})
        path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 4)
        with pytest.raises(ContainerError):
            read_safetensors(path)


# -- non-regular files ------------------------------------------------------------------


def _specials(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link-to-zero"
    link.symlink_to("/dev/zero")
    return [fifo, link, "/dev/zero", "/dev/urandom", tmp_path]


def test_non_regular_files_are_refused(tmp_path):
    for path in _specials(tmp_path):
        with pytest.raises(ContainerError, match="regular file"):
            read_bounded(path, 1 << 20, ContainerError)
        with pytest.raises(ContainerError, match="regular file"):
            read_safetensors(path)
        with pytest.raises((BundleError, ContainerError), match="regular file"):
            read_bundle(path)


def test_hf_config_and_tokenizer_that_are_devices_are_refused(tmp_path, random_arrays):
    export_huggingface(tmp_path, GPT, random_arrays(GPT), None)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").symlink_to("/dev/zero")
    with pytest.raises(ConversionError, match="regular file"):
        import_huggingface(tmp_path, require_tokenizer=False)


def test_read_bounded_stops_at_the_limit(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 1000)
    with pytest.raises(ContainerError, match="at most 999"):
        read_bounded(path, 999, ContainerError)
    assert read_bounded(path, 1000, ContainerError) == b"x" * 1000


# -- tokenizer state: chained merges --------------------------------------------------


def _chained_state(depth: int) -> dict:
    merges = [[97, 97, 256]] + [[256 + k, 256 + k, 257 + k] for k in range(depth - 1)]
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "method": "bpe",
        "options": {"pretokenize": "none"},
        "merges": merges,
        "special_tokens": [],
        "eos_token": None,
        "chat_template": None,
    }


def test_chained_merges_demanding_terabytes_are_refused_fast():
    state = _chained_state(40)  # 2**40 bytes for the last token
    start = time.monotonic()
    with pytest.raises(StateError, match="bytes"):
        tokenizer_from_state(state)
    assert time.monotonic() - start < 2


def test_many_long_tokens_are_refused_by_the_total():
    # 2**15-byte tokens well under the per-token bound, but 4096 of them
    merges = [[97, 97, 256]] + [[256 + k, 256 + k, 257 + k] for k in range(13)]
    merges += [[269, 269, 270 + k] for k in range(4096)]
    state = {**_chained_state(1), "merges": merges}
    with pytest.raises(StateError, match="in all"):
        tokenizer_from_state(state)


@pytest.mark.parametrize(
    "field, value",
    [
        ("method", ["bpe"]),
        ("method", {"a": 1}),
        ("options", {"pretokenize": ["x"]}),
        ("eos_token", ["x"]),
        ("special_tokens", [{"id": [1], "content": "x"}]),
        ("chat_template", [1]),
        ("merges", [[{"a": 1}, 1, 256]]),
    ],
)
def test_unhashable_state_fields_are_state_errors(field, value):
    state = {**_chained_state(1), field: value}
    with pytest.raises(StateError):
        tokenizer_from_state(state)


# -- configurations against tensors ---------------------------------------------------


@pytest.mark.parametrize("topology", [GPT, LLAMA, GPT.replace(tie_embeddings=True)])
def test_tensor_count_matches_expected_shapes(topology):
    assert tensor_count(topology) == len(expected_shapes(topology))


def test_ten_million_layers_beside_real_tensors_are_refused_fast(random_arrays):
    shapes = {n: a.shape for n, a in random_arrays(GPT).items()}
    start = time.monotonic()
    with pytest.raises(WeightsError, match="implies"):
        check_shapes(GPT.replace(n_layers=3000), shapes)
    with pytest.raises(WeightsError, match="past the supported"):
        check_shapes(GPT.replace(n_layers=10**7), shapes)
    assert time.monotonic() - start < 1


def test_bundle_with_ten_million_layers_is_refused(tmp_path, tokenizer, random_arrays):
    config = GPT.replace(vocab_size=tokenizer.vocab_size)
    path = tmp_path / "layers.rift"
    write_bundle(path, config.to_dict(), random_arrays(config), tokenizer.to_state())
    stored = read_bundle(path)
    hostile = dict(stored.config, n_layers=10**7)
    write_bundle(path, hostile, dict(stored.tensors), stored.tokenizer_state)
    start = time.monotonic()
    with pytest.raises(WeightsError):
        load_bundle(path)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("family", [GPT, LLAMA])
def test_bundle_with_a_huge_context_length_is_refused_before_building(
    tmp_path, tokenizer, random_arrays, family
):
    config = family.replace(vocab_size=tokenizer.vocab_size)
    path = tmp_path / "context.rift"
    write_bundle(path, config.to_dict(), random_arrays(config), tokenizer.to_state())
    stored = read_bundle(path)
    hostile = dict(stored.config, context_length=2**40)
    write_bundle(path, hostile, dict(stored.tensors), stored.tokenizer_state)
    with pytest.raises(WeightsError, match="context_length"):
        load_bundle(path)


# -- config.json field types ----------------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("tie_word_embeddings", "false"),
        ("tie_word_embeddings", 0),
        ("layer_norm_epsilon", "1e-5"),
        ("layer_norm_epsilon", [1]),
        ("n_layer", 10**40),
        ("n_embd", "8"),
        ("activation_function", ["gelu"]),
        ("scale_attn_weights", 1),
        ("architectures", 6),  # found by the hf_directory fuzzer
        ("architectures", [["GPT2LMHeadModel"]]),
    ],
)
def test_gpt2_config_fields_are_type_checked(tmp_path, random_arrays, key, value):
    export_huggingface(tmp_path, GPT, random_arrays(GPT), None)
    config = json.loads((tmp_path / "config.json").read_text())
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match=key):
        import_huggingface(tmp_path, require_tokenizer=False)


@pytest.mark.parametrize(
    "key, value",
    [
        ("tie_word_embeddings", "false"),
        ("rms_norm_eps", "x"),
        ("rope_parameters", {"rope_type": "default", "rope_theta": "1e4"}),
        ("head_dim", "4"),
        ("num_key_value_heads", [1]),
        ("attention_bias", 0),
    ],
)
def test_llama_config_fields_are_type_checked(tmp_path, random_arrays, key, value):
    export_huggingface(tmp_path, LLAMA, random_arrays(LLAMA), None)
    config = json.loads((tmp_path / "config.json").read_text())
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match=key.replace("rope_parameters", "rope_theta")):
        import_huggingface(tmp_path, require_tokenizer=False)


# -- JSON within bounds -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw", [b"9" * 5000, b'{"a": ' + b"9" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000]
)
def test_strict_json_refuses_huge_integers_and_deep_nesting(raw):
    with pytest.raises(ContainerError):
        strict_json(raw, "test")


def test_safetensors_header_with_a_5000_digit_integer(tmp_path):
    header = b'{"x": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}'
    path = tmp_path / "digits.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(ContainerError):
        read_safetensors(path)


def test_lone_surrogate_tensor_name(tmp_path):
    header = b'{"\\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    path = tmp_path / "surrogate.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(ContainerError, match="surrogate"):
        read_safetensors(path)
    with pytest.raises(ContainerError, match="surrogate"):
        load_bundle(path)


# -- convert and inspect ----------------------------------------------------------------


def test_convert_refuses_a_tokenizer_larger_than_the_vocabulary(tmp_path, tokenizer, random_arrays):
    from riftco.interchange import convert
    from riftco.interchange.cli import convert_main

    small = GPT.replace(vocab_size=tokenizer.vocab_size - 1)
    export_huggingface(tmp_path / "hf", small, random_arrays(small), None)
    from riftco.text import save_hf_tokenizer_json

    save_hf_tokenizer_json(tokenizer, tmp_path / "hf" / "tokenizer.json")
    with pytest.raises(ConversionError, match="nothing was written"):
        convert(tmp_path / "hf", tmp_path / "out.rift", "rift")
    assert not (tmp_path / "out.rift").exists()
    assert convert_main([str(tmp_path / "hf"), str(tmp_path / "out.rift"), "--to", "rift"]) != 0


def test_inspect_says_plain_safetensors_are_not_checksummed(tmp_path, capsys):
    from riftco.interchange import write_safetensors
    from riftco.interchange.cli_inspect import describe, main

    path = tmp_path / "plain.safetensors"
    write_safetensors(path, {"x": np.ones(3, np.float32)})
    report = describe(path)
    assert report["integrity"].startswith("not verified") and report["values"] == "all finite"
    assert main([str(path)]) == 0
    write_safetensors(path, {"x": np.array([1.0, np.nan], np.float32)})
    assert describe(path)["values"].startswith("FAILED: NaN or infinity in x")
    assert main([str(path)]) == 1


def test_inspect_says_what_a_bundle_check_covers(small_bundle):
    from riftco.interchange.cli_inspect import describe

    report = describe(small_bundle)
    assert report["integrity"] == "ok" and report["values"] == "all finite"
    assert "SHA-256" in report["verified"]


def test_a_gguf_magic_cut_inside_the_first_key_length(tmp_path):
    # found by fuzz/harness_bundle.py: 24 header bytes, then fewer than 8
    path = tmp_path / "short.rift"
    path.write_bytes(b'GGUF"metc:_{\x01\x00\x00\x00\x00\x00\x00""VRR":[288<')
    with pytest.raises((BundleError, ContainerError)):
        load_bundle(path)


@pytest.mark.parametrize(
    "header",
    [
        # found by fuzz/harness_safetensors.py: dimensions whose product has >4,300 digits
        b'{"x": {"dtype": "F32", "shape": ['
        + b",".join([b"9" * 4000] * 3)
        + b'], "data_offsets": [0, 4]}}',
        b'{"x": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}',
    ],
)
def test_shapes_past_any_file_and_unhashable_dtypes(tmp_path, header):
    path = tmp_path / "claims.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    with pytest.raises(ContainerError):
        read_safetensors(path)
