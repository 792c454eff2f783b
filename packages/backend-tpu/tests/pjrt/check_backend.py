"""The tpu backend on a real plugin: identity, storage semantics, errors, and
chains of ops against the CPU backend."""

from __future__ import annotations

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.tpu import PjrtError, _native


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_the_backend_describes_its_plugin(tpu):
    assert tpu.name == "tpu"
    assert tpu.runs_on_host == (tpu.device.platform.lower() in ("cpu", "host"))
    assert f"PJRT {tpu.device.platform}" in tpu.describe()
    assert "C API 0." in tpu.describe()


def test_usable_by_name_and_by_auto_only_off_the_host(tpu):
    assert rt.get_backend("tpu") is tpu
    available = {b.name for b in rt.backends() if b.available}
    accelerators = [n for n in ("cuda", "metal") if n in available]
    if tpu.runs_on_host:
        assert rt.get_backend("auto").name == "cpu"
    elif not accelerators:
        assert rt.get_backend("auto") is tpu


def test_discovery_records_every_capability_and_the_priority(tpu):
    (info,) = [b for b in rt.backends() if b.name == "tpu"]
    decode = ("decode_program", "decode_step")
    # Capabilities of a newer API than the backend's are missing by design.
    newer = tuple(
        sorted(
            c
            for c, minor in rt.CAPABILITIES.items()
            if minor > tpu.api_version[1] and c not in rt.COMPOSED
        )
    )
    # Every composition riftco-tensor has: the block weights, the compute-dtype products,
    # the linear layer's ops and the residual add with its norm.
    assert info.composed == tuple(c for c in rt.CAPABILITIES if c in rt.COMPOSED)
    assert {"block_linear", "linear", "add_layer_norm"} <= set(info.composed)
    assert info.capabilities == tuple(
        c for c in rt.CAPABILITIES if c not in (*info.composed, *decode, *newer)
    )
    assert info.missing_capabilities == (*decode, *newer)  # models decode op by op on tpu
    assert info.priority == tpu.priority and info.runs_on_host == tpu.runs_on_host
    every_but_decode = [c for c in rt.CAPABILITIES if c not in (*decode, *newer)]
    assert rt.require_capabilities("tpu", every_but_decode, job="every op") is tpu


def test_round_trip_keeps_every_dtype(tpu):
    for array in [
        rand((3, 4)),
        np.arange(-5, 7, dtype=np.int64).reshape(3, 4),
        np.array([[True, False], [False, True]]),
        np.arange(10, dtype=np.uint8),
        np.float32(2.5),
        np.zeros((2, 0, 3), np.float32),
    ]:
        t = rt.from_numpy(array, backend="tpu")
        got = t.numpy()
        assert got.dtype == array.dtype and got.shape == array.shape
        np.testing.assert_array_equal(got, array)
        assert not got.flags.writeable


def test_storage_is_a_device_buffer_and_reshape_does_not_copy(tpu):
    t = rt.from_numpy(rand((2, 3, 4)), backend="tpu")
    assert isinstance(t._data, _native.Storage)
    r = t.reshape(6, 4)
    assert r._data.shape == (6, 4)
    assert r._data.buffer_shape == (2, 3, 4)


def test_assign_is_seen_through_views(tpu):
    t = rt.from_numpy(np.zeros((2, 3), np.float32), backend="tpu")
    view = t.reshape(6)
    t.assign_(rt.from_numpy(np.ones((2, 3), np.float32), backend="tpu"))
    np.testing.assert_array_equal(view.numpy(), np.ones(6))


def test_programs_compile_once_per_shape(tpu):
    x = rt.from_numpy(rand((5, 7), 1), backend="tpu")
    (x * 2.0).numpy()
    before = tpu.device.cache_stats()
    for _ in range(3):
        (x * 2.0).numpy()
    after = tpu.device.cache_stats()
    assert after[1] == before[1]  # no new compiles
    assert after[2] >= before[2] + 3


def test_a_transformer_block_chain_matches_cpu(tpu, cpu):
    b, t, d, h = 2, 5, 16, 4
    x, w1, w2 = rand((b, t, d), 1), rand((d, 4 * d), 2) * 0.2, rand((4 * d, d), 3) * 0.2
    gamma, beta = rand((d,), 4), rand((d,), 5)

    def block(backend):
        on = lambda a: rt.from_numpy(a, backend=backend)  # noqa: E731
        xs = on(x)
        y = rt.layer_norm(xs, on(gamma), on(beta), 1e-5)
        q = y.reshape(b, t, h, d // h)
        out = rt.attention(q, q, q, scale=0.5, causal=True, method="materialized")
        hidden = rt.gelu(out.reshape(b, t, d) @ on(w1), approximate="tanh")
        z = xs + hidden @ on(w2)
        return z.softmax(axis=-1).numpy(), z.sum(axis=(0, 1)).numpy()

    for got, want in zip(block("tpu"), block("cpu")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_moving_between_backends(tpu):
    x = rand((3, 3))
    t = rt.from_numpy(x, backend="tpu")
    back = t.to("cpu")
    assert back.device == "cpu"
    np.testing.assert_array_equal(back.numpy(), x)
    with pytest.raises(rt.BackendMismatch):
        t + back


def test_refused_arguments_raise_instead_of_aborting(tpu):
    a = rt.from_numpy(rand((2, 3)), backend="tpu")
    b = rt.from_numpy(rand((3, 2)), backend="tpu")
    # Straight to the native module, past riftco.tensor's own checks.
    with pytest.raises(PjrtError, match="do not broadcast"):
        _native.binary(tpu.device, "add", a._data, b._data, [2, 3])
    with pytest.raises(PjrtError, match="inner dims disagree"):
        _native.matmul(tpu.device, a._data, a._data, False, False)
    with pytest.raises(PjrtError, match="reaches element"):
        _native.copy_strided(tpu.device, a._data, [7], [1], 0)
    with pytest.raises(rt.KernelError, match="index 5 at position 0 is out of range"):
        rt.index_select(a, 0, rt.from_numpy(np.array([5]), backend="tpu"))


def test_nan_and_inf_follow_numpy(tpu):
    x = np.array([np.nan, -np.inf, 1.0, np.inf], np.float32)
    t = rt.from_numpy(x, backend="tpu")
    assert np.isnan(t.max().item())
    np.testing.assert_array_equal(rt.relu(t).numpy()[1:], np.maximum(x[1:], 0))
    assert np.isnan(rt.relu(t).numpy()[0])
