"""Parity with torch.optim.Adam / AdamW on the same gradients (where torch is installed)."""

import numpy as np
import pytest
from optim_helpers import grads_for, make_params, set_grads, values

from riftco.optim import Adam, AdamW, weight_decay_groups

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.parity

SHAPES = [(64, 48), (48,), (1000,), (3, 3, 3)]


def torch_params(ours):
    return [torch.nn.Parameter(torch.from_numpy(v)) for v in values(ours)]


def set_torch_grads(theirs, grads, scale=1.0):
    for t, g in zip(theirs, grads):
        t.grad = torch.from_numpy(g.copy())
        if scale != 1.0:
            t.grad.mul_(scale)  # a Python float multiplies a float32 tensor in float32


def assert_close(ours, theirs, opt, topt):
    """Parameters to 1e-6 relative; moments to 1e-6 of their largest magnitude (m and v are
    running sums, so an element that nearly cancels keeps only absolute accuracy)."""
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.value.numpy(), t.detach().numpy(), rtol=1e-6, atol=1e-7)
    state = opt.state_dict()["state"]
    for i, t in enumerate(theirs):
        ts = topt.state[t]
        assert state[i]["step"] == int(ts["step"])
        for ours_key, torch_key in (("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")):
            expected = ts[torch_key].numpy()
            scale = float(np.abs(expected).max())
            np.testing.assert_allclose(state[i][ours_key], expected, rtol=1e-6, atol=1e-6 * scale)


@pytest.mark.parametrize("max_grad_norm", [None, 1.0])
@pytest.mark.parametrize(
    ("ours_cls", "torch_cls", "weight_decay"),
    [
        (Adam, "Adam", 0.0),
        (Adam, "Adam", 0.01),
        (AdamW, "AdamW", 0.01),
        (AdamW, "AdamW", 0.0),
    ],
    ids=["adam", "adam-l2", "adamw", "adamw-no-decay"],
)
def test_matches_torch(ours_cls, torch_cls, weight_decay, max_grad_norm):
    ours = make_params(SHAPES)
    theirs = torch_params(ours)
    opt = ours_cls(
        ours,
        lr=3e-3,
        betas=(0.85, 0.99),
        eps=1e-7,
        weight_decay=weight_decay,
        max_grad_norm=max_grad_norm,
    )
    topt = getattr(torch.optim, torch_cls)(
        theirs, lr=3e-3, betas=(0.85, 0.99), eps=1e-7, weight_decay=weight_decay
    )
    for step in range(1, 11):
        grads = grads_for(SHAPES, step, scale=0.5)
        set_grads(ours, grads)
        stats = opt.step()
        set_torch_grads(theirs, grads)
        torch_norm = torch.nn.utils.clip_grad_norm_(theirs, float("inf"))
        assert stats.gradient_norm == pytest.approx(float(torch_norm), rel=1e-6)
        set_torch_grads(theirs, grads, stats.clip_scale)
        if max_grad_norm is not None:
            assert stats.clip_scale < 1.0
        topt.step()
        assert_close(ours, theirs, opt, topt)


def test_matches_torch_with_parameter_groups_and_a_changing_rate():
    names = ["token_embedding.weight", "blocks.0.weight", "blocks.0.bias", "final_norm.weight"]
    shapes = [(50, 16), (16, 16), (16,), (16,)]
    ours = make_params(shapes)
    theirs = torch_params(ours)
    opt = AdamW(weight_decay_groups(zip(names, ours), 0.1), lr=1e-2, max_grad_norm=None)
    topt = torch.optim.AdamW(
        [
            {"params": [theirs[1]], "weight_decay": 0.1},
            {"params": [theirs[0], theirs[2], theirs[3]], "weight_decay": 0.0},
        ],
        lr=1e-2,
    )
    order = [1, 0, 2, 3]  # our group order, as positions in `shapes`
    for step in range(1, 8):
        lr = 1e-2 * step / 7
        opt.set_lr(lr)
        for g in topt.param_groups:
            g["lr"] = lr
        grads = grads_for(shapes, step)
        set_grads(ours, grads)
        set_torch_grads(theirs, grads)
        opt.step()
        topt.step()
        assert_close([ours[i] for i in order], [theirs[i] for i in order], opt, topt)
