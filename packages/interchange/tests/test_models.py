"""Bundles as models: identical reloads, validation before building, state dicts, runnable text."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from riftco.interchange import (
    BundleError,
    ManifestError,
    RunnableModel,
    WeightsError,
    build_model,
    expected_shapes,
    load_bundle,
    load_safetensors,
    read_bundle,
    save_bundle,
    save_safetensors,
    write_bundle,
)
from riftco.nn import DecoderOnlyTransformer, TransformerConfig
from riftco.text import BpeTokenizer

PROMPT = "the quick brown"


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [
        (preset, dict(tie_embeddings=tied, **extra))
        for preset, tied, extra in itertools.product(
            ["gpt2", "riftco_v1", "llama"],
            [False, True],
            [{}, {"kv_heads": 1}, {"linear_bias": False}, {"norm": "rms", "head_bias": True}],
        )
    ],
)
def test_expected_shapes_match_the_model(preset, overrides):
    config = TransformerConfig.preset(
        preset,
        vocab_size=50,
        context_length=8,
        d_model=8,
        n_heads=2,
        n_layers=2,
        d_ff=12,
        **overrides,
    )
    model = DecoderOnlyTransformer(config)
    assert expected_shapes(config) == {
        name: value.shape for name, value in model.state_dict().items()
    }


@pytest.mark.parametrize("preset", ["gpt2", "riftco_v1", "llama"])
def test_a_reloaded_bundle_is_identical(tmp_path, preset, make_model, tokenizer):
    model = make_model(preset)
    manifest = save_bundle(tmp_path / "m.rift", model, tokenizer, metadata={"run": 1})
    runnable = load_bundle(tmp_path / "m.rift")
    assert runnable.artifact_id == manifest["artifact_id"]
    assert runnable.tokenizer.to_state() == tokenizer.to_state()
    assert runnable.chat_template == tokenizer.chat_template
    assert runnable.config == model.config
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(runnable.model.state_dict()[name].numpy(), value.numpy())
    ids = tokenizer.encode(PROMPT)
    original = RunnableModel(model, tokenizer)
    np.testing.assert_array_equal(runnable.logits(ids), original.logits(ids))
    for sampling in (
        {},
        {"temperature": 0.9, "top_k": 20, "seed": 3},
        {"temperature": 1.2, "top_p": 0.9, "seed": 7},
    ):
        assert runnable.generate(PROMPT, max_new_tokens=12, **sampling) == original.generate(
            PROMPT, max_new_tokens=12, **sampling
        )
    again = runnable.save(tmp_path / "again.rift")
    assert again["artifact_id"] == manifest["artifact_id"]


def test_inference_loads_map_and_training_loads_copy(tmp_path, make_model, tokenizer):
    save_bundle(tmp_path / "m.rift", make_model(), tokenizer)
    assert not load_bundle(tmp_path / "m.rift").model.training
    assert not any(a.flags.writeable for a in read_bundle(tmp_path / "m.rift").tensors.values())
    trainable = load_bundle(tmp_path / "m.rift", trainable=True)
    assert trainable.model.training
    assert all(p.requires_grad for p in trainable.model.parameters())


def test_lineage_is_recorded(tmp_path, make_model, tokenizer):
    parent = save_bundle(tmp_path / "base.rift", make_model(), tokenizer)
    child = save_bundle(
        tmp_path / "tuned.rift",
        make_model(seed=5),
        tokenizer,
        "post_training",
        parent["artifact_id"],
    )
    loaded = load_bundle(tmp_path / "tuned.rift")
    assert loaded.manifest["parent_id"] == parent["artifact_id"] != child["artifact_id"]
    assert loaded.manifest["stage"] == "post_training"


def _write(tmp_path, config: dict, arrays, tokenizer_state):
    path = tmp_path / "crafted.rift"
    write_bundle(path, config, arrays, tokenizer_state)
    return path


def test_tensors_that_disagree_with_the_config_are_refused(tmp_path, make_model, tokenizer):
    model = make_model()
    arrays = {n: np.array(v.numpy()) for n, v in model.state_dict().items()}
    config = model.config.to_dict()
    path = _write(tmp_path, dict(config, n_layers=3), arrays, tokenizer.to_state())
    with pytest.raises(WeightsError, match="missing blocks.2.attention.key.bias"):
        load_bundle(path)
    path = _write(tmp_path, dict(config, d_ff=40), arrays, tokenizer.to_state())
    with pytest.raises(
        WeightsError,
        match=r"mis-shaped blocks.0.feed_forward.expand.weight \[48, 16\] \(expected \[40, 16\]\)",
    ):
        load_bundle(path)
    path = _write(tmp_path, dict(config, tie_embeddings=True), arrays, tokenizer.to_state())
    with pytest.raises(WeightsError, match="unexpected language_model_head.weight"):
        load_bundle(path)


def test_bad_configs_and_tokenizers_are_refused(tmp_path, make_model, tokenizer):
    model = make_model()
    arrays = {n: np.array(v.numpy()) for n, v in model.state_dict().items()}
    config = model.config.to_dict()
    with pytest.raises(ManifestError, match="config: .*unknown fields \\['surprise'\\]"):
        load_bundle(_write(tmp_path, dict(config, surprise=1), arrays, tokenizer.to_state()))
    with pytest.raises(ManifestError, match="config: .*n_heads"):
        load_bundle(_write(tmp_path, dict(config, n_heads=3), arrays, tokenizer.to_state()))
    state = dict(tokenizer.to_state(), merges=[[1, 2, 999]])
    with pytest.raises(ManifestError, match="tokenizer: merges\\[0\\]"):
        load_bundle(_write(tmp_path, config, arrays, state))
    big = BpeTokenizer([(k, k + 1) for k in range(70)])
    with pytest.raises(BundleError, match="do not fit the model's vocab_size 320"):
        load_bundle(_write(tmp_path, config, arrays, big.to_state()))
    with pytest.raises(BundleError, match="do not fit"):
        save_bundle(tmp_path / "x.rift", model, big)


def test_safetensors_state_dict_round_trip(tmp_path, make_model):
    model = make_model("llama")
    save_safetensors(tmp_path / "w.safetensors", model.state_dict())
    other = DecoderOnlyTransformer(model.config, seed=9)
    other.load_state_dict(load_safetensors(tmp_path / "w.safetensors"))
    ids = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(other(ids).numpy(), model(ids).numpy())


def test_build_model_checks_before_building(make_model):
    model = make_model()
    arrays = {n: np.array(v.numpy()) for n, v in model.state_dict().items()}
    del arrays["final_norm.bias"]
    with pytest.raises(WeightsError, match="missing final_norm.bias"):
        build_model(model.config, arrays)


def test_chat_generation_applies_the_template_and_stops(tmp_path, make_model, tokenizer):
    save_bundle(tmp_path / "m.rift", make_model(), tokenizer)
    runnable = load_bundle(tmp_path / "m.rift")
    ids = runnable.encode_prompt("hi", chat=True, system="be brief")
    assert (
        ids
        == tokenizer.apply_chat_template(
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            add_generation_prompt=True,
        ).ids
    )
    stops = runnable.stop_ids(chat=True)
    assert tokenizer.eos_id in stops and tokenizer.special_tokens["<|end|>"] in stops
    result = runnable.generate_ids(ids, max_new_tokens=10, stop_ids=stops)
    assert not set(result.tokens) & set(stops)
    assert isinstance(runnable.generate("hi", chat=True, max_new_tokens=5), str)


def test_the_runnable_stops_where_the_tokenizer_says(tmp_path, make_model, tokenizer):
    save_bundle(tmp_path / "m.rift", make_model(), tokenizer)
    runnable = load_bundle(tmp_path / "m.rift")
    for chat in (False, True):
        assert runnable.stop_ids(chat) == tokenizer.stop_ids(chat)
    # A chat reply also ends where the model would open a new turn.
    assert tokenizer.special_tokens["<|user|>"] in runnable.stop_ids(chat=True)


def test_long_prompts_keep_their_end_and_empty_prompts_start_a_document(
    tmp_path, make_model, tokenizer
):
    save_bundle(tmp_path / "m.rift", make_model(), tokenizer)
    runnable = load_bundle(tmp_path / "m.rift")
    long_ids = tokenizer.encode("the lazy dog jumps " * 20)
    assert len(long_ids) > 32
    cropped = runnable.generate_ids(long_ids[-31:], max_new_tokens=3)
    assert runnable.generate_ids(long_ids, max_new_tokens=3) == cropped
    assert isinstance(runnable.generate("", max_new_tokens=3), str)


def test_sampling_stays_within_the_tokenizer_when_the_model_vocabulary_is_padded(
    tmp_path, make_model, tokenizer
):
    save_bundle(tmp_path / "m.rift", make_model(), tokenizer)
    runnable = load_bundle(tmp_path / "m.rift")
    assert runnable.config.vocab_size > tokenizer.vocab_size
    result = runnable.generate_ids(
        tokenizer.encode(PROMPT), max_new_tokens=25, temperature=5.0, seed=1
    )
    assert len(result.tokens) > 0 and max(result.tokens) < tokenizer.vocab_size


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [
        ("gpt2", {}),
        ("gpt2", {"tie_embeddings": True}),
        ("llama", {"kv_heads": 1}),
        ("llama", {"tie_embeddings": True}),
    ],
)
def test_huggingface_round_trip_keeps_the_logits(
    tmp_path, make_model, tokenizer, preset, overrides
):
    from riftco.interchange import export_huggingface_model, import_huggingface_model

    model = make_model(preset, **overrides)
    export_huggingface_model(RunnableModel(model, tokenizer), tmp_path / "hf")
    imported = import_huggingface_model(tmp_path / "hf")
    assert imported.tokenizer == tokenizer
    ids = tokenizer.encode(PROMPT)
    np.testing.assert_array_equal(imported.logits(ids), RunnableModel(model, tokenizer).logits(ids))
    manifest = imported.save(tmp_path / "imported.rift")
    assert manifest["stage"] == "imported" and manifest["metadata"]["model_type"] == (
        "gpt2" if preset == "gpt2" else "llama"
    )
