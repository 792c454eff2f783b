"""Importing, registration, library lookup and the reasons cuda is unavailable,
without a GPU (and without libcuda, on this kind of machine)."""

from __future__ import annotations

import importlib.metadata
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import riftco.backends.cuda as cuda
import riftco.tensor as rt
from riftco.backends.cuda import _native, libraries
from riftco.backends.cuda.backend import CudaBackend
from riftco.tensor.plugin import CAPABILITIES, overridden_capabilities
from riftco.testing.tensor import extra_entry_points

CUDA_ENTRY_POINT = EntryPoint(
    name="cuda", value="riftco.backends.cuda:create_backend", group="riftco.backends"
)


def test_the_package_imports_and_declares_its_api():
    assert cuda.__version__ == _native.__version__
    assert cuda.API_VERSION == rt.BACKEND_API_VERSION
    assert CudaBackend.name == "cuda" and not CudaBackend.runs_on_host


def test_the_native_module_is_its_own_and_reports_its_build_id():
    build_id = cuda.native_build_id()
    assert len(build_id) == 16 and int(build_id, 16) >= 0
    assert _native.BUILD_ID_MARKER == f"RIFTCO_BUILD_ID:riftco.backends.cuda._native:{build_id}"


def test_registered_as_cuda_in_the_backend_group():
    eps = importlib.metadata.entry_points(group="riftco.backends")
    assert [ep.value for ep in eps if ep.name == "cuda"] == ["riftco.backends.cuda:create_backend"]


def test_every_capability_but_block_weights_is_a_kernel():
    # Block-layout weights are composed by riftco-tensor's op layer from these kernels;
    # whole-step decoding (decode_program / decode_step) is the device plan (ops.decode).
    not_native = {"block_dequantize", "block_linear"}
    assert overridden_capabilities(CudaBackend) == frozenset(CAPABILITIES) - not_native


def test_the_probe_names_each_library_and_what_dlopen_tries():
    probed = {stem: (present, names) for stem, present, names in _native.probe_libraries()}
    assert set(probed) == {"cuda", "nvrtc", "cublas", "cublasLt"}
    for stem, (_, names) in probed.items():
        assert f"lib{stem}.so" in names
    assert "libnvrtc.so.13" in probed["nvrtc"][1]


def _status(monkeypatch, present: set[str]):
    real = _native.probe_libraries()
    monkeypatch.setattr(
        _native, "probe_libraries", lambda: [(s, s in present, names) for s, _, names in real]
    )


def test_a_missing_library_makes_cuda_unavailable_with_its_name_and_the_paths_tried(monkeypatch):
    _status(monkeypatch, {"cuda", "cublas", "cublasLt"})
    with extra_entry_points(CUDA_ENTRY_POINT, replace=True):
        (info,) = rt.backends()
        assert info.name == "cuda" and not info.available
        assert "libnvrtc.so could not be opened" in info.reason
        assert "dlopen tried libnvrtc.so" in info.reason
        assert "pip install nvidia-cuda-nvrtc" in info.reason
        assert "libcublas" not in info.reason
        with pytest.raises(rt.BackendUnavailable, match="libnvrtc.so could not be opened"):
            rt.get_backend("cuda")


def test_without_a_driver_cuda_is_unavailable_and_auto_is_cpu(monkeypatch):
    _status(monkeypatch, {"nvrtc", "cublas", "cublasLt"})
    with extra_entry_points(CUDA_ENTRY_POINT, replace=True):
        (info,) = rt.backends()
        assert "libcuda.so could not be opened" in info.reason
        assert "NVIDIA driver" in info.reason
    with extra_entry_points(CUDA_ENTRY_POINT):
        assert rt.get_backend("auto").name == "cpu"


def test_on_this_machine_the_status_never_raises_and_explains_itself():
    for stem, usable, where in cuda.library_status():
        assert where
        if not usable:
            assert f"lib{stem}.so could not be opened" in where


def test_the_driver_is_asked_only_when_present():
    present = {s: p for s, p, _ in _native.probe_libraries()}
    if present["cuda"]:
        pytest.skip("libcuda is present here: the GPU tests cover it")
    with pytest.raises(cuda.CudaError, match="libcuda.so could not be opened"):
        _native.device_count()
    with pytest.raises(cuda.CudaError, match="libcuda.so could not be opened"):
        _native.Device(0, None)


def _fake_tree(root: Path, names: list[str]) -> Path:
    lib = root / "nvidia" / "fake" / "lib"
    lib.mkdir(parents=True)
    for n in names:
        (lib / n).write_bytes(b"not a shared library")
    return lib


def test_wheel_folders_come_from_the_variable_then_the_import_path(monkeypatch, tmp_path):
    first = tmp_path / "first"
    first.mkdir()
    lib = _fake_tree(tmp_path / "site", [])
    monkeypatch.setenv(libraries.LIBRARY_PATH_VAR, str(first))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    dirs = libraries.wheel_library_dirs()
    assert dirs[0] == first
    assert lib in dirs


def test_preloading_records_the_paths_tried_and_why_a_file_failed(tmp_path):
    lib = _fake_tree(tmp_path, ["libnvrtc.so.13"])
    found = libraries._preload([lib])
    nvrtc = found["nvrtc"]
    assert nvrtc.loaded is None
    assert str(lib / "libnvrtc.so.13") in nvrtc.tried
    assert nvrtc.error and "libnvrtc.so.13" in nvrtc.error
    reason = libraries.missing_reason("nvrtc", ["libnvrtc.so"], nvrtc)
    assert str(lib / "libnvrtc.so.13") in reason and "loading failed" in reason
    assert found["cublas"].loaded is None and found["cublas"].error is None


def test_a_driver_older_than_the_build_makes_cuda_unavailable_with_both_versions(monkeypatch):
    from riftco.backends.cuda import libraries

    _status(monkeypatch, {"cuda", "nvrtc", "cublas", "cublasLt"})
    monkeypatch.setattr(libraries, "driver_version", lambda: 12040)
    with extra_entry_points(CUDA_ENTRY_POINT, replace=True):
        (info,) = rt.backends()
        assert info.name == "cuda" and not info.available
        assert "supports CUDA 12.4 (cuDriverGetVersion 12040)" in info.reason
        assert "needs CUDA 13.0 or newer (13000)" in info.reason
        assert "update the NVIDIA driver" in info.reason


def test_the_driver_version_check_passes_a_new_or_unknown_driver():
    from riftco.backends.cuda import libraries

    assert libraries.driver_too_old(13000) is None
    assert libraries.driver_too_old(13020) is None
    assert libraries.driver_too_old(None) is None
    assert libraries.version_text(12080) == "12.8"
    assert libraries.driver_version() is None or libraries.driver_version() > 0
