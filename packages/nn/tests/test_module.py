"""Module registration, names, state dictionaries, backend moves, modes and repr."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.nn as nn
import riftco.tensor as rt
from riftco.testing.tensor import REFERENCE_ENTRY_POINT, extra_entry_points


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 4, seed=1)
        self.scale = nn.Parameter(rt.ones(4))
        self.second = nn.Linear(4, 2, bias=False, seed=2)
        self.register_buffer("steps", rt.zeros(1))
        self.register_buffer("scratch", rt.zeros(2), persistent=False)
        self.layers = nn.ModuleList([nn.LayerNorm(2), nn.LayerNorm(2)])
        self.extra = nn.ParameterList([nn.Parameter(rt.zeros(2)), nn.Parameter(rt.ones(3))])

    def forward(self, x):
        return self.second(self.first(x) * self.scale)


def test_registration_order_and_names():
    m = Pair()
    assert [n for n, _ in m.named_parameters()] == [
        "scale",
        "first.weight",
        "first.bias",
        "second.weight",
        "layers.0.weight",
        "layers.0.bias",
        "layers.1.weight",
        "layers.1.bias",
        "extra.0",
        "extra.1",
    ]
    assert [n for n, _ in m.named_modules()] == [
        "",
        "first",
        "second",
        "layers",
        "layers.0",
        "layers.1",
        "extra",
    ]
    assert list(m.state_dict()) == [n for n, _ in m.named_parameters()] + ["steps"]
    assert m.num_parameters() == (12 + 4) + 4 + 8 + 2 * (2 + 2) + (2 + 3)
    m.second.weight.requires_grad = False
    assert m.num_parameters(trainable_only=True) == m.num_parameters() - 8
    with pytest.raises(TypeError, match="parameter"):
        m.scale = rt.ones(4)
    m.first = None
    assert "first.weight" not in dict(m.named_parameters())


def test_shared_parameters_appear_once():
    a = nn.Linear(2, 2)
    outer = nn.ModuleList([a, a])
    assert len(outer.parameters()) == 2
    config = nn.TransformerConfig(tie_embeddings=True, n_layers=1)
    model = nn.DecoderOnlyTransformer(config)
    assert "language_model_head.weight" not in model.state_dict()


def test_state_dict_round_trip_and_strictness():
    a, b = Pair(), Pair()
    b.first.weight.value.assign_(rt.full((4, 3), 7.0))
    a.load_state_dict(b.state_dict())
    np.testing.assert_array_equal(a.first.weight.numpy(), np.full((4, 3), 7.0))
    state = {k: v.numpy() for k, v in b.state_dict().items()}
    del state["scale"]
    state["bogus.weight"] = np.zeros(1, np.float32)
    with pytest.raises(nn.StateDictError) as info:
        a.load_state_dict(state)
    assert "scale" in str(info.value) and "bogus.weight" in str(info.value)
    before = a.first.weight.numpy().copy()
    state["first.weight"] = np.zeros((4, 3), np.float32)
    result = a.load_state_dict(state, strict=False)
    assert result.missing == ["scale"] and result.unexpected == ["bogus.weight"]
    np.testing.assert_array_equal(a.first.weight.numpy(), 0)
    state["first.bias"] = np.zeros(5, np.float32)
    state["first.weight"] = before
    with pytest.raises(nn.StateDictError, match="first.bias"):
        a.load_state_dict(state, strict=False)
    np.testing.assert_array_equal(a.first.weight.numpy(), 0)  # nothing written


def test_to_moves_everything_or_nothing():
    m = Pair()
    m(rt.ones((2, 3))).sum().backward()
    with extra_entry_points(REFERENCE_ENTRY_POINT):
        m.to("reference")
        assert {p.value.device for p in m.parameters()} == {"reference"}
        assert m.first.weight.grad.device == "reference"
        assert m.steps.device == "reference"
        out = m(rt.ones((2, 3), backend="reference"))
        assert out.value.device == "reference"
        m.to("cpu")
    with pytest.raises(rt.BackendUnavailable):
        m.to("no-such-backend")
    assert {p.value.device for p in m.parameters()} == {"cpu"}


def test_train_eval_and_repr():
    model = nn.DecoderOnlyTransformer(nn.TransformerConfig(n_layers=3))
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    text = repr(model)
    assert "(0-2): 3 x TransformerBlock(" in text
    assert "Linear(128, 512, bias=True)" in text
    assert f"{model.num_parameters():,} parameters" in text
