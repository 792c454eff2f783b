"""A tiny GPT-2 (riftco.nn) on the tpu backend: forward, backward and one AdamW
step compared with the same model on the CPU backend."""

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
def test_forward_backward_and_adam_step_match_cpu(tpu, attention):
    loss_t, grads_t, stats_t, params_t, logits_t = train_step("tpu", attention)
    loss_c, grads_c, stats_c, params_c, logits_c = train_step("cpu", attention)
    assert np.isfinite(loss_t)
    assert loss_t == pytest.approx(loss_c, rel=1e-5)
    assert grads_t.keys() == grads_c.keys()
    for name in grads_c:
        np.testing.assert_allclose(grads_t[name], grads_c[name], rtol=1e-3, atol=1e-5, err_msg=name)
    assert stats_t.gradient_norm == pytest.approx(stats_c.gradient_norm, rel=1e-4)
    for name in params_c:
        np.testing.assert_allclose(
            params_t[name], params_c[name], rtol=1e-4, atol=1e-5, err_msg=name
        )
    np.testing.assert_allclose(logits_t, logits_c, rtol=1e-3, atol=1e-4)
