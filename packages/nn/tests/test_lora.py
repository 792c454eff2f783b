"""LoRA adapters: neutral attach, names, only adapters train, merge == adapted,
transactional merge, detach, adapter state, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import riftco.nn as nn
import riftco.tensor as rt
from riftco.autograd import Variable, gradcheck, no_grad

TINY = dict(vocab_size=32, context_length=16, d_model=16, n_heads=2, n_layers=2, d_ff=32)
ALL_GPT = (
    "attention.query",
    "attention.key",
    "attention.value",
    "attention.output",
    "feed_forward.expand",
    "feed_forward.project",
    "language_model_head",
)
ALL_LLAMA = (
    "attention.query",
    "attention.value",
    "feed_forward.gate",
    "feed_forward.up",
    "feed_forward.down",
)


def model_for(preset="gpt2", seed=0, backend=None, **overrides):
    config = nn.TransformerConfig.preset(preset, **{**TINY, **overrides})
    return nn.DecoderOnlyTransformer(config, seed=seed, backend=backend)


def tokens(seed=0, shape=(2, 9)):
    return np.random.default_rng(seed).integers(0, TINY["vocab_size"], shape)


def logits(model, ids):
    with no_grad():
        return np.array(model(ids).numpy())


def values(model):
    return {n: np.array(p.value.numpy()) for n, p in model.named_parameters()}


def sgd_step(params, lr):
    """Plain SGD (riftco-nn does not depend on riftco-optim)."""
    for p in params:
        if p.grad is not None:
            p.value.assign_(p.value - p.grad * lr)
            p.grad = None


def train(model, steps=3, lr=0.5, seed=0):
    for i in range(steps):
        ids = tokens(seed + i, (2, 9))
        model.loss(ids[:, :-1], ids[:, 1:]).backward()
        sgd_step(model.parameters(), lr)


@pytest.mark.parametrize(
    "preset, targets",
    [("gpt2", ("attention.query", "attention.value")), ("gpt2", ALL_GPT), ("llama", ALL_LLAMA)],
)
def test_attaching_changes_no_logit(backend, preset, targets):
    model = model_for(preset, backend=backend)
    ids = tokens()
    before = logits(model, ids)
    names = nn.attach_lora(model, nn.LoraConfig(rank=3, alpha=6, targets=targets, seed=1))
    assert len(names) == sum(1 for n, _ in model.named_modules() if n in names)
    assert np.array_equal(logits(model, ids), before)


def test_adapter_names_and_base_names_are_stable():
    model = model_for()
    base_names = [n for n, _ in model.named_parameters()]
    nn.attach_lora(model, nn.LoraConfig())
    names = [n for n, _ in model.named_parameters()]
    assert [n for n in names if "lora" not in n] == base_names
    adapters = [n for n, _ in nn.lora_parameters(model)]
    assert adapters == [
        f"blocks.{i}.attention.{p}.lora_{ab}.weight"
        for i in range(2)
        for p in ("query", "value")
        for ab in "ab"
    ]
    q = model.blocks[0].attention.query
    assert isinstance(q, nn.LoraLinear) and isinstance(q, nn.Linear)
    assert q.lora_a.weight.shape == (4, 16) and q.lora_b.weight.shape == (16, 4)
    assert q.scaling == 2.0


def test_a_is_seeded_xavier_and_b_is_zero():
    a, b = model_for(), model_for()
    nn.attach_lora(a, nn.LoraConfig(seed=3))
    nn.attach_lora(b, nn.LoraConfig(seed=3))
    wa = a.blocks[0].attention.query.lora_a.weight.numpy()
    assert np.array_equal(wa, b.blocks[0].attention.query.lora_a.weight.numpy())
    bound = math.sqrt(6 / (16 + 4))
    assert np.abs(wa).max() <= bound and np.abs(wa).max() > 0.8 * bound
    other = a.blocks[1].attention.query.lora_a.weight.numpy()
    assert not np.array_equal(wa, other)  # seeded per layer name
    assert not np.any(a.blocks[0].attention.query.lora_b.weight.numpy())


def test_only_adapters_train():
    model = model_for()
    nn.attach_lora(model, nn.LoraConfig(targets=("attention.query", "feed_forward.project")))
    frozen = {n: v for n, v in values(model).items() if "lora" not in n}
    ids = tokens()
    model.loss(ids[:, :-1], ids[:, 1:]).backward()
    for name, p in model.named_parameters():
        assert (p.grad is not None) == ("lora" in name), name
        assert p.requires_grad == ("lora" in name)
    sgd_step(model.parameters(), 0.5)
    train(model, steps=2)
    after = values(model)
    assert all(np.array_equal(after[n], v) for n, v in frozen.items())
    assert all(np.any(after[n]) for n, _ in nn.lora_parameters(model) if "lora_b" in n)


@pytest.mark.parametrize("preset, targets", [("gpt2", ALL_GPT), ("llama", ALL_LLAMA)])
def test_merged_logits_equal_adapted_logits(preset, targets):
    model = model_for(preset, seed=2)
    flags_before = {n: p.requires_grad for n, p in model.named_parameters()}
    nn.attach_lora(model, nn.LoraConfig(rank=2, alpha=4, targets=targets))
    train(model)
    ids = tokens(5)
    adapted = logits(model, ids)
    merged_names = nn.merge_lora(model)
    assert len(merged_names) > 0 and not nn.has_adapters(model)
    assert not any("lora" in n for n, _ in model.named_parameters())
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags_before
    np.testing.assert_allclose(logits(model, ids), adapted, rtol=1e-5, atol=1e-5)
    with pytest.raises(nn.AdapterError, match="no adapters"):
        nn.merge_lora(model)  # one-way: nothing left to merge or unmerge


def test_merge_is_transactional():
    model = model_for()
    nn.attach_lora(model, nn.LoraConfig())
    train(model, steps=1)
    before = values(model)
    bad = model.blocks[1].attention.value.lora_b.weight
    bad.value.assign_(rt.full(bad.shape, 3e38))
    with pytest.raises(nn.AdapterError, match=r"blocks\.1\.attention\.value.*nothing changed"):
        nn.merge_lora(model)
    after = values(model)
    assert all(
        np.array_equal(after[n], v)
        for n, v in before.items()
        if "1.attention.value.lora_b" not in n
    )
    assert nn.has_adapters(model) and isinstance(model.blocks[0].attention.query, nn.LoraLinear)


def test_detach_restores_the_base():
    model = model_for()
    model.blocks[0].attention_norm.weight.requires_grad = False
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    ids = tokens()
    before = logits(model, ids)
    nn.attach_lora(model, nn.LoraConfig())
    train(model, steps=2)
    assert not np.array_equal(logits(model, ids), before)
    assert nn.detach_lora(model) == [
        f"blocks.{i}.attention.{p}" for i in range(2) for p in ("query", "value")
    ]
    assert type(model.blocks[0].attention.query) is nn.Linear
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert np.array_equal(logits(model, ids), before)


def test_adapter_state_round_trip():
    a = model_for()
    nn.attach_lora(a, nn.LoraConfig())
    train(a, steps=2)
    state = {n: np.array(t.numpy()) for n, t in nn.lora_state_dict(a).items()}
    assert len(state) == 8
    b = model_for()
    nn.attach_lora(b, nn.LoraConfig())
    nn.load_lora_state_dict(b, state)
    ids = tokens(3)
    assert np.array_equal(logits(a, ids), logits(b, ids))
    with pytest.raises(nn.StateDictError, match="missing keys"):
        nn.load_lora_state_dict(b, dict(list(state.items())[1:]))


def test_refusals():
    model = model_for(tie_embeddings=True)
    before = values(model)
    with pytest.raises(nn.AdapterError, match="tied"):
        nn.attach_lora(model, nn.LoraConfig(targets=("attention.query", "language_model_head")))
    assert not nn.has_adapters(model) and all(p.requires_grad for p in model.parameters())
    with pytest.raises(nn.ConfigError, match="feed_forward.gate"):
        nn.attach_lora(model, nn.LoraConfig(targets=("feed_forward.gate",)))
    with pytest.raises(nn.ConfigError, match="targets"):
        nn.LoraConfig(targets=("attention.qkv",))
    with pytest.raises(nn.ConfigError, match="rank"):
        nn.LoraConfig(rank=0)
    with pytest.raises(nn.ConfigError, match="alpha"):
        nn.LoraConfig(alpha=float("nan"))
    nn.attach_lora(model, nn.LoraConfig())
    with pytest.raises(nn.AdapterError, match="already"):
        nn.attach_lora(model, nn.LoraConfig())
    assert all(np.array_equal(v, values(model)[n]) for n, v in before.items())


def test_saving_with_unmerged_adapters_is_refused_clearly():
    model = model_for()
    nn.check_exportable(model)
    nn.attach_lora(model, nn.LoraConfig())
    with pytest.raises(nn.AdapterError, match="active, unmerged LoRA adapters on 4 layers"):
        nn.check_exportable(model)
    nn.merge_lora(model)
    nn.check_exportable(model)


def test_config_round_trip():
    c = nn.LoraConfig(rank=8, alpha=16, targets=["attention.key"], seed=5)
    assert c.targets == ("attention.key",) and c.scaling == 2.0
    assert nn.LoraConfig.from_dict(c.to_dict()) == c


def test_adapted_linear_gradients_by_finite_differences():
    base = nn.Linear(5, 3, seed=1)
    layer = nn.LoraLinear(base, nn.LoraConfig(rank=2, alpha=3), seed=2)
    layer.lora_b.weight.value.assign_(rt.normal((3, 2), std=0.5, seed=4))
    x = Variable(rt.normal((2, 4, 5), seed=3), requires_grad=True)
    a, b = layer.lora_a.weight, layer.lora_b.weight

    def fn(x, a_value, b_value):
        layer.lora_a.__dict__["weight"], layer.lora_b.__dict__["weight"] = a_value, b_value
        return layer(x)

    try:
        va, vb = Variable(a.value, requires_grad=True), Variable(b.value, requires_grad=True)
        assert gradcheck(fn, [x, va, vb])
    finally:
        layer.lora_a.__dict__["weight"], layer.lora_b.__dict__["weight"] = a, b


def test_moves_with_the_model(backend):
    model = model_for()
    nn.attach_lora(model, nn.LoraConfig())
    train(model, steps=1)
    ids = tokens()
    expected = logits(model, ids)
    model.to(backend)
    np.testing.assert_allclose(logits(model, ids), expected, rtol=1e-5, atol=1e-5)
