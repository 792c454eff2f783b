"""riftco-optim's ``measured_step`` over the cuda kernels on ``cudaemu`` (API 1.8
``clipped_adam_update``: the gradient norm, the clip scale and the update on the device,
one read): the CPU's stats and bits, and all-or-nothing -- a non-finite gradient or
update leaves every parameter and moment as it was and is reported as the CPU reports
it (``NonFiniteUpdate``, the same ``parameter``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import riftco.tensor as rt

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

optim = pytest.importorskip("riftco.optim")

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)

#: Parameter shapes: several chunks for the largest (CHUNK_MIN is 65,536), an empty one.
SHAPES = [(4, 3), (140000,), (0,), (7,)]


class Param:
    def __init__(self, value: rt.Tensor):
        self.value, self.grad = value, None


def make(backend, paged: bool, max_grad_norm=1.0, lr=1e-2):
    rng = np.random.default_rng(5)
    params = [
        Param(rt.tensor(rng.standard_normal(s).astype(np.float32), backend=backend)) for s in SHAPES
    ]
    opt = optim.AdamW(
        params, lr=lr, weight_decay=0.1, max_grad_norm=max_grad_norm, paged=paged, page_size=50000
    )
    return params, opt


def grads(seed: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in SHAPES]


def give(backend, params, arrays):
    for p, g in zip(params, arrays):
        p.grad = rt.tensor(g, backend=backend)


def state(params, opt):
    out = [p.value.numpy().tobytes() for p in params]
    for entry in opt.state_dict()["state"].values():
        out += [np.asarray(entry["exp_avg"]).tobytes(), np.asarray(entry["exp_avg_sq"]).tobytes()]
    return out


@pytest.fixture(scope="module")
def emu():
    return cuda_emulation.EmulatedCudaBackend()


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("scale", [1.0, 1e-3])  # clipped, and under the threshold
def test_the_steps_equal_the_cpus(emu, paged, scale):
    cpu = rt.get_backend("cpu")
    assert "clipped_adam_update" in emu.capabilities()
    runs = {}
    for name, backend in (("cpu", cpu), ("emu", emu)):
        params, opt = make(backend, paged)
        stats = []
        for step in range(3):
            give(backend, params, grads(10 + step, scale))
            loss = rt.tensor(np.array(2.0 + step, np.float32), backend=backend)
            got, values = opt.measured_step([loss])
            assert values == [2.0 + step]
            stats.append(got)
        runs[name] = (stats, state(params, opt))
    # The same sums (float32 roundings of float64 sums), so the same norm, scale and bits.
    assert runs["emu"][0] == runs["cpu"][0]
    assert runs["emu"][1] == runs["cpu"][1]
    if scale == 1.0:
        assert runs["emu"][0][0].clip_scale < 1.0


def test_a_non_finite_gradient_changes_nothing_and_names_no_parameter(emu):
    params, opt = make(emu, paged=True)
    give(emu, params, grads(1))
    opt.measured_step()
    before, count = state(params, opt), opt.step_count
    arrays = grads(2)
    arrays[1][99999] = np.inf
    give(emu, params, arrays)
    with pytest.raises(optim.NonFiniteUpdate, match="gradient norm is inf") as info:
        opt.measured_step()
    assert info.value.parameter is None
    assert state(params, opt) == before and opt.step_count == count


def test_a_non_finite_update_changes_nothing_and_names_the_parameter(emu):
    reports = []
    for backend in (rt.get_backend("cpu"), emu):
        params, opt = make(backend, paged=False, max_grad_norm=None)
        give(backend, params, grads(1))
        opt.measured_step()
        before = state(params, opt)
        arrays = grads(2)
        arrays[3][2] = 1e19  # finite, its square a normal float32; v's update overflows
        give(backend, params, arrays)
        opt.param_groups[0]["lr"] = 1e38
        with pytest.raises(optim.NonFiniteUpdate) as info:
            opt.measured_step()
        assert state(params, opt) == before and opt.step_count == 1
        reports.append((info.value.parameter, str(info.value)))
    assert reports[0] == reports[1]


def test_a_non_finite_loss_updates_nothing(emu):
    params, opt = make(emu, paged=False)
    give(emu, params, grads(1))
    before = state(params, opt)
    stats, values = opt.measured_step([rt.tensor(np.array(np.nan, np.float32), backend=emu)])
    assert stats is None and np.isnan(values[0])
    assert state(params, opt) == before and opt.step_count == 0


def test_an_overflowing_sum_is_rescaled_on_the_host_as_on_the_cpu(emu):
    results = []
    for backend in (rt.get_backend("cpu"), emu):
        params, opt = make(backend, paged=False)
        arrays = grads(3)
        arrays[1][7] = 1e30  # its float32 sum of squares overflows; the norm does not
        give(backend, params, arrays)
        stats, _ = opt.measured_step()
        results.append((stats, state(params, opt)))
    assert results[0] == results[1]
    assert 1e29 < results[0][0].gradient_norm < 1e31
