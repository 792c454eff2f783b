"""GPT-2 and Llama directories as files: names, layouts, refusals, ignored buffers, tied heads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.numpy

from riftco.interchange import ConversionError
from riftco.interchange.huggingface import export_huggingface, import_huggingface
from riftco.nn import TransformerConfig
from riftco.text import BpeTokenizer

SIZES = dict(vocab_size=300, context_length=16, d_model=8, n_layers=2, n_heads=2, d_ff=32)
GPT = TransformerConfig.preset("gpt2", **SIZES)
LLAMA = TransformerConfig.preset("llama", **dict(SIZES, d_ff=24), kv_heads=1, rope_theta=500.0)
CASES = [
    GPT,
    GPT.replace(tie_embeddings=True),
    GPT.replace(gelu="exact"),
    LLAMA,
    LLAMA.replace(tie_embeddings=True),
]


@pytest.mark.parametrize(
    "topology", CASES, ids=lambda c: f"{c.family}-tied{c.tie_embeddings}-{c.gelu}-kv{c.n_kv_heads}"
)
def test_round_trip(tmp_path, topology, random_arrays, tokenizer):
    arrays = random_arrays(topology)
    export_huggingface(tmp_path, topology, arrays, tokenizer)
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    }
    back = import_huggingface(tmp_path)
    assert back.model_config == topology
    assert back.tokenizer == tokenizer
    assert set(back.arrays) == set(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(back.arrays[name], array, err_msg=name)


def test_generation_config_lists_every_stop_token(tmp_path, random_arrays, tokenizer):
    topology = CASES[0]
    export_huggingface(tmp_path, topology, random_arrays(topology), tokenizer)
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    # transformers' generate() stops at any of them: end-of-text and the end of a turn.
    assert generation["eos_token_id"] == list(tokenizer.stop_ids(chat=True))
    assert tokenizer.special_tokens["<|end|>"] in generation["eos_token_id"]
    plain = BpeTokenizer.train("the quick brown fox " * 8, vocab_size=280, chat_template=None)
    export_huggingface(tmp_path / "plain", topology, random_arrays(topology), plain)
    plain_generation = json.loads((tmp_path / "plain" / "generation_config.json").read_text())
    assert plain_generation["eos_token_id"] == plain.eos_id


def test_export_warns_where_tokenizers_would_split_differently(tmp_path, random_arrays):
    import warnings

    from riftco.interchange.huggingface import TokenizerParityWarning

    topology = CASES[0]
    mixed = BpeTokenizer.train("x² y² x² area x² " * 30, vocab_size=270, pretokenize="gpt2")
    assert any("x²" in mixed.token_bytes(i).decode("utf-8", "ignore") for i in range(270))
    with pytest.warns(TokenizerParityWarning, match=r"'x²'"):
        export_huggingface(tmp_path / "a", topology, random_arrays(topology), mixed)
    plain = BpeTokenizer.train("the quick brown fox " * 8, vocab_size=280, pretokenize="gpt2")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TokenizerParityWarning)
        export_huggingface(tmp_path / "b", topology, random_arrays(topology), plain)


def test_gpt2_layout(tmp_path, random_arrays):
    arrays = random_arrays(GPT)
    export_huggingface(tmp_path, GPT, arrays, None)
    stored = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    c_attn = stored["transformer.h.0.attn.c_attn.weight"]
    assert c_attn.shape == (8, 24)  # Conv1D: [in, out], outputs [q | k | v]
    np.testing.assert_array_equal(c_attn[:, 8:16], arrays["blocks.0.attention.key.weight"].T)
    np.testing.assert_array_equal(
        stored["transformer.h.1.mlp.c_fc.weight"], arrays["blocks.1.feed_forward.expand.weight"].T
    )
    config = json.loads((tmp_path / "config.json").read_text())
    assert (
        config["architectures"] == ["GPT2LMHeadModel"]
        and config["activation_function"] == "gelu_new"
    )
    assert config["tie_word_embeddings"] is False and "lm_head.weight" in stored


def test_tied_export_omits_the_head(tmp_path, random_arrays):
    topology = GPT.replace(tie_embeddings=True)
    export_huggingface(tmp_path, topology, random_arrays(topology), None)
    assert "lm_head.weight" not in safetensors.numpy.load_file(tmp_path / "model.safetensors")


def test_bias_free_gpt_exports_zero_biases(tmp_path, random_arrays):
    topology = GPT.replace(linear_bias=False)
    export_huggingface(tmp_path, topology, random_arrays(topology), None)
    stored = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    assert not stored["transformer.h.0.attn.c_attn.bias"].any()


@pytest.mark.parametrize(
    ("topology", "match"),
    [
        (GPT.replace(head_bias=True), "no language-model head bias"),
        (GPT.replace(sliding_window=4), "sliding-window"),
        (GPT.replace(norm="rms"), "GPT-2 export needs LayerNorm"),
        (LLAMA.replace(linear_bias=True), "bias-free"),
        (LLAMA.replace(sliding_window=4), "sliding-window"),
    ],
)
def test_export_refuses_what_the_target_cannot_represent(tmp_path, topology, match, random_arrays):
    with pytest.raises(ConversionError, match=match):
        export_huggingface(tmp_path / "out", topology, random_arrays(topology), None)
    assert not (tmp_path / "out").exists()


def test_export_checks_the_arrays_against_the_topology(tmp_path, random_arrays):
    arrays = random_arrays(GPT)
    del arrays["blocks.1.attention.key.bias"]
    with pytest.raises(ValueError, match="missing blocks.1.attention.key.bias"):
        export_huggingface(tmp_path, GPT, arrays, None)


def _edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("topology", "key", "value"),
    [
        (GPT, "scale_attn_by_inverse_layer_idx", True),
        (GPT, "reorder_and_upcast_attn", True),
        (GPT, "scale_attn_weights", False),
        (GPT, "add_cross_attention", True),
        (LLAMA, "rope_scaling", {"rope_type": "linear", "factor": 2.0}),
        (LLAMA, "attention_bias", True),
        (LLAMA, "mlp_bias", True),
        (LLAMA, "hidden_act", "gelu"),
    ],
)
def test_import_refuses_unsupported_keys_by_name(tmp_path, random_arrays, topology, key, value):
    export_huggingface(tmp_path, topology, random_arrays(topology), None)
    _edit_config(tmp_path, **{key: value})
    with pytest.raises(ConversionError, match=f"{key}=.* is not supported"):
        import_huggingface(tmp_path, require_tokenizer=False)


def test_import_refuses_other_rope_types_and_models(tmp_path, random_arrays):
    export_huggingface(tmp_path, LLAMA, random_arrays(LLAMA), None)
    _edit_config(tmp_path, rope_parameters={"rope_type": "yarn", "rope_theta": 1.0, "factor": 4.0})
    with pytest.raises(ConversionError, match="rope_parameters=.* is not supported"):
        import_huggingface(tmp_path, require_tokenizer=False)
    _edit_config(tmp_path, model_type="bert", architectures=["BertModel"])
    with pytest.raises(ConversionError, match="expected model_type 'gpt2' or 'llama'"):
        import_huggingface(tmp_path, require_tokenizer=False)


def test_import_ignores_buffers_and_the_optional_prefix(tmp_path, random_arrays):
    arrays = random_arrays(GPT)
    export_huggingface(tmp_path, GPT, arrays, None)
    stored = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    renamed = {k.removeprefix("transformer."): v for k, v in stored.items()}
    renamed["h.0.attn.bias"] = np.tril(np.ones((1, 1, 16, 16), np.float32))
    renamed["h.0.attn.masked_bias"] = np.array(-1e4, np.float32)
    safetensors.numpy.save_file(renamed, tmp_path / "model.safetensors")
    back = import_huggingface(tmp_path, require_tokenizer=False)
    np.testing.assert_array_equal(
        back.arrays["blocks.0.attention.query.weight"], arrays["blocks.0.attention.query.weight"]
    )


def test_import_untied_needs_a_head_and_refuses_strays(tmp_path, random_arrays):
    export_huggingface(tmp_path, GPT, random_arrays(GPT), None)
    stored = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    head = stored.pop("lm_head.weight")
    safetensors.numpy.save_file(stored, tmp_path / "model.safetensors")
    with pytest.raises(ConversionError, match="expected lm_head.weight"):
        import_huggingface(tmp_path, require_tokenizer=False)
    stored.update({"lm_head.weight": head, "transformer.h.0.extra": head})
    safetensors.numpy.save_file(stored, tmp_path / "model.safetensors")
    with pytest.raises(
        ConversionError, match="unexpected transformer.h.0.extra|unexpected h.0.extra"
    ):
        import_huggingface(tmp_path, require_tokenizer=False)


def test_import_reads_shards_and_half_precision(tmp_path, random_arrays):
    export_huggingface(tmp_path, LLAMA, random_arrays(LLAMA), None)
    stored = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").unlink()
    names = sorted(stored)
    halves = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    for shard, members in halves.items():
        safetensors.numpy.save_file(
            {n: stored[n].astype(np.float16) for n in members}, tmp_path / shard
        )
    index = {"weight_map": {n: shard for shard, members in halves.items() for n in members}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    back = import_huggingface(tmp_path, require_tokenizer=False)
    np.testing.assert_allclose(
        back.arrays["final_norm.weight"], stored["model.norm.weight"], atol=1e-3
    )
    assert back.arrays["final_norm.weight"].dtype == np.float32


def test_import_never_loads_pickles(tmp_path, random_arrays):
    export_huggingface(tmp_path, GPT, random_arrays(GPT), None)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    with pytest.raises(ConversionError, match="pickled checkpoints are never loaded"):
        import_huggingface(tmp_path, require_tokenizer=False)


def test_import_rejects_shard_paths_outside_the_folder(tmp_path, random_arrays):
    export_huggingface(tmp_path, GPT, random_arrays(GPT), None)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../x.safetensors"}})
    )
    with pytest.raises(ConversionError, match="expected shard file names"):
        import_huggingface(tmp_path, require_tokenizer=False)
