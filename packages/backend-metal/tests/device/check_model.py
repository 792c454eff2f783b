"""A tiny GPT-2 (riftco.nn) on the vulkan backend: forward, backward and one
AdamW step compared with the same model on the CPU backend."""

from __future__ import annotations

import numpy as np
import pytest

nn = pytest.importorskip("riftco.nn")
optim = pytest.importorskip("riftco.optim")

CONFIG = dict(vocab_size=64, context_length=16, d_model=32, n_heads=4, n_layers=2, d_ff=64)


def train_step(backend: str, attention: str):
    config = nn.TransformerConfig.preset("gpt2", attention=attention, **CONFIG)
    model = nn.DecoderOnlyTransformer(config, seed=0, backend=backend)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (3, 13))
    opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, max_grad_norm=1.0)
    loss = model.loss(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    grads = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    stats = opt.step()
    params = {name: p.value.numpy().copy() for name, p in model.named_parameters()}
    logits = model(tokens[:, :-1]).value.numpy()
    return float(loss.value.item()), grads, stats, params, logits


@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_forward_backward_and_adam_step_match_cpu(gpu, attention):
    loss_g, grads_g, stats_g, params_g, logits_g = train_step(gpu.name, attention)
    loss_c, grads_c, stats_c, params_c, logits_c = train_step("cpu", attention)
    assert np.isfinite(loss_g)
    assert loss_g == pytest.approx(loss_c, rel=1e-5)
    assert grads_g.keys() == grads_c.keys()
    for name in grads_c:
        np.testing.assert_allclose(grads_g[name], grads_c[name], rtol=1e-3, atol=1e-5, err_msg=name)
    assert stats_g.gradient_norm == pytest.approx(stats_c.gradient_norm, rel=1e-4)
    for name in params_c:
        np.testing.assert_allclose(
            params_g[name], params_c[name], rtol=1e-4, atol=1e-5, err_msg=name
        )
    np.testing.assert_allclose(logits_g, logits_c, rtol=1e-3, atol=1e-4)


def test_llama_forward_and_backward_match_cpu(gpu):
    """RMSNorm, rotary, grouped-query attention and SwiGLU on the device."""
    config = nn.TransformerConfig.preset(
        "llama", vocab_size=64, context_length=16, d_model=32, n_heads=4, kv_heads=2,
        n_layers=1, d_ff=64,
    )  # fmt: skip
    tokens = np.random.default_rng(1).integers(0, 64, (2, 9))
    losses = {}
    grads = {}
    for name in (gpu.name, "cpu"):
        model = nn.DecoderOnlyTransformer(config, seed=0, backend=name)
        loss = model.loss(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        losses[name] = float(loss.value.item())
        grads[name] = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    assert losses[gpu.name] == pytest.approx(losses["cpu"], rel=1e-5)
    for n in grads["cpu"]:
        np.testing.assert_allclose(
            grads[gpu.name][n], grads["cpu"][n], rtol=1e-3, atol=1e-5, err_msg=n
        )
