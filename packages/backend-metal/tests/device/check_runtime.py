"""The runtime on a real device: batching, the pool, readback, storage
semantics and refused arguments (run by ../test_on_device.py)."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.metal.runtime import Storage


def test_a_chain_of_ops_waits_only_when_the_host_reads(gpu):
    x = rt.tensor(np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64), backend=gpu)
    gpu.synchronize()
    before = gpu.device.stats()
    y = x
    for _ in range(20):
        y = (y @ x).tanh() + x
    after = gpu.device.stats()
    assert after["waits"] == before["waits"], "no op waited for the device"
    assert after["dispatches"] - before["dispatches"] >= 60
    got = y.numpy()
    assert gpu.device.stats()["waits"] == after["waits"] + 1
    xc = rt.tensor(x.numpy(), backend="cpu")
    want = xc
    for _ in range(20):
        want = (want @ xc).tanh() + xc
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def test_buffers_of_dropped_tensors_are_reused(gpu):
    x = rt.tensor(np.ones((256, 256), np.float32), backend=gpu)
    for _ in range(3):
        (x * 2.0).sum().item()
    before = gpu.device.stats()
    for _ in range(10):
        (x * 2.0).sum().item()
    after = gpu.device.stats()
    assert after["reuses"] - before["reuses"] >= 10
    assert after["allocations"] - before["allocations"] <= 2


def test_reshapes_share_storage_and_assignment_reaches_them(gpu):
    x = rt.tensor(np.zeros((2, 3), np.float32), backend=gpu)
    flat = x.reshape(6)
    assert isinstance(flat._data, Storage) and flat._data.buffer is x._data.buffer
    rt.write_rows_(
        x,
        rt.tensor(np.array([1]), backend=gpu),
        rt.tensor(np.ones((1, 3), np.float32), backend=gpu),
    )
    assert flat.numpy().tolist() == [0, 0, 0, 1, 1, 1]
    out = x.numpy()
    with pytest.raises(ValueError):
        out[0, 0] = 5.0  # read-only


def test_every_dtype_round_trips(gpu):
    for array in (
        np.array([[1.5, -2.0]], np.float32),
        np.array([3, -(2**31), 2**31 - 1], np.int64),
        np.array([True, False, True]),
        np.array([0, 7, 255], np.uint8),
        np.zeros((0, 3), np.float32),
    ):
        back = rt.tensor(array, backend=gpu).numpy()
        assert back.dtype == array.dtype and back.shape == array.shape
        np.testing.assert_array_equal(back, array)


def test_int64_outside_int32_is_refused(gpu):
    with pytest.raises(rt.KernelError, match="outside the int32 range"):
        rt.tensor(np.array([2**40]), backend=gpu)


def test_bad_indices_raise_and_leave_the_backend_usable(gpu):
    table = rt.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), backend=gpu)
    with pytest.raises(
        rt.KernelError, match="index 9 at position 1 is out of range for an axis of size 4"
    ):
        rt.index_select(table, 0, rt.tensor(np.array([0, 9]), backend=gpu))
    picked = rt.index_select(table, 0, rt.tensor(np.array([3, 0]), backend=gpu))
    assert picked.numpy().tolist() == [[9, 10, 11], [0, 1, 2]]


def test_a_kernel_that_does_not_compile_is_a_kernel_error(gpu):
    with pytest.raises(rt.KernelError, match="failed to compile"):
        gpu.device.kernel("fn broken( {", "main")
    assert (rt.tensor([1.0], backend=gpu) + 1.0).item() == 2.0


def test_adam_leaves_everything_unchanged_on_a_non_finite_gradient(gpu):
    p = rt.tensor(np.ones(5, np.float32), backend=gpu)
    g = rt.tensor(np.array([1, 1, np.inf, 1, 1], np.float32), backend=gpu)
    m = rt.tensor(np.zeros(5, np.float32), backend=gpu)
    v = rt.tensor(np.zeros(5, np.float32), backend=gpu)
    args = dict(sizes=[5], page_size=5, lr=[0.1], beta1=[0.9], beta2=[0.999], eps=[1e-8])
    bad = gpu.adam_update(
        [p._data], [g._data], [[m._data]], [[v._data]], weight_decay=[0.0],
        decoupled=False, step=[1], grad_scale=1.0, **args,
    )  # fmt: skip
    assert bad == 0
    assert p.numpy().tolist() == [1.0] * 5 and m.numpy().tolist() == [0.0] * 5


def test_describe_names_the_adapter(gpu):
    text = gpu.describe()
    assert gpu.device.name in text and gpu.name in text
    assert gpu.runs_on_host == (gpu.adapter.device_type == "cpu")
