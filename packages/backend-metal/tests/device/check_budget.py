"""What one training step of the tiny GPT-2 costs in device traffic, counted by the
device (``Device.stats()``) and held to budgets (run by ../test_on_device.py): a
warm step creates no pipeline and no bind group, and its submits, uploads and
reads stay within the numbers below (measured with this package's kernels; a
change that adds round trips fails here)."""

from __future__ import annotations

import numpy as np
import pytest

from riftco.testing.model_check import TINY

#: Per warm step of the tiny model (2 layers, B = 3, T = 12, AdamW with clipping), with
#: the synchronization that ends the count. The three reads are the contract's: the
#: gradient norm for clipping, Adam's finite flag and the loss; each submits what was
#: recorded before it. Index checks of host-made token ids read nothing (before: 8
#: reads and 8 submits). About 210 dispatches; about 2 in 3 bind groups are new,
#: since the pool hands out other buffers from one step to the next.
BUDGET = {"submits": 3, "uploads": 6, "reads": 3, "waits": 4, "bind_groups": 160, "pipelines": 0}


def _step(nn_model, opt, ids):
    loss = nn_model.loss(ids[:, :-1], ids[:, 1:])
    loss.backward()
    opt.step()
    opt.zero_grad()
    return float(loss.value.item())


@pytest.mark.parametrize("attention", ["materialized", "flash"])
def test_a_warm_training_step_stays_within_its_device_budget(gpu, attention):
    nn = pytest.importorskip("riftco.nn")
    optim = pytest.importorskip("riftco.optim")
    config = nn.TransformerConfig.preset("gpt2", **{**TINY, "attention": attention})
    model = nn.DecoderOnlyTransformer(config, seed=0, backend=gpu.name)
    opt = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, max_grad_norm=1.0)
    ids = np.random.default_rng(0).integers(0, config.vocab_size, (3, 13))
    for _ in range(2):  # compiles every kernel and fills the bind group cache
        _step(model, opt, ids)
    gpu.synchronize()
    before = gpu.device.stats()
    loss = _step(model, opt, ids)
    gpu.synchronize()
    after = gpu.device.stats()
    spent = {key: after[key] - before[key] for key in BUDGET}
    print(f"{attention}: per step {spent}, {after['dispatches'] - before['dispatches']} dispatches")
    assert np.isfinite(loss)
    over = {k: (v, BUDGET[k]) for k, v in spent.items() if v > BUDGET[k]}
    assert not over, f"over budget (spent, budget): {over}"
    assert after["bind_group_hits"] > before["bind_group_hits"]


def test_indices_from_the_host_are_checked_there_and_device_writes_undo_that(gpu):
    import riftco.tensor as rt

    x = rt.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), backend=gpu)
    good = rt.tensor(np.array([3, 0, 2]), backend=gpu)
    bad = rt.tensor(np.array([1, 4, 0]), backend=gpu)
    x.numpy()
    reads = gpu.device.stats()["reads"]
    checks = gpu.rt.host_checks
    picked = x.index_select(0, good)
    with pytest.raises(rt.KernelError, match="index 4 at position 1 is out of range"):
        x.index_select(0, bad)
    assert gpu.device.stats()["reads"] == reads and gpu.rt.host_checks == checks + 2
    assert picked.numpy().tolist() == [[9, 10, 11], [0, 1, 2], [6, 7, 8]]
    # Written on the device, the indices are checked there again (and still right).
    idx = rt.tensor(np.array([0, 1, 2]), backend=gpu)
    rt.write_rows_(
        idx.reshape(3, 1),
        rt.tensor(np.array([1]), backend=gpu),
        rt.tensor(np.array([[7]]), backend=gpu),
    )
    reads = gpu.device.stats()["reads"]
    with pytest.raises(rt.KernelError, match="index 7 at position 1 is out of range"):
        x.index_select(0, idx)
    assert gpu.device.stats()["reads"] > reads
