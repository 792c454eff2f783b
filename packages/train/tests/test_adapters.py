"""Post-training with LoRA and QLoRA: only adapters train, the child bundle holds the
merged float32 weights, adapters saved alone, checkpoints with the packed NF4 payload,
exact QLoRA resume, and the command's flags."""

import dataclasses
import io
import json

import numpy as np
import pytest
from train_helpers import tiny_pretrain_options, write_corpus

import riftco.nn as nn
from riftco.autograd import no_grad
from riftco.interchange import build_model, read_bundle, read_safetensors
from riftco.nn import TransformerConfig
from riftco.train.adapters import (
    AdapterOptions,
    load_adapters,
    packed_manifest,
    packed_tensors,
    read_packed,
)
from riftco.train.checkpoint import read_checkpoint
from riftco.train.commands import post_train_main
from riftco.train.errors import CheckpointError
from riftco.train.metrics import read_metrics
from riftco.train.post_training import PostTrainOptions, post_train
from riftco.train.pretraining import pretrain
from riftco.train.stage import TrainingOptions

QUIET = io.StringIO()


def untimed(metrics):
    return [m.without_timing() for m in metrics]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    folder = tmp_path_factory.mktemp("base")
    corpus = str(write_corpus(folder))
    options = dataclasses.replace(tiny_pretrain_options(steps=4), data=corpus)
    result = pretrain(options, folder, progress=QUIET)
    chat = folder / "chat.jsonl"
    chat.write_text(
        "".join(
            json.dumps({"prompt": f"Say {w}.", "response": f"{w} is it."}) + "\n"
            for w in ("yes", "no", "for", "while", "if", "else", "try", "with", "pass", "del")
        )
    )
    return result.bundle, str(chat)


def options(data, method, steps=6, **adapters):
    training = TrainingOptions(
        steps=steps,
        batch_size=4,
        learning_rate=2e-2,
        min_learning_rate=2e-3,
        warmup_steps=1,
        eval_every=3,
        eval_batches=2,
        checkpoint_every=0,
    )
    targets = adapters.pop("lora_targets", ("attention.query", "attention.value"))
    chosen = AdapterOptions(method=method, lora_targets=targets, **adapters)
    return PostTrainOptions(data=data, training=training, adapters=chosen)


def model_of(bundle):
    b = read_bundle(bundle)
    return build_model(TransformerConfig.from_dict(b.config), b.tensors), b


def test_lora_changes_only_the_targeted_weights(tmp_path, base):
    bundle, data = base
    result = post_train(options(data, "lora"), bundle, tmp_path, progress=QUIET)
    parent, child = read_bundle(bundle), read_bundle(result.bundle)
    assert child.parent_id == parent.artifact_id and child.stage == "post_training"
    assert set(child.tensors) == set(parent.tensors)  # merged: plain float32 names only
    changed = {n for n in parent.tensors if not np.array_equal(parent.tensors[n], child.tensors[n])}
    assert changed == {"blocks.0.attention.query.weight", "blocks.0.attention.value.weight"}
    training = child.metadata["training"]
    assert training["method"] == "lora" and training["lora"]["rank"] == 4
    assert training["trainable_parameters"] == 2 * (4 * 16 + 16 * 4)
    # The adapters alone, applied to the base, give the child's logits.
    adapters = tmp_path / "chat-adapters.safetensors"
    assert adapters.stat().st_size < 8192
    model, _ = model_of(bundle)
    document = load_adapters(adapters, model)
    assert document["metadata"] == {"parent_id": parent.artifact_id, "method": "lora"}
    merged, _ = model_of(result.bundle)
    ids = np.array([[1, 2, 3, 4, 5, 6]])
    with no_grad():
        np.testing.assert_allclose(model(ids).numpy(), merged(ids).numpy(), rtol=1e-5, atol=1e-5)


def test_only_adapters_have_optimizer_state(tmp_path, base):
    bundle, data = base
    result = post_train(options(data, "lora", steps=2), bundle, tmp_path, progress=QUIET)
    ckpt = read_checkpoint(result.checkpoint)
    moments = [k for k in ckpt.tensors if k.startswith("optimizer.") and k.endswith("exp_avg")]
    assert len(moments) == 4  # two layers, A and B
    assert any(k.startswith("model.") and ".lora_a." in k for k in ckpt.tensors)


def test_qlora_checkpoint_holds_the_packed_payload(tmp_path, base):
    bundle, data = base
    result = post_train(
        options(data, "qlora", steps=2, nf4_block_size=32), bundle, tmp_path, progress=QUIET
    )
    ckpt = read_checkpoint(result.checkpoint)
    packed = {k: v for k, v in ckpt.tensors.items() if k.startswith("nf4.")}
    assert packed["nf4.blocks.0.attention.query.codes"].dtype == np.uint8
    assert packed["nf4.blocks.0.attention.query.absmax"].dtype == np.uint8
    assert packed["nf4.blocks.0.feed_forward.project.group_range"].dtype == np.float32
    manifest = ckpt.run["nf4"]
    assert len(manifest["layers"]) == 6 and len(manifest["identity"]) == 64
    assert manifest["layers"]["blocks.0.attention.query"]["block_size"] == 32
    assert not any(".attention.query.weight" in k for k in ckpt.tensors)  # no float32 copy
    layers = read_packed(ckpt.tensors, manifest)
    assert set(layers) == set(manifest["layers"])
    training = read_bundle(result.bundle).metadata["training"]
    assert training["method"] == "qlora" and training["nf4"]["linear_weights"] == 4 * 256 + 2 * 512
    assert training["nf4"]["stored_bytes"] < training["nf4"]["float32_bytes"] / 6
    tampered = dict(ckpt.tensors)
    codes = tampered["nf4.blocks.0.attention.key.codes"].copy()
    codes[0] ^= 0x11
    tampered["nf4.blocks.0.attention.key.codes"] = codes
    with pytest.raises(CheckpointError, match=r"blocks\.0\.attention\.key"):
        read_packed(tampered, manifest)


@pytest.mark.parametrize("method", ["qlora", "lora"])
def test_resume_is_exact(tmp_path, base, method):
    bundle, data = base
    chosen = options(data, method, steps=6)
    whole = post_train(chosen, bundle, tmp_path / "whole", progress=QUIET)
    calls = iter(range(100))
    first = post_train(
        chosen, bundle, tmp_path / "split", progress=QUIET, stop=lambda: next(calls) == 2
    )
    assert first.outcome == "interrupted" and first.bundle is None
    assert not (tmp_path / "split" / "chat-adapters.safetensors").exists()
    second = post_train(chosen, None, tmp_path / "split", resume=first.checkpoint, progress=QUIET)
    assert second.outcome == "finished"
    assert second.artifact_id == whole.artifact_id
    assert untimed(read_metrics(second.metrics)) == untimed(read_metrics(whole.metrics))
    a = read_safetensors(tmp_path / "whole" / "chat-adapters.safetensors").arrays()
    b = read_safetensors(tmp_path / "split" / "chat-adapters.safetensors").arrays()
    assert all(np.array_equal(a[k], b[k]) for k in a) and set(a) == set(b)


def test_packed_payload_round_trip_and_mismatch():
    config = nn.TransformerConfig.preset(
        "gpt2", vocab_size=16, context_length=8, d_model=32, n_heads=2, n_layers=1, d_ff=64
    )
    model = nn.DecoderOnlyTransformer(config, seed=3)
    nn.quantize_model(model, 64)
    tensors, manifest = packed_tensors(model), packed_manifest(model)
    layers = read_packed(tensors, manifest)
    assert {n: w.identity for n, w in layers.items()} == {
        n: m.weight.identity for n, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)
    }
    with pytest.raises(CheckpointError):
        read_packed({k: v for k, v in tensors.items() if "expand" not in k}, manifest)
    other = dict(manifest, identity="0" * 64)
    with pytest.raises(CheckpointError, match="identity"):
        read_packed(tensors, other)
    assert packed_manifest(nn.DecoderOnlyTransformer(config)) is None


def test_options_validate_and_round_trip():
    chosen = AdapterOptions(method="qlora", lora_rank=8, lora_targets=["attention.key"])
    assert chosen.paged and not AdapterOptions(method="lora").paged
    assert AdapterOptions.from_dict(chosen.to_dict()) == chosen
    wrapped = PostTrainOptions(adapters=chosen)
    assert PostTrainOptions.from_dict(json.loads(json.dumps(wrapped.to_dict()))) == wrapped
    assert PostTrainOptions.from_dict({"data": None}).adapters.method == "full"
    with pytest.raises(ValueError, match="method"):
        AdapterOptions(method="dora")
    with pytest.raises(ValueError, match="targets"):
        AdapterOptions(method="lora", lora_targets=("attention.qkv",))
    with pytest.raises(ValueError, match="nf4_block_size"):
        AdapterOptions(method="qlora", nf4_block_size=48)


def test_command_flags(tmp_path, base, capsys):
    bundle, data = base
    args = [
        "--base",
        str(bundle),
        "--data",
        data,
        "--out",
        str(tmp_path),
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--eval-batches",
        "1",
        "--sample",
        "",
        "--method",
        "qlora",
        "--lora-rank",
        "2",
        "--lora-alpha",
        "4",
        "--lora-targets",
        "attention.query,feed_forward.expand",
        "--nf4-block-size",
        "32",
    ]
    assert post_train_main(args) == 0
    out = capsys.readouterr().out
    assert "qlora: " in out and "MiB as NF4" in out
    run = read_checkpoint(tmp_path / "post_training.riftckpt").run
    assert run["options"]["adapters"]["lora_targets"] == ["attention.query", "feed_forward.expand"]
    assert run["options"]["adapters"]["lora_rank"] == 2
    with pytest.raises(SystemExit):
        post_train_main([*args[:-6], "--lora-targets", "attention.qkv"])
    assert "attention.qkv" in capsys.readouterr().err
