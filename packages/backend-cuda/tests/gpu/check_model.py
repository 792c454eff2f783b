"""A tiny GPT-2 (riftco.nn) on cuda: forward, backward and one AdamW step
compared with the same model on the CPU backend, and bitwise repeatable."""

from __future__ import annotations

import os

import numpy as np
import pytest

import riftco.tensor as rt

#: The backend checked: cuda, or cudaemu (the kernels on the host, see emulator/).
BACKEND = os.environ.get("RIFTCO_CUDA_CHECK_BACKEND", "cuda")

nn = pytest.importorskip("riftco.nn")
optim = pytest.importorskip("riftco.optim")

CONFIG = dict(vocab_size=64, context_length=16, d_model=32, n_heads=4, n_layers=2, d_ff=64)


@pytest.fixture(scope="module", autouse=True)
def cuda_available():
    info = {i.name: i for i in rt.backends()}.get(BACKEND)
    if info is None or not info.available:
        pytest.skip(f"{BACKEND} is unavailable: {info.reason if info else 'not installed'}")


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
def test_forward_backward_and_adam_step_match_cpu(attention):
    loss_g, grads_g, stats_g, params_g, logits_g = train_step(BACKEND, attention)
    loss_c, grads_c, stats_c, params_c, logits_c = train_step("cpu", attention)
    assert np.isfinite(loss_g)
    assert loss_g == pytest.approx(loss_c, rel=1e-5)
    for name in grads_c:
        np.testing.assert_allclose(grads_g[name], grads_c[name], rtol=1e-3, atol=1e-5, err_msg=name)
    assert stats_g.gradient_norm == pytest.approx(stats_c.gradient_norm, rel=1e-4)
    for name in params_c:
        np.testing.assert_allclose(
            params_g[name], params_c[name], rtol=1e-4, atol=1e-5, err_msg=name
        )
    np.testing.assert_allclose(logits_g, logits_c, rtol=1e-3, atol=1e-4)


def test_the_same_step_gives_the_same_bits():
    first = train_step(BACKEND, "flash")
    second = train_step(BACKEND, "flash")
    assert first[0] == second[0]
    for name in first[1]:
        assert np.array_equal(first[1][name], second[1][name]), name
    assert np.array_equal(first[4], second[4])


@pytest.mark.skipif(BACKEND != "cuda", reason="the disk cache is the GPU's")
def test_kernels_are_cached_on_disk_by_source_hash(tmp_path):
    from riftco.backends.cuda import _native

    device = _native.Device(0, tmp_path)
    device.load_all()
    modules, compiles, hits = device.cache_stats()
    assert modules == len(_native.kernel_modules()) and hits == 0 and compiles == modules
    assert len(list(tmp_path.glob("*.cubin"))) == modules
    again = _native.Device(0, tmp_path)
    again.load_all()
    assert again.cache_stats() == (modules, 0, modules)
