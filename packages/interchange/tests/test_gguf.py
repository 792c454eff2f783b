"""GGUF export and import: llama.cpp's names, keys and layouts, a llama.cpp-convention
forward pass on the tensors ``gguf`` reads back, refusals, and exact round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from riftco.autograd import no_grad  # noqa: E402
from riftco.interchange import (  # noqa: E402
    ConversionError,
    export_gguf,
    export_gguf_model,
    import_gguf,
    import_gguf_model,
    load_bundle,
    model_arrays,
    save_bundle,
)
from riftco.testing.llamacpp import llamacpp_logits  # noqa: E402
from riftco.text import BpeTokenizer, ByteTokenizer  # noqa: E402

CASES = [
    ("gpt2", {}),
    ("gpt2", {"tie_embeddings": True}),
    ("gpt2", {"linear_bias": False}),
    ("llama", {}),
    ("llama", {"kv_heads": 1, "rope_theta": 500.0}),
    ("llama", {"tie_embeddings": True, "n_heads": 4}),
]
IDS = ["gpt2", "gpt2-tied", "gpt2-bias-free", "llama", "llama-gqa", "llama-tied"]
PROMPTS = ["the quick brown fox", "hello there, lazy dog. the end"]


def _logits(model, ids):
    with no_grad():
        return np.asarray(model(np.asarray([ids])).numpy(), dtype=np.float64)[0]


def _reader(path):
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    return fields, {t.name: t for t in reader.tensors}


@pytest.mark.parametrize(("preset", "overrides"), CASES, ids=IDS)
def test_round_trip_is_exact(tmp_path, make_model, tokenizer, preset, overrides):
    model = make_model(preset, **overrides)
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer)
    back = import_gguf(path)
    assert back.model_config == model.config
    assert back.tokenizer == tokenizer  # the exact state: merges, specials, chat template
    arrays = model_arrays(model)
    assert set(back.arrays) == set(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(back.arrays[name], array, err_msg=name)


@pytest.mark.parametrize(("preset", "overrides"), CASES, ids=IDS)
def test_llamacpp_convention_forward_matches_ours(
    tmp_path, make_model, tokenizer, preset, overrides
):
    model = make_model(preset, **overrides)
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer)
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt)
        reference = llamacpp_logits(path, ids)
        assert reference.shape == (len(ids), model.config.vocab_size)
        np.testing.assert_allclose(reference, _logits(model, ids), atol=2e-5, rtol=0)


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_f16_stores_matrices_in_half_precision(tmp_path, make_model, tokenizer, preset):
    model = make_model(preset)
    arrays = model_arrays(model)
    path = export_gguf(tmp_path / "m.gguf", model.config, arrays, tokenizer, dtype="f16")
    fields, tensors = _reader(path)
    assert fields["general.file_type"] == gguf.LlamaFileType.MOSTLY_F16
    for name, tensor in tensors.items():
        half = len(tensor.shape) == 2 and name != "position_embd.weight"
        expected = gguf.GGMLQuantizationType.F16 if half else gguf.GGMLQuantizationType.F32
        assert tensor.tensor_type == expected, name
    back = import_gguf(path)
    rounded = {name: a.astype(np.float16).astype(np.float32) for name, a in arrays.items()}
    for name, array in back.arrays.items():
        expected = (
            rounded[name]
            if array.ndim == 2 and name != "position_embedding.weight"
            else arrays[name]
        )
        np.testing.assert_array_equal(array, expected, err_msg=name)
    ids = tokenizer.encode(PROMPTS[0])
    model.load_state_dict(back.arrays)
    np.testing.assert_allclose(llamacpp_logits(path, ids), _logits(model, ids), atol=2e-5)


def test_gpt2_keys_names_and_layout(tmp_path, make_model, tokenizer):
    model = make_model("gpt2")
    arrays = model_arrays(model)
    path = export_gguf(tmp_path / "m.gguf", model.config, arrays, tokenizer)
    fields, tensors = _reader(path)
    c = model.config
    assert fields["GGUF.version"] == 3
    assert fields["general.architecture"] == "gpt2"
    expected_keys = {
        "gpt2.context_length": c.context_length,
        "gpt2.embedding_length": c.d_model,
        "gpt2.block_count": c.n_layers,
        "gpt2.feed_forward_length": c.d_ff,
        "gpt2.attention.head_count": c.n_heads,
        "general.file_type": gguf.LlamaFileType.ALL_F32,
    }
    for key, value in expected_keys.items():
        assert fields[key] == value, key
    assert fields["gpt2.attention.layer_norm_epsilon"] == pytest.approx(c.norm_eps)
    layer = {
        f"blk.0.{n}.{p}"
        for n in ("attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down")
        for p in ("weight", "bias")
    }
    assert layer <= set(tensors)
    assert {
        "token_embd.weight",
        "position_embd.weight",
        "output_norm.bias",
        "output.weight",
    } <= set(tensors)
    # ggml's ne is [in, out]: the fused query/key/value weight is [d_model, 3 * d_model].
    assert list(tensors["blk.1.attn_qkv.weight"].shape) == [c.d_model, 3 * c.d_model]
    qkv = np.asarray(tensors["blk.1.attn_qkv.weight"].data)
    np.testing.assert_array_equal(
        qkv[c.d_model : 2 * c.d_model], arrays["blocks.1.attention.key.weight"]
    )
    assert list(tensors["blk.0.ffn_up.weight"].shape) == [c.d_model, c.d_ff]


def test_llama_query_and_key_rows_follow_llamacpps_converter(tmp_path, make_model, tokenizer):
    model = make_model("llama", kv_heads=1)
    arrays = model_arrays(model)
    path = export_gguf(tmp_path / "m.gguf", model.config, arrays, tokenizer)
    fields, tensors = _reader(path)
    c = model.config

    def permute(weights, n_head):  # llama.cpp's convert_hf_to_gguf.py LlamaModel.permute
        return (
            weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape)
        )

    q = np.asarray(tensors["blk.0.attn_q.weight"].data)
    k = np.asarray(tensors["blk.0.attn_k.weight"].data)
    np.testing.assert_array_equal(q, permute(arrays["blocks.0.attention.query.weight"], c.n_heads))
    np.testing.assert_array_equal(k, permute(arrays["blocks.0.attention.key.weight"], 1))
    assert fields["llama.attention.head_count_kv"] == 1
    assert fields["llama.rope.dimension_count"] == c.head_dim
    assert fields["llama.rope.freq_base"] == pytest.approx(c.rope_theta)
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(c.norm_eps)
    assert {"blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight"} <= set(tensors)
    assert not any(name.endswith(".bias") for name in tensors)


def test_tokenizer_section(tmp_path, make_model, tokenizer):
    model = make_model("gpt2")
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer)
    fields, _ = _reader(path)
    assert fields["tokenizer.ggml.model"] == "gpt2"
    assert fields["tokenizer.ggml.pre"] == "gpt-2"
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == model.config.vocab_size  # padded to the model
    assert tokens[ord("a")] == "a" and tokens[ord(" ")] == "Ġ"  # GPT-2's byte characters
    eos = tokenizer.eos_id
    assert tokens[eos] == "<|endoftext|>" and types[eos] == gguf.TokenType.CONTROL
    assert fields["tokenizer.ggml.eos_token_id"] == fields["tokenizer.ggml.bos_token_id"] == eos
    assert tokens[-1] == f"[PAD{len(tokens) - 1}]" and types[-1] == gguf.TokenType.UNUSED
    assert types[0] == gguf.TokenType.NORMAL
    left, right = tokenizer.merges[0]
    first = fields["tokenizer.ggml.merges"][0]
    assert first == f"{tokens[left]} {tokens[right]}"
    assert len(fields["tokenizer.ggml.merges"]) == len(tokenizer.merges)
    assert fields["tokenizer.ggml.add_bos_token"] is False
    assert "message['role']" in fields["tokenizer.chat_template"]
    assert fields["riftco.tokenizer.llama_cpp"].startswith("near:")


def test_byte_tokenizer_writes_an_empty_merges_array(tmp_path, make_model):
    tokenizer = ByteTokenizer.train("hello byte world")
    model = make_model("llama")
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer)
    fields, _ = _reader(path)
    assert fields["tokenizer.ggml.merges"] == []  # llama.cpp needs the key
    assert fields["riftco.tokenizer.llama_cpp"] == "exact"
    assert import_gguf(path).tokenizer == tokenizer


def test_unsplit_bpe_is_refused_unless_the_mismatch_is_accepted(tmp_path, make_model):
    tokenizer = BpeTokenizer.train("abababab cdcdcd " * 8, vocab_size=270, pretokenize="none")
    model = make_model("gpt2")
    arrays = model_arrays(model)
    with pytest.raises(ConversionError, match="pre-tokenizer"):
        export_gguf(tmp_path / "m.gguf", model.config, arrays, tokenizer)
    assert not (tmp_path / "m.gguf").exists()
    path = export_gguf(
        tmp_path / "m.gguf", model.config, arrays, tokenizer, allow_tokenizer_mismatch=True
    )
    fields, _ = _reader(path)
    assert fields["riftco.tokenizer.llama_cpp"].startswith("mismatch:")
    assert import_gguf(path).tokenizer == tokenizer


@pytest.mark.parametrize(
    ("preset", "overrides", "reason"),
    [
        ("riftco_v1", {}, "tanh form of GELU"),
        ("gpt2", {"gelu": "exact"}, "exact GELU"),
        ("gpt2", {"head_bias": True}, "head bias"),
        ("gpt2", {"kv_heads": 1}, "grouped-query"),
        ("llama", {"sliding_window": 8}, "sliding-window"),
        ("llama", {"linear_bias": True}, "bias-free"),
    ],
)
def test_refusals_name_the_reason(tmp_path, make_model, tokenizer, preset, overrides, reason):
    model = make_model(preset, **overrides)
    with pytest.raises(ConversionError, match=reason):
        export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer)
    assert not list(tmp_path.iterdir())  # nothing written, no temporary left behind


def test_f16_overflow_is_refused(tmp_path, make_model, tokenizer):
    model = make_model("gpt2")
    arrays = model_arrays(model)
    arrays["blocks.0.feed_forward.expand.weight"][0, 0] = 1e6
    with pytest.raises(ConversionError, match="float16"):
        export_gguf(tmp_path / "m.gguf", model.config, arrays, tokenizer, dtype="f16")


def test_runnable_models_and_lineage(tmp_path, make_model, tokenizer):
    save_bundle(tmp_path / "a.rift", make_model("llama"), tokenizer, stage="post_training")
    runnable = load_bundle(tmp_path / "a.rift")
    export_gguf_model(runnable, tmp_path / "a.gguf")
    back = import_gguf_model(tmp_path / "a.gguf")
    assert back.origin["parent_id"] == runnable.artifact_id
    assert back.origin["metadata"]["source"] == "gguf"
    assert back.generate("the quick", max_new_tokens=6) == runnable.generate(
        "the quick", max_new_tokens=6
    )
    lineage = json.loads(_reader(tmp_path / "a.gguf")[0]["riftco.lineage"])
    assert lineage == {
        "artifact_id": runnable.artifact_id,
        "parent_id": None,
        "stage": "post_training",
    }


def test_convert_command(tmp_path, make_model, tokenizer, capsys):
    from riftco.interchange.cli import convert_main

    manifest = save_bundle(tmp_path / "a.rift", make_model("gpt2"), tokenizer)
    args = [str(tmp_path / "a.rift"), str(tmp_path / "a.gguf"), "--to", "gguf", "--dtype", "f16"]
    assert convert_main(args) == 0
    assert _reader(tmp_path / "a.gguf")[0]["general.file_type"] == gguf.LlamaFileType.MOSTLY_F16
    assert convert_main([str(tmp_path / "a.gguf"), str(tmp_path / "b.rift"), "--to", "rift"]) == 0
    back = load_bundle(tmp_path / "b.rift")
    assert back.manifest["stage"] == "imported"
    assert back.manifest["parent_id"] == manifest["artifact_id"]
    assert back.tokenizer == tokenizer
    capsys.readouterr()
    save_bundle(tmp_path / "v1.rift", make_model("riftco_v1"), tokenizer)
    assert convert_main([str(tmp_path / "v1.rift"), str(tmp_path / "v1.gguf"), "--to", "gguf"]) == 1
    assert "tanh form of GELU" in capsys.readouterr().err
    assert not (tmp_path / "v1.gguf").exists()


def test_a_missing_library_names_the_extra(tmp_path, make_model, tokenizer, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gguf", None)
    model = make_model("gpt2")
    with pytest.raises(ConversionError, match=r"riftco-interchange\[gguf\]"):
        export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer)
