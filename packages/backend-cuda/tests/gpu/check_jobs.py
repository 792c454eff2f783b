"""The jobs a user runs, on cuda against the CPU: 50 steps of pretraining the
``small`` model in float32 and in bfloat16 mixed precision (``precision="bf16"``,
as ``--precision bf16`` runs it), QLoRA steps, and batch-1 greedy decoding with a
KV cache."""

from __future__ import annotations

import os

import numpy as np
import pytest

import riftco.tensor as rt

#: The backend checked: cuda, or cudaemu (the kernels on the host: smaller jobs).
BACKEND = os.environ.get("RIFTCO_CUDA_CHECK_BACKEND", "cuda")
EMULATED = BACKEND != "cuda"

nn = pytest.importorskip("riftco.nn")
optim = pytest.importorskip("riftco.optim")
train = pytest.importorskip("riftco.train")

#: The pretraining run: 50 steps of `small` (T=256, B=8) on a GPU; a short one emulated.
SIZE, STEPS, T, B = ("tiny", 4, 32, 2) if EMULATED else ("small", 50, 256, 8)


@pytest.fixture(scope="module", autouse=True)
def cuda_available():
    info = {i.name: i for i in rt.backends()}.get(BACKEND)
    if info is None or not info.available:
        pytest.skip(f"{BACKEND} is unavailable: {info.reason if info else 'not installed'}")


def pretrain(
    backend: str,
    steps: int,
    precision: str = "f32",
    stream: np.ndarray | None = None,
    run: int | None = None,
) -> list[float]:
    """The losses of the first ``run`` (default all) of ``steps`` scheduled steps."""
    from riftco.optim import AdamW, WarmupCosineSchedule, weight_decay_groups
    from riftco.train.batches import RandomWindows
    from riftco.train.engine import Trainer

    config = nn.TransformerConfig.preset("gpt2", size=SIZE, vocab_size=512)
    if stream is None:
        stream = np.random.default_rng(0).integers(0, 512, 200_000)
    model = nn.DecoderOnlyTransformer(config, seed=0, backend=backend)
    groups = [g for g in weight_decay_groups(model.named_parameters(), 0.1) if g["params"]]
    opt = AdamW(groups, lr=3e-4, betas=(0.9, 0.95), max_grad_norm=1.0)
    source = RandomWindows(stream, T, B, seed=0)
    trainer = Trainer(
        model,
        opt,
        WarmupCosineSchedule(3e-4, min(10, steps), steps),
        source,
        stage="pretraining",
        total_steps=steps,
        backend=backend,
        precision=precision,
    )
    return [trainer.train_step().loss for _ in range(steps if run is None else run)]


def test_pretraining_steps_match_the_cpu():
    gpu = pretrain(BACKEND, STEPS)
    cpu = pretrain("cpu", STEPS)
    print(f"losses {BACKEND}", gpu[0], gpu[-1], "cpu", cpu[0], cpu[-1])
    assert all(np.isfinite(gpu))
    if STEPS >= 20:  # a few warm-up steps need not descend
        assert gpu[-1] < gpu[0]
    np.testing.assert_allclose(gpu, cpu, rtol=2e-3, atol=2e-3)


def test_bf16_pretraining_converges_and_tracks_the_cpu():
    # A stream with something to learn (a 61-token cycle: 6.3 -> 0.19 in 20 steps of
    # `small` on the CPU in bf16), so that converging means more than drifting to
    # the uniform distribution's loss. The first steps track the CPU's bf16 run to
    # bfloat16's resolution (both multiply bfloat16 operands exactly and sum in
    # float32, in different orders, so a rounding may flip either way).
    steps, tracked = (STEPS, STEPS) if EMULATED else (30, 8)
    cycle = np.tile(np.random.default_rng(1).integers(0, 512, 61), 4000)
    gpu = pretrain(BACKEND, steps, "bf16", cycle)
    cpu = pretrain("cpu", steps, "bf16", cycle, run=tracked)
    print(f"bf16 losses {BACKEND}", gpu[0], gpu[tracked - 1], gpu[-1], "cpu", cpu[0], cpu[-1])
    assert all(np.isfinite(gpu))
    np.testing.assert_allclose(gpu[:tracked], cpu, rtol=2e-2, atol=2e-2)
    if steps >= 20:
        assert gpu[-1] < 0.5 * gpu[0], gpu


def qlora_losses(backend: str, steps: int = 5) -> list[float]:
    config = nn.TransformerConfig.preset("gpt2", size="tiny")
    model = nn.DecoderOnlyTransformer(config, seed=0, backend=backend)
    nn.quantize_model(model)
    nn.attach_lora(
        model, nn.LoraConfig(rank=4, alpha=8, targets=("attention.query", "attention.value"))
    )
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optim.AdamW(params, lr=1e-3, weight_decay=0.0, paged=True)
    toks = np.random.default_rng(0).integers(0, config.vocab_size, (4, config.context_length + 1))
    x = rt.tensor(toks[:, :-1], backend=backend)
    y = rt.tensor(toks[:, 1:], backend=backend)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        losses.append(float(loss.value.item()))
    return losses


def test_qlora_steps_match_the_cpu():
    gpu, cpu = qlora_losses(BACKEND), qlora_losses("cpu")
    assert gpu[-1] < gpu[0]
    np.testing.assert_allclose(gpu, cpu, rtol=1e-3, atol=1e-3)


def greedy(backend: str, tokens: int = 24) -> list[int]:
    config = nn.TransformerConfig.preset("gpt2", size=SIZE, vocab_size=512)
    model = nn.DecoderOnlyTransformer(config, seed=0, backend=backend).eval()
    cache = nn.ContiguousKVCache(model.config, max_sequences=1, backend=model.backend)
    sid = cache.add_sequence()
    out = [1, 2, 3]
    logits = model.forward_incremental([out], cache, [sid]).numpy()
    for _ in range(tokens):
        out.append(int(np.argmax(logits[0])))
        logits = model.forward_incremental([[out[-1]]], cache, [sid]).numpy()
    return out


def test_batch_one_greedy_decoding_matches_the_cpu():
    assert greedy(BACKEND) == greedy("cpu")
