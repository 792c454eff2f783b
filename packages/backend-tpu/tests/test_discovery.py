"""Importing, registration and plugin lookup, without loading any plugin."""

from __future__ import annotations

import importlib.metadata
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import riftco.backends.tpu as tpu
import riftco.tensor as rt
from riftco.backends.tpu import plugin
from riftco.testing.tensor import extra_entry_points

TPU_ENTRY_POINT = EntryPoint(
    name="tpu", value="riftco.backends.tpu:create_backend", group="riftco.backends"
)
LOOKUP_VARS = (plugin.PLUGIN_VAR, *plugin.TPU_VARS, "LD_LIBRARY_PATH")


@pytest.fixture
def bare(monkeypatch):
    """An environment with no plugin anywhere."""
    for var in LOOKUP_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(plugin, "_libtpu_package", lambda: None)
    monkeypatch.setattr(plugin, "SYSTEM_LIBRARY_DIRS", ())
    return monkeypatch


def library(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(b"not a shared library")
    return path


def test_the_package_imports_and_declares_its_api():
    assert tpu.__version__ == tpu._native.__version__
    assert tpu.API_VERSION[0] == rt.BACKEND_API_VERSION[0]
    assert tpu._native.PJRT_API_MAJOR == 0


def test_the_native_module_is_its_own_and_reports_its_build_id():
    build_id = tpu.native_build_id()
    assert len(build_id) == 16 and int(build_id, 16) >= 0
    assert tpu._native.BUILD_ID_MARKER == f"RIFTCO_BUILD_ID:riftco.backends.tpu._native:{build_id}"
    assert Path(tpu._native.__file__).name.startswith("_native.")


def test_registered_as_tpu_in_the_backend_group():
    eps = importlib.metadata.entry_points(group="riftco.backends")
    found = [ep for ep in eps if ep.name == "tpu"]
    assert [ep.value for ep in found] == ["riftco.backends.tpu:create_backend"]


def test_without_a_plugin_tpu_is_unavailable_with_the_reason(bare):
    with extra_entry_points(TPU_ENTRY_POINT, replace=True):
        (info,) = rt.backends()
        assert info.name == "tpu" and not info.available
        assert "no PJRT plugin found" in info.reason
        assert "RIFTCO_PJRT_PLUGIN" in info.reason
        with pytest.raises(rt.BackendUnavailable, match="no PJRT plugin found"):
            rt.get_backend("tpu")


def test_auto_falls_back_to_cpu_without_a_plugin(bare):
    with extra_entry_points(TPU_ENTRY_POINT):
        assert rt.get_backend("auto").name == "cpu"


def test_the_explicit_plugin_comes_first(bare, tmp_path):
    chosen = library(tmp_path, "chosen.so")
    bare.setenv(plugin.PLUGIN_VAR, str(chosen))
    bare.setenv("RIFTCO_TPU_LIBRARY", str(library(tmp_path, "libtpu.so")))
    found = plugin.find_plugin()
    assert found.path == chosen and found.source == plugin.PLUGIN_VAR


def test_tpu_variables_in_order(bare, tmp_path):
    first, second = library(tmp_path, "a.so"), library(tmp_path, "b.so")
    bare.setenv("TPU_LIBRARY_PATH", str(second))
    assert plugin.find_plugin().path == second
    bare.setenv("RIFTCO_TPU_LIBRARY", str(first))
    assert plugin.find_plugin().path == first


def test_the_loader_path_is_searched_last(bare, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    found = library(lib, plugin.LIBTPU)
    bare.setenv("LD_LIBRARY_PATH", f"/nonexistent:{lib}")
    assert plugin.find_plugin() == plugin.PluginLocation(found, "the library path")


def test_the_libtpu_package_comes_before_the_loader_path(bare, tmp_path):
    packaged = library(tmp_path, "libtpu.so")
    bare.setattr(plugin, "_libtpu_package", lambda: packaged)
    assert plugin.find_plugin().source == "the libtpu package"


def test_an_explicit_choice_that_is_missing_is_an_error(bare, tmp_path):
    bare.setenv(plugin.PLUGIN_VAR, str(tmp_path / "missing.so"))
    with pytest.raises(rt.BackendUnavailable, match="not a shared library file"):
        plugin.find_plugin()
    bare.setenv(plugin.PLUGIN_VAR, "no-such-plugin-package")
    with pytest.raises(rt.BackendUnavailable, match="no installed distribution"):
        plugin.find_plugin()
    bare.delenv(plugin.PLUGIN_VAR)
    bare.setenv("RIFTCO_TPU_LIBRARY", str(tmp_path / "gone.so"))
    with pytest.raises(rt.BackendUnavailable, match="RIFTCO_TPU_LIBRARY"):
        plugin.find_plugin()


def test_a_package_name_resolves_to_its_library(bare):
    if plugin.distribution_library("xla-cpu-pjrt") is None:
        pytest.skip("xla-cpu-pjrt is not installed")
    bare.setenv(plugin.PLUGIN_VAR, "xla-cpu-pjrt")
    found = plugin.find_plugin()
    assert found.path.name == "xla_cpu_pjrt.so"
    assert "package xla-cpu-pjrt" in found.source


def test_a_library_that_is_not_a_plugin_is_unavailable_not_fatal(bare, tmp_path):
    bare.setenv(plugin.PLUGIN_VAR, str(library(tmp_path, "broken.so")))
    with pytest.raises(rt.BackendUnavailable, match="failed to initialize.*dlopen"):
        tpu.create_backend()
    with extra_entry_points(TPU_ENTRY_POINT, replace=True):
        (info,) = rt.backends()
        assert not info.available and "dlopen" in info.reason


class FakeDevice:
    platform, platform_version, device, device_count = "tpu", "v5e", "TPU_0", 4
    api_version = (0, 81)
    client_created, client_options, plugin_kind = True, ["preallocate=false"], "tpu"

    def __init__(self, is_host: bool):
        self.is_host = is_host


def test_host_plugins_are_never_chosen_by_auto():
    location = plugin.PluginLocation(Path("/x.so"), "test")
    assert tpu.TpuBackend(FakeDevice(True), location).runs_on_host
    accelerator = tpu.TpuBackend(FakeDevice(False), location)
    assert not accelerator.runs_on_host
    assert "PJRT tpu v5e, TPU_0 (4 device(s)), C API 0.81" in accelerator.describe()
    assert "options: preallocate=false" in accelerator.describe()


def test_before_its_client_exists_the_backend_describes_the_plugin_alone():
    device = FakeDevice(False)
    device.client_created = False
    backend = tpu.TpuBackend(device, plugin.PluginLocation(Path("/x.so"), "test"))
    text = backend.describe()
    assert text.startswith("PJRT tpu plugin (client created on first use")
    assert "/x.so from test" in text


def test_a_missing_capability_says_not_supported_on_tpu():
    backend = tpu.TpuBackend(FakeDevice(False), plugin.PluginLocation(Path("/x.so"), "test"))
    err = backend._missing("frobnicate")
    assert isinstance(err, rt.CapabilityMissing)
    assert "'frobnicate' is not supported on tpu" in str(err)
    assert "no fallback" in str(err)


def test_errors_are_riftco_errors():
    assert issubclass(tpu.PjrtError, rt.KernelError)
    assert issubclass(tpu.PjrtError, rt.RiftcoError)


#: What riftco-tensor's op layer composes on tpu from its kernels: 1.6's block weights,
#: 1.9's products in a compute dtype (astype, then matmul), 1.10's linear layer ops (the
#: products, the bias add and the bias gradient's sum), 1.11's residual add and norm,
#: 1.12's attention in a compute dtype (its float32 products), 1.13's attention through
#: its stacked projections (the weights concatenated, one product, the parts narrowed),
#: 1.14's layer norm backward with the residual's gradient (the norm's, then the add),
#: 1.15's mean cross-entropy (the per-row losses, the kept count, the sum).
COMPOSED = (
    "block_dequantize",
    "block_linear",
    "matmul_compute",
    "linear",
    "linear_backward",
    "add_layer_norm",
    "flash_attention_compute",
    "flash_attention_backward_compute",
    "projected_attention",
    "projected_attention_backward",
    "add_layer_norm_backward",
    "cross_entropy_mean",
    "cross_entropy_mean_backward",
)
#: Composed, or decoded op by op in riftco-nn.
NOT_NATIVE = {*COMPOSED, "decode_program", "decode_step"}
#: Capabilities of a newer API than the backend's (1.8's clipped Adam step: riftco-optim
#: measures and steps in two calls there).
NEWER = {c for c, minor in rt.CAPABILITIES.items() if minor > tpu.API_VERSION[1]} - set(rt.COMPOSED)


def test_implements_every_capability_of_its_api_and_ranks_as_an_accelerator(monkeypatch):
    backend = tpu.TpuBackend(FakeDevice(False), plugin.PluginLocation(Path("/x.so"), "test"))
    assert backend.capabilities() == frozenset(rt.CAPABILITIES) - NOT_NATIVE - NEWER
    assert rt.composed_capabilities(backend) == set(COMPOSED)
    assert max(rt.CAPABILITIES.values()) >= tpu.API_VERSION[1]
    assert backend.priority > rt.get_backend("cpu").priority
    monkeypatch.setattr(tpu, "create_backend", lambda: backend)
    with extra_entry_points(TPU_ENTRY_POINT):
        assert rt.get_backend("auto") is backend
        (info,) = [i for i in rt.backends() if i.name == "tpu"]
        assert info.capabilities == tuple(c for c in rt.CAPABILITIES if c not in NOT_NATIVE | NEWER)
        assert info.composed == COMPOSED
        assert info.missing_capabilities == ("decode_program", "decode_step", *sorted(NEWER))
        assert info.priority == backend.priority
