"""The NAME plugin: registration, its native module, what it declares, its kernels."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pytest

import riftco.backends.NAME as plugin
import riftco.tensor as rt
from riftco.backends.NAME import _native

#: What the backend implements so far: extend it with each capability added.
IMPLEMENTED = {"from_numpy", "to_numpy", "reshape", "assign", "astype", "softmax"}


def test_registered_in_the_backend_group():
    eps = importlib.metadata.entry_points(group="riftco.backends")
    assert [ep.value for ep in eps if ep.name == "NAME"] == ["riftco.backends.NAME:create_backend"]


def test_the_native_module_is_its_own_and_reports_its_build_id():
    assert plugin.__version__ == _native.__version__
    build_id = plugin.native_build_id()
    assert len(build_id) == 16 and int(build_id, 16) >= 0
    assert f"RIFTCO_BUILD_ID:riftco.backends.NAME._native:{build_id}" == _native.BUILD_ID_MARKER
    assert Path(_native.__file__).name.startswith("_native.")


def test_discovery_finds_it_with_its_priority_and_capabilities():
    (info,) = [i for i in rt.backends() if i.name == "NAME"]
    assert info.available, info.reason
    assert info.api_version[0] == rt.BACKEND_API_VERSION[0]
    assert info.priority == plugin.PLUGINCLASS.priority
    assert set(info.capabilities) == IMPLEMENTED
    assert rt.get_backend("NAME").capabilities() == IMPLEMENTED


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_matches_the_cpu_backend(causal, log):
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    ours = rt.from_numpy(x, backend="NAME")
    fn = rt.log_softmax if log else rt.softmax
    got = fn(ours, causal=causal).numpy()
    want = fn(rt.from_numpy(x), causal=causal).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_each_kernel_is_compiled_once():
    backend = rt.get_backend("NAME")
    x = rt.from_numpy(np.ones((2, 3), np.float32), backend="NAME")
    rt.softmax(x)
    compiled = backend.programs.compiles
    rt.softmax(x)
    assert backend.programs.compiles == compiled >= 1


def test_kernel_errors_are_riftco_errors():
    with pytest.raises(rt.KernelError, match="causal mask of 4 queries"):
        _native.softmax(np.zeros((2, 3), np.float32), 4, False)


def test_a_missing_capability_is_a_clear_error():
    x = rt.tensor([1.0, 2.0], backend="NAME")
    with pytest.raises(
        rt.CapabilityMissing, match="'NAME' does not implement 'binary'.*no fallback"
    ):
        x + x
