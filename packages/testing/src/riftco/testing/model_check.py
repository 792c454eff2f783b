"""A tiny transformer (riftco.nn) on a backend against the same model on the CPU.

``check_model_against_cpu("cuda")`` builds the model on both backends from one seed,
runs one training step (loss, backward, one AdamW step with weight decay and gradient
clipping, the logits after it) and compares every number with the CPU's, within
tolerances that allow a device's own summation order. Needs riftco-nn and riftco-optim
(a backend's ``test`` extra installs them); the check skips without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

#: The model's size: two layers, small enough for an emulator or a software device.
TINY: Mapping[str, int] = {
    "vocab_size": 64,
    "context_length": 16,
    "d_model": 32,
    "n_heads": 4,
    "n_layers": 2,
    "d_ff": 64,
}


@dataclass(frozen=True)
class Tolerances:
    """How far the backend's numbers may be from the CPU's (relative, absolute)."""

    loss_rel: float = 1e-5
    grads: tuple[float, float] = (1e-3, 1e-5)
    gradient_norm_rel: float = 1e-4
    params: tuple[float, float] = (1e-4, 1e-5)
    logits: tuple[float, float] = (1e-3, 1e-4)


@dataclass
class StepResult:
    """One training step's numbers, as numpy (``stats`` and the values after the optimizer
    step are None without one)."""

    loss: float
    grads: dict[str, np.ndarray]
    stats: Any = None
    params: dict[str, np.ndarray] = field(default_factory=dict)
    logits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


def train_step(
    backend: str,
    *,
    preset: str = "gpt2",
    attention: str | None = None,
    config: Mapping[str, Any] | None = None,
    tokens: tuple[int, int] = (3, 13),
    token_seed: int = 0,
    optimizer_step: bool = True,
) -> StepResult:
    """The tiny model (``TINY`` updated by ``config``; seed 0) on ``backend``: the loss of
    random tokens, its gradients and, with ``optimizer_step``, one AdamW step (lr 1e-2,
    weight decay 0.1, gradients clipped to norm 1) and the logits after it."""
    nn = pytest.importorskip("riftco.nn")
    optim = pytest.importorskip("riftco.optim")
    options = {**TINY, **(config or {})}
    if attention is not None:
        options["attention"] = attention
    model_config = nn.TransformerConfig.preset(preset, **options)
    model = nn.DecoderOnlyTransformer(model_config, seed=0, backend=backend)
    ids = np.random.default_rng(token_seed).integers(0, model_config.vocab_size, tokens)
    opt = None
    if optimizer_step:
        opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, max_grad_norm=1.0)
    loss = model.loss(ids[:, :-1], ids[:, 1:])
    loss.backward()
    grads = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
    result = StepResult(float(loss.value.item()), grads)
    if opt is not None:
        result.stats = opt.step()
        result.params = {name: p.value.numpy().copy() for name, p in model.named_parameters()}
        result.logits = model(ids[:, :-1]).value.numpy()
    return result


def check_model_against_cpu(
    backend: str,
    *,
    preset: str = "gpt2",
    attention: str | None = None,
    config: Mapping[str, Any] | None = None,
    tokens: tuple[int, int] = (3, 13),
    token_seed: int = 0,
    optimizer_step: bool = True,
    repeatable: bool = False,
    tolerances: Tolerances = Tolerances(),
) -> None:
    """Assert that one training step of the tiny model (see ``train_step``) on ``backend``
    matches the CPU's: a finite loss, the same parameter names, every gradient, the
    gradient norm, every parameter after the step and the logits, within
    ``tolerances``. ``repeatable``: the step run twice on ``backend`` also gives the
    same bits (loss, gradients, logits)."""
    step: dict[str, Any] = {
        "preset": preset,
        "attention": attention,
        "config": config,
        "tokens": tokens,
        "token_seed": token_seed,
        "optimizer_step": optimizer_step,
    }
    got = train_step(backend, **step)
    want = train_step("cpu", **step)
    assert np.isfinite(got.loss)
    assert got.loss == pytest.approx(want.loss, rel=tolerances.loss_rel)
    assert got.grads.keys() == want.grads.keys()
    rtol, atol = tolerances.grads
    for name in want.grads:
        np.testing.assert_allclose(
            got.grads[name], want.grads[name], rtol=rtol, atol=atol, err_msg=name
        )
    if optimizer_step:
        assert got.stats.gradient_norm == pytest.approx(
            want.stats.gradient_norm, rel=tolerances.gradient_norm_rel
        )
        rtol, atol = tolerances.params
        for name in want.params:
            np.testing.assert_allclose(
                got.params[name], want.params[name], rtol=rtol, atol=atol, err_msg=name
            )
        rtol, atol = tolerances.logits
        np.testing.assert_allclose(got.logits, want.logits, rtol=rtol, atol=atol)
    if repeatable:
        again = train_step(backend, **step)
        assert again.loss == got.loss
        for name in got.grads:
            assert np.array_equal(again.grads[name], got.grads[name]), name
        if optimizer_step:
            assert np.array_equal(again.logits, got.logits)


__all__ = ["TINY", "StepResult", "Tolerances", "check_model_against_cpu", "train_step"]
