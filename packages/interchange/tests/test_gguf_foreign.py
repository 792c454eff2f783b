"""Import of GGUF files that riftco did not write: files laid out as llama.cpp's
``convert_hf_to_gguf.py`` writes them (written here with ``gguf.GGUFWriter`` from
Hugging Face names), other vocabularies, quantized tensors, and what riftco refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from riftco.interchange import (  # noqa: E402
    ConversionError,
    export_gguf,
    import_gguf,
    model_arrays,
)
from riftco.interchange.hf_gpt2 import gpt2_tensors  # noqa: E402
from riftco.interchange.hf_llama import llama_tensors  # noqa: E402
from riftco.text import bytes_to_unicode  # noqa: E402

T = gguf.GGUFValueType


def _permute(weights, n_head):  # convert_hf_to_gguf.py, LlamaModel.permute
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _gpt2_as_converted(hf: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """GPT-2 tensors renamed and transposed as llama.cpp's converter does."""
    renames = {
        "wte": "token_embd",
        "wpe": "position_embd",
        "ln_f": "output_norm",
        "lm_head": "output",
        "ln_1": "attn_norm",
        "attn.c_attn": "attn_qkv",
        "attn.c_proj": "attn_output",
        "ln_2": "ffn_norm",
        "mlp.c_fc": "ffn_up",
        "mlp.c_proj": "ffn_down",
    }
    out = {}
    for name, array in hf.items():
        name = name.removeprefix("transformer.")
        stem, suffix = name.rsplit(".", 1)
        if stem.startswith("h."):
            _, layer, rest = stem.split(".", 2)
            stem = f"blk.{layer}.{renames[rest]}"
        else:
            stem = renames[stem]
        if suffix == "weight" and stem.split(".")[-1] in (
            "attn_qkv",
            "attn_output",
            "ffn_up",
            "ffn_down",
        ):
            array = array.T  # Conv1D stores [in, out]
        out[f"{stem}.{suffix}"] = np.ascontiguousarray(array)
    return out


def _llama_as_converted(hf: dict[str, np.ndarray], n_head: int, n_head_kv: int):
    renames = {
        "model.embed_tokens": "token_embd",
        "model.norm": "output_norm",
        "lm_head": "output",
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    out = {}
    for name, array in hf.items():
        stem = name.removesuffix(".weight")
        if stem.startswith("model.layers."):
            _, _, layer, rest = stem.split(".", 3)
            stem = f"blk.{layer}.{renames[rest]}"
            if rest == "self_attn.q_proj":
                array = _permute(array, n_head)
            elif rest == "self_attn.k_proj":
                array = _permute(array, n_head_kv)
        else:
            stem = renames[stem]
        out[f"{stem}.weight"] = np.ascontiguousarray(array)
    return out


def _write(path, arch, keys, tensors, tokenizer_keys):
    writer = gguf.GGUFWriter(path, arch)
    for key, (value, kind) in {**keys, **tokenizer_keys}.items():
        if kind == T.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kind)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _gpt2_keys(c):
    return {
        "gpt2.context_length": (c.context_length, T.UINT32),
        "gpt2.embedding_length": (c.d_model, T.UINT32),
        "gpt2.feed_forward_length": (c.d_ff, T.UINT32),
        "gpt2.block_count": (c.n_layers, T.UINT32),
        "gpt2.attention.head_count": (c.n_heads, T.UINT32),
        "gpt2.attention.layer_norm_epsilon": (c.norm_eps, T.FLOAT32),
        "general.file_type": (0, T.UINT32),
    }


def _llama_keys(c):
    return {
        "llama.context_length": (c.context_length, T.UINT32),
        "llama.embedding_length": (c.d_model, T.UINT32),
        "llama.feed_forward_length": (c.d_ff, T.UINT32),
        "llama.block_count": (c.n_layers, T.UINT32),
        "llama.attention.head_count": (c.n_heads, T.UINT32),
        "llama.attention.head_count_kv": (c.n_kv_heads, T.UINT32),
        "llama.rope.dimension_count": (c.head_dim, T.UINT32),
        "llama.rope.freq_base": (c.rope_theta, T.FLOAT32),
        "llama.attention.layer_norm_rms_epsilon": (c.norm_eps, T.FLOAT32),
    }


def _bpe_keys(tokenizer, vocab_size, shuffle=False):
    """A ``gpt2`` tokenizer section as the converter writes it from ``tokenizer.json``."""
    chars = bytes_to_unicode()
    tokens = [
        "".join(chars[b] for b in tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)
    ]
    for content, token_id in tokenizer.special_tokens.items():
        tokens[token_id] = content
    types = [1] * tokenizer.base_vocab_size + [3] * len(tokenizer.special_tokens)
    tokens += [f"[PAD{i}]" for i in range(len(tokens), vocab_size)]
    types += [5] * (vocab_size - len(types))
    merges = [f"{tokens[a]} {tokens[b]}" for a, b in tokenizer.merges]
    if shuffle:  # another id order, as in GPT-2's own vocabulary
        tokens[0], tokens[1] = tokens[1], tokens[0]
    return {
        "tokenizer.ggml.model": ("gpt2", T.STRING),
        "tokenizer.ggml.pre": ("gpt-2", T.STRING),
        "tokenizer.ggml.tokens": (tokens, T.ARRAY),
        "tokenizer.ggml.token_type": (types, T.ARRAY),
        "tokenizer.ggml.merges": (merges, T.ARRAY),
        "tokenizer.ggml.eos_token_id": (tokenizer.eos_id, T.UINT32),
    }


def _sentencepiece_keys(vocab_size):
    return {
        "tokenizer.ggml.model": ("llama", T.STRING),
        "tokenizer.ggml.tokens": ([f"▁t{i}" for i in range(vocab_size)], T.ARRAY),
        "tokenizer.ggml.scores": ([0.0] * vocab_size, T.ARRAY),
        "tokenizer.ggml.token_type": ([1] * vocab_size, T.ARRAY),
    }


@pytest.mark.parametrize("tied", [False, True])
def test_gpt2_file_from_llamacpps_converter(tmp_path, make_model, tokenizer, tied):
    model = make_model("gpt2", tie_embeddings=tied)
    c, arrays = model.config, model_arrays(model)
    tensors = _gpt2_as_converted(gpt2_tensors(c, arrays))
    path = _write(
        tmp_path / "g.gguf", "gpt2", _gpt2_keys(c), tensors, _bpe_keys(tokenizer, c.vocab_size)
    )
    back = import_gguf(path)
    assert back.model_config == c.replace(norm_eps=1e-5)
    for name, array in arrays.items():
        np.testing.assert_array_equal(back.arrays[name], array, err_msg=name)
    # Rebuilt from the llama.cpp section alone: the same ids (no chat template to restore).
    assert back.tokenizer.merges == tokenizer.merges
    assert back.tokenizer.special_tokens == tokenizer.special_tokens
    text = "the lazy dog, hello there"
    assert back.tokenizer.encode(text) == tokenizer.encode(text)
    assert back.lineage == {} and back.origin()["metadata"]["architecture"] == "gpt2"


def test_llama_file_from_llamacpps_converter(tmp_path, make_model, tokenizer):
    model = make_model("llama", kv_heads=1)
    c, arrays = model.config, model_arrays(model)
    tensors = _llama_as_converted(llama_tensors(c, arrays), c.n_heads, c.n_kv_heads)
    path = _write(
        tmp_path / "l.gguf", "llama", _llama_keys(c), tensors, _bpe_keys(tokenizer, c.vocab_size)
    )
    back = import_gguf(path)
    assert back.model_config == c
    for name, array in arrays.items():
        np.testing.assert_array_equal(back.arrays[name], array, err_msg=name)


def test_vocabularies_riftco_cannot_represent(tmp_path, make_model, tokenizer):
    model = make_model("llama")
    c, arrays = model.config, model_arrays(model)
    tensors = _llama_as_converted(llama_tensors(c, arrays), c.n_heads, c.n_kv_heads)
    cases = {
        "sentencepiece": (_sentencepiece_keys(c.vocab_size), "SentencePiece"),
        "another id order": (
            _bpe_keys(tokenizer, c.vocab_size, shuffle=True),
            "pass the tokenizer",
        ),
    }
    for name, (keys, reason) in cases.items():
        path = _write(tmp_path / f"{name}.gguf", "llama", _llama_keys(c), tensors, keys)
        with pytest.raises(ConversionError, match=reason):
            import_gguf(path)
        weights_only = import_gguf(path, require_tokenizer=False)
        assert weights_only.tokenizer is None
        key = "blocks.1.attention.key.weight"
        np.testing.assert_array_equal(weights_only.arrays[key], arrays[key])
        assert import_gguf(path, tokenizer=tokenizer).tokenizer is tokenizer
    keys = dict(
        _bpe_keys(tokenizer, c.vocab_size), **{"tokenizer.ggml.pre": ("llama-bpe", T.STRING)}
    )
    path = _write(tmp_path / "pre.gguf", "llama", _llama_keys(c), tensors, keys)
    with pytest.raises(ConversionError, match="'gpt-2' pre-tokenizer only; found 'llama-bpe'"):
        import_gguf(path)


def test_quantized_tensors_are_dequantized(tmp_path, make_model, tokenizer):
    model = make_model("llama", d_model=32, d_ff=64)
    c, arrays = model.config, model_arrays(model)
    tensors = _llama_as_converted(llama_tensors(c, arrays), c.n_heads, c.n_kv_heads)
    name = "blk.0.ffn_up.weight"
    q8 = gguf.quants.quantize(tensors[name], gguf.GGMLQuantizationType.Q8_0)
    writer_tensors = dict(tensors)
    del writer_tensors[name]
    path = tmp_path / "q.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    for key, (value, kind) in {**_llama_keys(c), **_bpe_keys(tokenizer, c.vocab_size)}.items():
        writer.add_array(key, value) if kind == T.ARRAY else writer.add_key_value(key, value, kind)
    for tensor_name, array in writer_tensors.items():
        writer.add_tensor(tensor_name, array)
    writer.add_tensor(name, q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    back = import_gguf(path)
    expected = gguf.quants.dequantize(q8, gguf.GGMLQuantizationType.Q8_0)
    np.testing.assert_array_equal(back.arrays["blocks.0.feed_forward.up.weight"], expected)
    np.testing.assert_allclose(expected, arrays["blocks.0.feed_forward.up.weight"], atol=0.02)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"general.architecture": ("qwen2", T.STRING)}, "riftco reads 'gpt2' and 'llama'"),
        ({"llama.rope.scaling.type": ("linear", T.STRING)}, "rope.scaling.type"),
        ({"llama.expert_count": (8, T.UINT32)}, "expert_count"),
        ({"llama.rope.dimension_count": (4, T.UINT32)}, "rope.dimension_count=4"),
        ({"llama.block_count": (3, T.UINT32)}, "missing blk.2"),
        ({"llama.embedding_length": (0, T.UINT32)}, "positive integer"),
    ],
)
def test_keys_riftco_does_not_implement_are_refused(
    tmp_path, make_model, tokenizer, change, reason
):
    model = make_model("llama")
    c = model.config
    tensors = _llama_as_converted(llama_tensors(c, model_arrays(model)), c.n_heads, c.n_kv_heads)
    keys = {**_llama_keys(c), **change}
    arch = keys.pop("general.architecture", ("llama", None))[0]
    path = _write(tmp_path / "x.gguf", arch, keys, tensors, _bpe_keys(tokenizer, c.vocab_size))
    with pytest.raises(ConversionError, match=reason):
        import_gguf(path)


def test_extra_tensors_are_named(tmp_path, make_model, tokenizer):
    model = make_model("llama")
    c = model.config
    tensors = _llama_as_converted(llama_tensors(c, model_arrays(model)), c.n_heads, c.n_kv_heads)
    for extra, reason in (
        ("rope_freqs.weight", "rotary frequencies"),
        ("blk.0.attn_q.bias", "unexpected"),
    ):
        added = dict(
            tensors,
            **{extra: np.ones(c.head_dim // 2 if "rope" in extra else c.d_model, np.float32)},
        )
        path = _write(
            tmp_path / "x.gguf", "llama", _llama_keys(c), added, _bpe_keys(tokenizer, c.vocab_size)
        )
        with pytest.raises(ConversionError, match=reason):
            import_gguf(path)


def test_riftco_config_must_agree_with_llamacpps_keys(tmp_path, make_model, tokenizer):
    model = make_model("gpt2")
    path = export_gguf(tmp_path / "m.gguf", model.config, model_arrays(model), tokenizer)
    reader = gguf.GGUFReader(path)
    keys = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        keys[name] = (field.contents(), kind)
    tensors = {t.name: np.array(t.data) for t in reader.tensors}
    stored = json.loads(keys["riftco.config"][0])
    stored["d_ff"] = 2 * stored["d_ff"]
    keys["riftco.config"] = (json.dumps(stored), T.STRING)
    path = _write(tmp_path / "edited.gguf", "gpt2", keys, tensors, {})
    with pytest.raises(ConversionError, match="riftco.config: d_ff=96 disagrees"):
        import_gguf(path)
