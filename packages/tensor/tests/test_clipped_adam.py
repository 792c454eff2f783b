"""The clipped Adam step (API 1.8 ``clipped_adam_update``): the gradient norm, the clip
scale and the update in one call, against the same backend's own reduction and
``adam_update`` (the same bits) and the float64 formula; all-or-nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tensor_helpers import rand

import riftco.tensor as rt
from riftco.tensor.backend import Backend

SHAPES = [(3,), (5, 7), (0,), (1,), (70000,)]
HYPER = dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1)


class Step:
    """Parameters, gradients and zero moments of one backend, with one ``values`` tensor."""

    def __init__(self, backend, grads, lr=None):
        self.backend = backend
        self.params = [
            rt.tensor(rand(g.shape, 40 + i), backend=backend) for i, g in enumerate(grads)
        ]
        self.grads = [rt.tensor(g, backend=backend) for g in grads]
        self.m = [[rt.zeros([g.size], backend=backend)] for g in grads]
        self.v = [[rt.zeros([g.size], backend=backend)] for g in grads]
        self.lr = lr or [1e-2] * len(grads)

    def hyper(self):
        n = len(self.grads)
        return dict(
            lr=self.lr,
            **{k: [x] * n for k, x in HYPER.items()},
            step=[1] * n,
            decoupled=True,
        )

    def clipped(self, max_grad_norm, values=()):
        values = [rt.tensor(np.array(x, np.float32), backend=self.backend) for x in values]
        return rt.clipped_adam_update_(
            self.params, self.grads, self.m, self.v, **self.hyper(),
            max_grad_norm=max_grad_norm, values=values,
        )  # fmt: skip

    def plain(self, grad_scale):
        return rt.adam_update_(
            self.params, self.grads, self.m, self.v, **self.hyper(), grad_scale=grad_scale
        )

    def snapshot(self):
        tensors = [*self.params, *(x[0] for x in self.m), *(x[0] for x in self.v)]
        return [t.numpy().tobytes() for t in tensors]


@pytest.fixture
def backend(backend):
    """The suite's backend; one of an older API than 1.8 has no clipped step."""
    has = "clipped_adam_update" in backend.capabilities()
    if not has and tuple(getattr(backend, "api_version", (1, 8))) < (1, 8):
        pytest.skip(f"{backend.name} implements backend API {backend.api_version}")
    return backend


def grads(seed=0, scale=1.0):
    return [(rand(s, seed + i) * scale).astype(np.float32) for i, s in enumerate(SHAPES)]


@pytest.mark.parametrize("max_grad_norm", [None, 1.0, 1e6])
def test_equals_the_backends_own_norm_and_update(backend, max_grad_norm):
    g = grads()
    fused, plain = Step(backend, g), Step(backend, g)
    result = fused.clipped(max_grad_norm, values=[2.5])
    assert result.applied and result.bad is None
    assert result.values == [2.5]
    exact = [float(np.sum(x.astype(np.float64) ** 2)) for x in g]
    np.testing.assert_allclose(result.sums, exact, rtol=1e-6)
    assert all(np.float32(x) == x for x in result.sums)
    norm = math.sqrt(math.fsum(result.sums))
    scale = 1.0 if max_grad_norm is None or norm <= max_grad_norm else max_grad_norm / norm
    assert plain.plain(scale) is None
    assert fused.snapshot() == plain.snapshot()


def test_clipped_parameters_follow_the_float64_formula(backend):
    g = grads(scale=3.0)
    step = Step(backend, g)
    before = [p.numpy().astype(np.float64) for p in step.params]
    assert step.clipped(1.0).applied
    norm = math.sqrt(sum(float(np.sum(x.astype(np.float64) ** 2)) for x in g))
    scale = 1.0 / norm
    for p0, x, p1 in zip(before, g, step.params):
        gs = x.astype(np.float64) * scale
        m, v = 0.1 * gs, 0.001 * gs * gs
        expected = p0 * (1 - 1e-2 * 0.1) - 1e-2 * (m / 0.1) / (np.sqrt(v / 0.001) + 1e-8)
        np.testing.assert_allclose(p1.numpy(), expected, rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("where", ["gradient", "overflow", "value"])
def test_a_step_the_host_must_decide_changes_nothing(backend, where):
    g = grads()
    values = [1.0]
    if where == "gradient":
        g[4][123] = np.nan
    elif where == "overflow":
        g[4][123] = 1e30  # its float32 sum of squares overflows: the host rescales it
    else:
        values = [math.inf]
    step = Step(backend, g)
    before = step.snapshot()
    result = step.clipped(1.0, values)
    assert (result.applied, result.bad) == (False, None)
    assert step.snapshot() == before
    if where == "overflow":
        assert result.sums[4] == math.inf and all(math.isfinite(x) for x in result.sums[:4])
    if where == "value":
        assert result.values == [math.inf]


def test_a_non_finite_candidate_changes_nothing_and_names_the_first(backend):
    step = Step(backend, grads(), lr=[1e-2, 1e38, 1e-2, 1e38, 1e-2])
    before = step.snapshot()
    versions = [p.version for p in step.params]
    result = step.clipped(1.0)
    assert (result.applied, result.bad) == (False, 1)
    assert step.snapshot() == before
    assert [p.version for p in step.params] == versions


def test_zero_gradients_are_exact_and_tiny_ones_are_left_to_the_host(backend):
    zero = [np.zeros(s, np.float32) for s in SHAPES]
    step = Step(backend, zero)
    result = step.clipped(1.0)
    assert result.applied and result.sums == [0.0] * len(SHAPES)
    tiny = [x.copy() for x in zero]
    tiny[1][0, 0] = 1e-40  # a subnormal: its float32 sum of squares is 0, but not the norm
    assert Step(backend, tiny).clipped(1.0).applied is False


def test_bad_arguments_raise(backend):
    step = Step(backend, grads())
    with pytest.raises(rt.ShapeError, match="max_grad_norm"):
        step.clipped(-1.0)
    with pytest.raises(rt.ShapeError, match="one element"):
        rt.clipped_adam_update_(
            [], [], [], [], lr=[], beta1=[], beta2=[], eps=[], weight_decay=[], step=[],
            decoupled=True, max_grad_norm=1.0, values=[rt.zeros([2], backend=backend)],
        )  # fmt: skip


def test_cpu_sums_are_its_own_reduction():
    cpu = rt.get_backend("cpu")
    step = Step(cpu, grads())
    own = [float(rt.sum_squares(x)) if x.size else 0.0 for x in step.grads]
    assert step.clipped(1.0).sums == own


def test_the_capability_is_declared():
    assert rt.CAPABILITIES["clipped_adam_update"] == 8
    assert rt.BACKEND_API_VERSION >= (1, 8)
    assert "clipped_adam_update" in rt.get_backend("cpu").capabilities()
    with pytest.raises(rt.CapabilityMissing, match="clipped_adam_update"):
        Backend().clipped_adam_update([], [], [], [], [], 1, [], [], [], [], [], True, [], 1.0, [])
