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
