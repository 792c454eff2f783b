from importlib.metadata import EntryPoint

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.testing.tensor import REFERENCE_ENTRY_POINT, extra_entry_points


def ep(name: str, target: str) -> EntryPoint:
    return EntryPoint(name=name, value=f"plugins_for_tests:{target}", group="riftco.backends")


def info(name: str) -> rt.BackendInfo:
    return next(i for i in rt.backends() if i.name == name)


def test_cpu_is_registered_through_the_entry_point_group():
    cpu = info("cpu")
    assert cpu.available and cpu.source == "riftco-tensor"
    assert rt.get_backend("cpu").name == "cpu"
    assert rt.get_backend("auto").name == "cpu"


def test_broken_plugin_is_recorded_not_fatal():
    with extra_entry_points(ep("cuda", "broken")):
        cuda = info("cuda")
        assert not cuda.available
        assert "RuntimeError: driver exploded while loading" in cuda.reason
        assert rt.get_backend().name == "cpu"
        with pytest.raises(rt.BackendUnavailable, match="driver exploded"):
            rt.get_backend("cuda")


def test_missing_module_is_recorded():
    missing = EntryPoint(
        name="metal", value="riftco_not_installed.mod:create", group="riftco.backends"
    )
    with extra_entry_points(missing):
        assert "ModuleNotFoundError" in info("metal").reason
        with pytest.raises(
            rt.BackendUnavailable, match="'metal' .* unavailable: ModuleNotFoundError"
        ):
            rt.zeros(2, backend="metal")


def test_incompatible_api_version():
    with extra_entry_points(ep("future", "future")):
        reason = info("future").reason
        assert "implements backend API (99, 0)" in reason and "major version 1" in reason


def test_factory_must_return_a_backend():
    with extra_entry_points(ep("odd", "not_a_backend")):
        assert "not a riftco.tensor.Backend" in info("odd").reason


def test_unavailable_plugin_reports_its_own_reason(monkeypatch):
    with extra_entry_points(ep("cuda", "no_device")):
        with pytest.raises(rt.BackendUnavailable, match="libcuda.so.1 missing"):
            rt.get_backend("cuda")
        monkeypatch.setenv("RIFTCO_BACKEND", "cuda")
        with pytest.raises(rt.BackendUnavailable, match="libcuda.so.1 missing"):
            rt.zeros(3)


def test_never_installed_backend():
    with pytest.raises(rt.BackendUnavailable, match="'nope' is not installed"):
        rt.get_backend("nope")


def test_auto_prefers_accelerators_but_not_host_plugins(monkeypatch):
    with extra_entry_points(ep("tpu", "host_pjrt")):
        assert rt.get_backend("auto").name == "cpu"
        assert rt.get_backend("tpu").name == "tpu"
    with extra_entry_points(ep("cuda", "accelerator")):
        assert rt.get_backend("auto").name == "cuda"
        monkeypatch.setenv("RIFTCO_BACKEND", "cpu")
        assert rt.get_backend().name == "cpu"


def test_discovery_runs_once(monkeypatch):
    calls = []
    import riftco.tensor.registry as registry

    original = registry.entry_points

    def counting(*, group):
        calls.append(group)
        return original(group=group)

    monkeypatch.setattr(registry, "entry_points", counting)
    rt.reset_discovery()
    for _ in range(3):
        rt.backends()
        rt.get_backend("cpu")
    assert calls == ["riftco.backends"]
    monkeypatch.undo()
    rt.reset_discovery()


def test_reference_backend_round_trips_and_mismatch():
    with extra_entry_points(REFERENCE_ENTRY_POINT):
        x = rt.tensor([[1.0, 2.0], [3.0, 4.0]])
        r = x.to("reference")
        assert r.device == "reference" and type(r._data).__name__ == "ReferenceStorage"
        back = r.to("cpu")
        np.testing.assert_array_equal(back.numpy(), x.numpy())
        assert x.to("cpu") is x
        with pytest.raises(
            rt.BackendMismatch,
            match=r"add: operands live on different backends \(cpu \(2, 2\), reference \(2, 2\)\)",
        ):
            x + r
        with pytest.raises(rt.BackendMismatch, match="matmul"):
            x @ r
        with pytest.raises(rt.BackendMismatch, match="concatenate"):
            rt.concatenate([x, r])


def test_missing_capability_is_a_clear_error():
    with extra_entry_points(ep("cuda", "accelerator")):
        with pytest.raises(
            rt.CapabilityMissing, match="backend 'cuda' does not implement 'from_numpy'"
        ):
            rt.zeros(2, backend="cuda")


def test_backends_command(capsys):
    from riftco.tensor.cli import main

    with extra_entry_points(ep("cuda", "no_device")):
        assert main([]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "available" in out
    assert "cuda" in out and "unavailable" in out and "libcuda.so.1 missing" in out


def test_scalar_operands_survive_rediscovery():
    # A new backend object may reuse a dead one's id; cached scalars must not leak across.
    for _ in range(20):
        with extra_entry_points(REFERENCE_ENTRY_POINT):
            r = rt.tensor([1.0, 2.0], backend="reference")
            assert (r + 1.0).tolist() == [2.0, 3.0]
        c = rt.tensor([1.0, 2.0])
        assert (c + 1.0).tolist() == [2.0, 3.0]


def test_a_lookup_by_name_runs_only_that_factory(monkeypatch):
    """get_backend("cpu") enumerates no other plugin's devices; a later full discovery
    (auto, backends()) runs the others and keeps the backend already made."""
    import plugins_for_tests

    ran = []
    monkeypatch.setattr(plugins_for_tests, "broken", lambda: ran.append("cuda") or 1 / 0)
    with extra_entry_points(ep("cuda", "broken")):
        cpu = rt.get_backend("cpu")
        assert ran == []
        with pytest.raises(rt.BackendUnavailable, match="ZeroDivisionError"):
            rt.get_backend("cuda")
        assert ran == ["cuda"]
        rt.get_backend("auto")
        assert rt.get_backend("cpu") is cpu and ran == ["cuda"]
        assert [i.name for i in rt.backends()] == sorted(i.name for i in rt.backends())
        assert not info("cuda").available and info("cpu").available
