import math

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.optim import clip_scale, global_grad_norm


def norm_of(*arrays):
    return math.sqrt(sum(float((np.asarray(a, np.float64) ** 2).sum()) for a in arrays))


@pytest.mark.parametrize("magnitude", [1.0, 1e-25, 1e-42, 1e20, 1e37])
def test_the_global_norm_is_exact_at_every_magnitude(magnitude):
    rng = np.random.default_rng(0)
    arrays = [(rng.standard_normal(s) * magnitude).astype(np.float32) for s in [(50, 3), (7,)]]
    got = global_grad_norm(rt.from_numpy(a) for a in arrays)
    assert math.isfinite(got)
    assert got == pytest.approx(norm_of(*arrays), rel=1e-6)


def test_special_cases():
    assert global_grad_norm([]) == 0.0
    assert global_grad_norm([rt.zeros(5), rt.zeros(0)]) == 0.0
    assert math.isnan(global_grad_norm([rt.tensor([1.0, float("nan")])]))
    assert global_grad_norm([rt.tensor([1.0, float("inf")])]) == math.inf


def test_clip_scale():
    assert clip_scale(5.0, 1.0) == 0.2
    assert clip_scale(0.5, 1.0) == 1.0
    assert clip_scale(1.0, 1.0) == 1.0
    assert clip_scale(1e9, None) == 1.0


def test_the_norm_and_other_scalars_come_to_the_host_in_one_read(monkeypatch):
    from riftco.optim import norm_and_values

    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.full(4, 0.5, np.float32)]
    grads = [rt.from_numpy(a) for a in arrays]
    loss = rt.tensor(2.5)
    reads = []
    real = rt.Tensor.numpy
    monkeypatch.setattr(rt.Tensor, "numpy", lambda self: reads.append(self.shape) or real(self))
    norm, values = norm_and_values(grads, [loss])
    assert len(reads) == 1
    assert values == [2.5]
    assert norm == math.sqrt(math.fsum(float(np.sum(a.astype(np.float64) ** 2)) for a in arrays))


def test_the_adam_step_reads_nothing_when_given_the_measured_norm(monkeypatch):
    from riftco.autograd import Parameter
    from riftco.optim import Adam

    p = Parameter(rt.tensor([1.0, -2.0, 3.0]))
    p.grad = rt.tensor([0.5, 0.5, -1.0])
    opt = Adam([p], lr=0.1, max_grad_norm=0.5)
    reads = []
    real = rt.Tensor.numpy
    monkeypatch.setattr(rt.Tensor, "numpy", lambda self: reads.append(self.shape) or real(self))
    norm, _ = opt.measure()
    assert len(reads) == 1
    stats = opt.step(gradient_norm=norm)
    assert len(reads) == 1
    assert stats.gradient_norm == norm and stats.clip_scale == 0.5 / norm
