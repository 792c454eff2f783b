"""The fused Adam capability against a float64 formula, across page layouts and threads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tensor_helpers import rand

import riftco.tensor as rt
from riftco.tensor.backend import Backend
from riftco.testing.tensor import NumpyReferenceBackend

HYPER = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}


def call(
    backend,
    params,
    grads,
    m,
    v,
    sizes,
    page_size,
    step=1,
    weight_decay=0.0,
    decoupled=False,
    grad_scale=1.0,
    **hyper,
):
    """The capability with the same hyperparameters for every parameter."""
    per = {k: [hyper.get(k, x)] * len(params) for k, x in HYPER.items()}
    steps = step if isinstance(step, list) else [step] * len(params)
    decays = weight_decay if isinstance(weight_decay, list) else [weight_decay] * len(params)
    return backend.adam_update(
        params,
        grads,
        m,
        v,
        sizes,
        page_size,
        **per,
        weight_decay=decays,
        decoupled=decoupled,
        step=steps,
        grad_scale=grad_scale,
    )


class State:
    """Parameters, gradients and paged moments as storages of one backend."""

    def __init__(self, backend, shapes, page_size, seed=0):
        self.backend, self.page_size = backend, page_size
        self.shapes = [tuple(s) for s in shapes]
        self.sizes = [math.prod(s) for s in self.shapes]
        self.params = [self._put(rand(s, seed + i)) for i, s in enumerate(self.shapes)]
        self.grads = [self._put(rand(s, seed + 100 + i)) for i, s in enumerate(self.shapes)]
        self.m = [self._pages(np.zeros(n, np.float32)) for n in self.sizes]
        self.v = [self._pages(np.zeros(n, np.float32)) for n in self.sizes]

    def _put(self, array):
        return self.backend.from_numpy(np.ascontiguousarray(array, dtype=np.float32))

    def _pages(self, flat):
        bounds = list(range(0, flat.size, self.page_size))[1:]
        return [self._put(page) for page in np.split(flat, bounds)]

    def set_grads(self, arrays):
        self.grads = [self._put(a) for a in arrays]

    def step(self, step, weight_decay=0.0, decoupled=False, grad_scale=1.0):
        return call(
            self.backend,
            self.params,
            self.grads,
            self.m,
            self.v,
            self.sizes,
            self.page_size,
            step,
            weight_decay,
            decoupled,
            grad_scale,
        )

    def _host(self, x, shape):
        return np.array(self.backend.to_numpy(x, shape, rt.float32), copy=True)

    def snapshot(self):
        def flat(pages):
            return np.concatenate([self._host(p, (p_n,)) for p, p_n in pages]).reshape(-1)

        params = [self._host(p, s) for p, s in zip(self.params, self.shapes)]
        m = [flat([(p, self._len(i, j)) for j, p in enumerate(ps)]) for i, ps in enumerate(self.m)]
        v = [flat([(p, self._len(i, j)) for j, p in enumerate(ps)]) for i, ps in enumerate(self.v)]
        return params, m, v

    def _len(self, i, j):
        return min(self.page_size, self.sizes[i] - j * self.page_size)


def formula(p, g, m, v, step, weight_decay=0.0, decoupled=False, grad_scale=1.0):
    """Adam / AdamW in float64, written as the textbook equations."""
    lr, b1, b2, eps = HYPER["lr"], HYPER["beta1"], HYPER["beta2"], HYPER["eps"]
    p, g, m, v = (x.astype(np.float64) for x in (p, g, m, v))
    g = g * grad_scale
    if decoupled:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1**step), v / (1 - b2**step)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


SHAPES = [(3,), (5, 7), (1,), (0,), (64, 33)]


@pytest.mark.parametrize(("weight_decay", "decoupled"), [(0.0, False), (0.1, False), (0.1, True)])
def test_matches_the_float64_formula_over_several_steps(backend, weight_decay, decoupled):
    state = State(backend, SHAPES, page_size=16)
    params, m, v = state.snapshot()
    params = [p.reshape(-1).astype(np.float64) for p in params]
    for step in range(1, 5):
        grads = [rand(s, 200 + 10 * step + i) for i, s in enumerate(SHAPES)]
        state.set_grads(grads)
        assert state.step(step, weight_decay, decoupled, grad_scale=0.5) is None
        for i, g in enumerate(grads):
            params[i], m[i], v[i] = formula(
                params[i], g.reshape(-1), m[i], v[i], step, weight_decay, decoupled, grad_scale=0.5
            )
        got_p, got_m, got_v = state.snapshot()
        for i in range(len(SHAPES)):
            np.testing.assert_allclose(got_p[i].reshape(-1), params[i], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(got_m[i], m[i], rtol=1e-5, atol=1e-8)
            np.testing.assert_allclose(got_v[i], v[i], rtol=1e-5, atol=1e-10)


def test_cpu_equals_the_numpy_formula_bitwise():
    cpu, ref = rt.get_backend("cpu"), NumpyReferenceBackend()
    shapes = [(300, 257), (4099,), (2,)]
    a, b = State(cpu, shapes, 4096), State(ref, shapes, 4096)
    for step in range(1, 4):
        grads = [rand(s, 50 * step + i, low=-3, high=3) for i, s in enumerate(shapes)]
        a.set_grads(grads)
        b.set_grads(grads)
        kwargs = {"weight_decay": 0.01, "decoupled": step % 2 == 0, "grad_scale": 0.75}
        assert a.step(step, **kwargs) is None and b.step(step, **kwargs) is None
    for x, y in zip(a.snapshot(), b.snapshot()):
        for u, w in zip(x, y):
            assert u.tobytes() == w.tobytes()


@pytest.mark.parametrize("page_size", [1, 7, 4096])
def test_paged_and_contiguous_moments_agree_bitwise(backend, page_size):
    shapes = [(50, 90), (4097,), (0,), (1,)]
    paged, whole = State(backend, shapes, page_size), State(backend, shapes, 1 << 30)
    for step in range(1, 4):
        grads = [rand(s, 10 * step + i) for i, s in enumerate(shapes)]
        paged.set_grads(grads)
        whole.set_grads(grads)
        assert paged.step(step, 0.1, True) is None and whole.step(step, 0.1, True) is None
    for x, y in zip(paged.snapshot(), whole.snapshot()):
        for u, w in zip(x, y):
            assert u.tobytes() == w.tobytes()


def test_results_do_not_depend_on_the_thread_count():
    cpu = rt.get_backend("cpu")
    before = rt.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 3):
            rt.set_num_threads(threads)
            state = State(cpu, [(600, 700), (33,)], 4096)
            for step in (1, 2):
                assert state.step(step, 0.01, False) is None
            results.append(b"".join(x.tobytes() for part in state.snapshot() for x in part))
    finally:
        rt.set_num_threads(before)
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e38])
def test_a_non_finite_candidate_changes_nothing(backend, bad):
    shapes = [(10,), (3, 4000), (9000,)]
    state = State(backend, shapes, 4096)
    assert state.step(1) is None
    before = state.snapshot()
    grads = [rand(s, 7 + i) for i, s in enumerate(shapes)]
    grads[2][8999] = bad  # the last page of the last parameter (1e38 overflows v)
    state.set_grads(grads)
    assert state.step(2) == 2
    for x, y in zip(state.snapshot(), before):
        for u, w in zip(x, y):
            assert u.tobytes() == w.tobytes()
    grads[1][2, 5] = bad
    state.set_grads(grads)
    assert state.step(2) == 1


def test_zero_gradients_with_zero_moments_leave_parameters_unchanged(backend):
    state = State(backend, [(4, 5)], 4096)
    state.set_grads([np.zeros((4, 5), np.float32)])
    before = state.snapshot()
    assert state.step(1) is None
    after = state.snapshot()
    assert after[0][0].tobytes() == before[0][0].tobytes()
    assert not after[1][0].any() and not after[2][0].any()


def test_parameters_keep_their_own_hyperparameters(backend):
    state = State(backend, [(6,), (6,)], 4096)
    state.set_grads([np.zeros(6, np.float32)] * 2)
    assert (
        call(
            backend,
            state.params,
            state.grads,
            state.m,
            state.v,
            state.sizes,
            4096,
            step=[1, 3],
            weight_decay=[0.5, 0.0],
            decoupled=True,
        )
        is None
    )
    (p0, p1), _, _ = state.snapshot()
    before = [rand((6,), 0), rand((6,), 1)]
    assert p0.tobytes() == (before[0] * np.float32(1 - 1e-2 * 0.5)).tobytes()
    assert p1.tobytes() == before[1].tobytes()


def test_disagreeing_arguments_raise(backend):
    state = State(backend, [(10,)], 4)
    with pytest.raises(rt.KernelError):
        call(backend, state.params, state.grads, state.m, [state.v[0][:2]], state.sizes, 4)
    with pytest.raises(rt.KernelError):
        call(backend, state.params, state.grads, state.m, state.v, state.sizes, 5)
    with pytest.raises(rt.KernelError):
        state.step(0)


def test_cpu_refuses_an_array_passed_twice_or_short_lists():
    cpu = rt.get_backend("cpu")
    state = State(cpu, [(10,)], 4096)
    with pytest.raises(rt.KernelError, match="passed twice|also written"):
        call(cpu, state.params, state.params, state.m, state.v, state.sizes, 4096)
    with pytest.raises(rt.KernelError, match="entries"):
        cpu.adam_update(
            state.params,
            state.grads,
            state.m,
            state.v,
            state.sizes,
            4096,
            lr=[],
            beta1=[0.9],
            beta2=[0.999],
            eps=[1e-8],
            weight_decay=[0.0],
            decoupled=False,
            step=[1],
            grad_scale=1.0,
        )


def test_the_capability_is_declared():
    assert rt.CAPABILITIES["adam_update"] == 1
    assert rt.BACKEND_API_VERSION >= (1, 1)
    with pytest.raises(rt.CapabilityMissing, match="adam_update"):
        call(Backend(), [], [], [], [], [], 4096)
