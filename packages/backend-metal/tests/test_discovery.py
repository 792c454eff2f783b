"""Importing, registration and adapter choice, without opening any device."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import riftco.backends.metal as metal
import riftco.tensor as rt
from riftco.backends.metal import discovery
from riftco.testing.tensor import extra_entry_points

ENTRY_POINTS = [
    EntryPoint(name="metal", value="riftco.backends.metal:create_metal", group="riftco.backends"),
    EntryPoint(name="vulkan", value="riftco.backends.metal:create_vulkan", group="riftco.backends"),
]


def adapter(index, name, device_type):
    return {
        "index": index,
        "name": name,
        "device_type": device_type,
        "driver": "drv",
        "driver_info": "1.0",
        "vendor": 0,
        "device": 0,
        "shader_f16": False,
    }


LAVAPIPE = adapter(0, "llvmpipe (LLVM 15.0.6, 256 bits)", "cpu")
NVIDIA = adapter(1, "NVIDIA H200", "discrete")
INTEL = adapter(2, "Intel(R) UHD Graphics", "integrated")


def test_the_package_imports_and_declares_its_api():
    assert metal.__version__ == metal._native.__version__
    assert metal.API_VERSION[0] == rt.BACKEND_API_VERSION[0]


def test_the_native_module_is_its_own_and_reports_its_build_id():
    build_id = metal.native_build_id()
    assert len(build_id) == 16 and int(build_id, 16) >= 0
    assert metal._native.BUILD_ID_MARKER == (
        f"RIFTCO_BUILD_ID:riftco.backends.metal._native:{build_id}"
    )
    assert Path(metal._native.__file__).name.startswith("_native.")


def test_registered_as_metal_and_vulkan():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="riftco.backends")}
    assert eps["metal"] == "riftco.backends.metal:create_metal"
    assert eps["vulkan"] == "riftco.backends.metal:create_vulkan"


def test_metal_needs_macos():
    with pytest.raises(rt.BackendUnavailable, match=r"Metal needs macOS \(this is linux\)"):
        discovery.find_adapter("metal", lambda api: [NVIDIA], platform="linux")
    with pytest.raises(rt.BackendUnavailable, match="no Metal device"):
        discovery.find_adapter("metal", lambda api: [], platform="darwin")
    apple = adapter(0, "Apple M3", "integrated")
    found = discovery.find_adapter("metal", lambda api: [apple], platform="darwin")
    assert found.name == "Apple M3" and not found.runs_on_host


def test_vulkan_without_a_loader_or_a_driver_says_which():
    never = pytest.fail  # enumeration must not even be tried without a loader
    with pytest.raises(rt.BackendUnavailable, match="no Vulkan loader.*mesa-vulkan-drivers"):
        discovery.find_adapter("vulkan", lambda api: never("enumerated"), loader=lambda: None)
    with pytest.raises(rt.BackendUnavailable, match=r"loader \(libvulkan.so.1\) found no adapter"):
        discovery.find_adapter("vulkan", lambda api: [], loader=lambda: "libvulkan.so.1")


def test_a_gpu_is_preferred_and_a_software_device_runs_on_the_host(monkeypatch):
    monkeypatch.delenv(discovery.ADAPTER_VAR, raising=False)
    pick = lambda found: discovery.find_adapter(  # noqa: E731
        "vulkan", lambda api: found, loader=lambda: "libvulkan.so.1"
    )
    assert pick([LAVAPIPE, INTEL, NVIDIA]).name == "NVIDIA H200"
    assert pick([LAVAPIPE, INTEL]).device_type == "integrated"
    only = pick([LAVAPIPE])
    assert only.runs_on_host and "software device on the host CPU" in only.describe()


def test_the_adapter_variable_chooses_by_index_or_name(monkeypatch):
    found = [LAVAPIPE, NVIDIA]
    for wanted, name in (
        ("0", LAVAPIPE["name"]),
        ("llvm", LAVAPIPE["name"]),
        ("h200", "NVIDIA H200"),
    ):
        monkeypatch.setenv(discovery.ADAPTER_VAR, wanted)
        assert discovery.choose(discovery._as_adapters("vulkan", found), wanted).name == name
    with pytest.raises(rt.BackendUnavailable, match="names no vulkan adapter.*1: NVIDIA H200"):
        discovery.choose(discovery._as_adapters("vulkan", found), "radeon")


def test_unavailable_backends_are_listed_with_the_reason(monkeypatch):
    monkeypatch.setattr(metal._native, "adapters", lambda api: [])
    with extra_entry_points(*ENTRY_POINTS, replace=True):
        infos = {b.name: b for b in rt.backends()}
        assert set(infos) == {"metal", "vulkan"}
        assert not infos["metal"].available and not infos["vulkan"].available
        assert (
            "Metal needs macOS" in infos["metal"].reason
            or "no Metal device" in infos["metal"].reason
        )
        assert "Vulkan" in infos["vulkan"].reason
        with pytest.raises(rt.BackendUnavailable, match="vulkan"):
            rt.get_backend("vulkan")


def test_a_software_device_is_never_chosen_by_auto(monkeypatch):
    """Where lavapipe is the only adapter, vulkan is usable by name but auto stays on cpu."""
    monkeypatch.setattr(
        metal._native, "adapters", lambda api: [LAVAPIPE] if api == "vulkan" else []
    )
    monkeypatch.setattr(metal, "find_adapter", _fake_find)
    monkeypatch.setattr(metal._native, "Device", lambda api, index, pool: _FakeDevice())
    with extra_entry_points(*ENTRY_POINTS):
        info = {b.name: b for b in rt.backends()}["vulkan"]
        assert info.available and info.runs_on_host
        assert "software device on the host CPU" in info.description
        assert rt.get_backend("auto").name == "cpu"
        assert rt.get_backend("vulkan").name == "vulkan"


def _fake_find(api, enumerate_adapters):
    return discovery.find_adapter(api, enumerate_adapters, loader=lambda: "libvulkan.so.1")


class _FakeDevice:
    name = LAVAPIPE["name"]
    shader_f16 = False
    subgroup_sizes = (0, 0)


def test_the_matmul_path_follows_the_adapter_or_the_environment(monkeypatch):
    from riftco.backends.metal.backend import MATMUL_VAR, choose_matmul_path, matmul_paths

    lavapipe = discovery._as_adapters("vulkan", [LAVAPIPE])[0]
    nvidia = discovery._as_adapters("vulkan", [{**NVIDIA, "shader_f16": True}])[0]
    monkeypatch.delenv(MATMUL_VAR, raising=False)
    assert choose_matmul_path(lavapipe) == "blocked"
    assert choose_matmul_path(nvidia) == "tiled"
    assert matmul_paths(lavapipe) == ["tiled", "blocked"]
    assert matmul_paths(nvidia) == ["tiled", "blocked", "f16"]
    assert matmul_paths(nvidia, _FakeDevice()) == ["tiled", "blocked"]  # opened without f16
    monkeypatch.setenv(MATMUL_VAR, "tiled")
    assert choose_matmul_path(lavapipe) == "tiled"
    monkeypatch.setenv(MATMUL_VAR, "f16")
    assert choose_matmul_path(nvidia) == "f16"
    with pytest.raises(rt.BackendUnavailable, match="needs the SHADER_F16 feature"):
        choose_matmul_path(lavapipe)
    monkeypatch.setenv(MATMUL_VAR, "subgroup")
    with pytest.raises(rt.BackendUnavailable, match="needs subgroups of at least 8 lanes"):
        choose_matmul_path(nvidia)
    intel = discovery._as_adapters(
        "vulkan", [{**INTEL, "subgroup": True, "subgroup_sizes": (8, 32)}]
    )[0]
    assert choose_matmul_path(intel) == "subgroup"
    assert "subgroup" not in matmul_paths(intel, _FakeDevice())
    monkeypatch.setenv(MATMUL_VAR, "fast")
    with pytest.raises(rt.BackendUnavailable, match="'fast' is not a matmul path; expected auto"):
        choose_matmul_path(nvidia)


#: What the adapter report holds for a GPU with cooperative matrices (NVIDIA's Vulkan
#: driver lists rectangular shapes too; the coop path takes the square f16 one).
COOP_GPU = {
    **NVIDIA,
    "shader_f16": True,
    "subgroup": True,
    "subgroup_sizes": (32, 32),
    "cooperative_matrix": True,
    "cooperative_matrices": ["16x8x16 f16->f32", "16x16x16 f16->f32"],
    "cooperative_matrix_config": "16x16x16 f16->f32",
}


class _FakeCoopDevice(_FakeDevice):
    name = NVIDIA["name"]
    shader_f16 = True
    subgroup_sizes = (32, 32)
    cooperative_matrix = (16, "f16", 32)


def test_the_coop_path_is_opt_in_and_refused_with_the_reason_where_not_offered(monkeypatch):
    from riftco.backends.metal.backend import (
        MATMUL_VAR,
        choose_matmul_path,
        matmul_paths,
        wants_cooperative_matrix,
    )

    gpu = discovery._as_adapters("vulkan", [COOP_GPU])[0]
    lavapipe = discovery._as_adapters("vulkan", [LAVAPIPE])[0]
    withheld = discovery._as_adapters(
        "vulkan",
        [{**COOP_GPU, "cooperative_matrix": False, "cooperative_matrix_config": None}],
    )[0]
    rectangular = discovery._as_adapters(
        "vulkan",
        [
            {
                **COOP_GPU,
                "cooperative_matrices": ["16x8x16 f16->f32"],
                "cooperative_matrix_config": None,
            }
        ],
    )[0]
    monkeypatch.delenv(MATMUL_VAR, raising=False)
    assert gpu.cooperative_matrix_config == "16x16x16 f16->f32"
    assert matmul_paths(gpu) == ["tiled", "blocked", "f16", "subgroup", "coop"]
    # The adapter offers it; auto never takes it and the device opens without it.
    assert choose_matmul_path(gpu) == "tiled"
    assert wants_cooperative_matrix(gpu) is False
    assert "coop" not in matmul_paths(lavapipe)
    assert "coop" not in matmul_paths(withheld)
    monkeypatch.setenv(MATMUL_VAR, "coop")
    assert wants_cooperative_matrix(gpu) is True
    assert choose_matmul_path(gpu, _FakeCoopDevice()) == "coop"
    with pytest.raises(rt.BackendUnavailable, match="opened without cooperative matrices"):
        choose_matmul_path(gpu, _FakeDevice())
    cases = [
        (lavapipe, "llvmpipe .* reports no cooperative matrices"),
        (withheld, "reports 16x8x16 f16->f32, 16x16x16 f16->f32 but wgpu withholds them"),
        (rectangular, "offers only 16x8x16 f16->f32"),
    ]
    for adapter, reason in cases:
        with pytest.raises(rt.BackendUnavailable, match="RIFTCO_WGPU_MATMUL=coop needs") as e:
            wants_cooperative_matrix(adapter)
        assert re.search(reason, str(e.value)), e.value
        with pytest.raises(rt.BackendUnavailable, match=reason):
            choose_matmul_path(adapter)


def test_coop_opens_the_device_with_cooperative_matrices_or_refuses_before_opening(monkeypatch):
    opened = []

    def device(api, index, pool, **options):
        opened.append(options)
        return _FakeCoopDevice() if options else _FakeDevice()

    monkeypatch.setattr(metal, "find_adapter", _fake_find)
    monkeypatch.setattr(metal._native, "adapters", lambda api: [COOP_GPU])
    monkeypatch.setattr(metal._native, "Device", device)
    monkeypatch.setenv("RIFTCO_WGPU_MATMUL", "coop")
    backend = metal.create_vulkan()
    assert opened == [{"cooperative_matrix": True}]
    assert backend.matmul_path == "coop"
    assert "matmul path coop (16x16x16 f16->f32, workgroups of 32)" in backend.describe()
    assert "cooperative matrices (16x8x16 f16->f32, 16x16x16 f16->f32)" in backend.describe()
    monkeypatch.delenv("RIFTCO_WGPU_MATMUL")
    assert metal.create_vulkan().matmul_path == "tiled"
    assert opened[-1] == {}
    monkeypatch.setattr(metal._native, "adapters", lambda api: [NVIDIA])
    monkeypatch.setenv("RIFTCO_WGPU_MATMUL", "coop")
    before = len(opened)
    with pytest.raises(rt.BackendUnavailable, match="reports no cooperative matrices"):
        metal.create_vulkan()
    assert len(opened) == before, "refused before any device opened"


def test_adapter_features_are_described():
    full = {**NVIDIA, "shader_f16": True, "subgroup": True, "subgroup_sizes": (32, 32)}
    (a,) = discovery._as_adapters("vulkan", [{**full, "cooperative_matrix": True}])
    assert a.features() == "f16, subgroups of 32, cooperative matrices"
    (c,) = discovery._as_adapters("vulkan", [COOP_GPU])
    assert c.features() == (
        "f16, subgroups of 32, cooperative matrices (16x8x16 f16->f32, 16x16x16 f16->f32)"
    )
    (d,) = discovery._as_adapters("vulkan", [{**COOP_GPU, "cooperative_matrix": False}])
    assert "cooperative matrices withheld by wgpu (16x8x16" in d.features()
    (b,) = discovery._as_adapters(
        "vulkan", [{**INTEL, "subgroup": True, "subgroup_sizes": (8, 32)}]
    )
    assert b.features() == "subgroups of 8-32"
    assert discovery._as_adapters("vulkan", [LAVAPIPE])[0].features() == "none"


def test_a_device_that_fails_to_open_is_unavailable_with_the_reason(monkeypatch):
    def refuse(api, index, pool):
        raise metal.GpuError("out of device memory")

    monkeypatch.setattr(metal, "find_adapter", _fake_find)
    monkeypatch.setattr(metal._native, "adapters", lambda api: [NVIDIA])
    monkeypatch.setattr(metal._native, "Device", refuse)
    with pytest.raises(rt.BackendUnavailable, match="opening NVIDIA H200.*out of device memory"):
        metal.create_vulkan()


def test_a_bad_pool_size_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(metal.POOL_VAR, "lots")
    with pytest.raises(rt.BackendUnavailable, match="RIFTCO_WGPU_POOL_MB must be a whole number"):
        metal._pool_bytes()


def test_driver_chatter_is_kept_off_stderr(capfd):
    before = len(discovery.driver_messages())
    with discovery.quiet_stderr() as lines:
        os.write(2, b"error: XDG_RUNTIME_DIR is invalid or not set in the environment.\n")
        os.write(2, b"\nsecond line\n")
    assert capfd.readouterr().err == ""
    assert lines == [
        "error: XDG_RUNTIME_DIR is invalid or not set in the environment.",
        "second line",
    ]
    assert discovery.driver_messages()[before:] == tuple(lines)
    os.write(2, b"after\n")  # the descriptor is restored
    assert capfd.readouterr().err == "after\n"


# What `riftco backends` runs (riftco-tensor's command), and what any command does that
# picks a backend (`--backend auto`): each enumerates adapters.
SCRIPTS = {
    "backends": "import sys; from riftco.tensor.cli import main; sys.exit(main(sys.argv[1:]))",
    "auto": "import riftco.tensor as rt; print(rt.get_backend().name)",
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_backend_discovery_prints_nothing_on_stderr_on_a_headless_machine(script):
    """With XDG_RUNTIME_DIR unset (a headless Linux machine), Mesa's Vulkan drivers
    complain on stderr while adapters are enumerated: none of it reaches the terminal."""
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPTS[script]],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    if script == "backends":
        assert re.search(r"^vulkan ", done.stdout, re.M), done.stdout


def test_a_cpu_lookup_enumerates_no_adapter():
    """get_backend("cpu") runs only the cpu factory: this package's factories (and
    wgpu's adapter enumeration) wait until a wgpu backend, auto or the list is asked for."""
    code = (
        "import sys, riftco.tensor as rt\n"
        "rt.get_backend('cpu')\n"
        "print('riftco.backends.metal.backend' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False" and done.stderr == ""
