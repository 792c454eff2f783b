"""Every kernel module compiles with NVRTC (the PyPI nvidia-cuda-nvrtc wheel; no
GPU needed) for sm_90 and sm_80 through the backend's own compile path, with
no warning, and defines every kernel the ops launch."""

from __future__ import annotations

from pathlib import Path

import pytest

import riftco.backends.cuda.backend  # noqa: F401  (imports every op module, filling KERNELS)
from riftco.backends.cuda import _native, libraries
from riftco.backends.cuda.ops.launch import KERNELS

ARCHS = ("sm_90", "sm_80")
KERNEL_DIR = Path(__file__).resolve().parent.parent / "driver" / "kernels"


def _nvrtc() -> str:
    libraries.preload()
    try:
        return _native.nvrtc_version()
    except Exception as exc:  # the reason becomes the skip message
        pytest.skip(f"no NVRTC here ({exc}); the test extra installs nvidia-cuda-nvrtc")


@pytest.fixture(scope="module")
def compiled() -> dict[tuple[str, str], tuple[bytes, str]]:
    _nvrtc()
    return {
        (module, arch): _native.compile_module(module, arch)
        for module in _native.kernel_modules()
        for arch in ARCHS
    }


@pytest.mark.parametrize("arch", ARCHS)
def test_every_module_compiles_without_a_warning(compiled, arch):
    for module in _native.kernel_modules():
        cubin, log = compiled[(module, arch)]
        assert cubin[:4] == b"\x7fELF", f"{module} for {arch} is not a CUBIN"
        assert log == "", f"{module} for {arch}: NVRTC said\n{log}"


def test_every_kernel_an_op_launches_is_defined(compiled):
    assert KERNELS
    modules = set(_native.kernel_modules())
    for k in sorted(KERNELS):
        assert k.module in modules, k
        cubin, _ = compiled[(k.module, "sm_90")]
        assert k.name.encode() + b"\x00" in cubin, f"{k.module} defines no kernel {k.name}"


def test_every_source_file_is_a_module():
    if not KERNEL_DIR.is_dir():
        pytest.skip(f"the kernel sources are not at {KERNEL_DIR} (run from the repository)")
    files = {p.stem for p in KERNEL_DIR.glob("*.cu")}
    assert files == set(_native.kernel_modules())
    header = (KERNEL_DIR / "common.cuh").read_text()
    for module in files:
        text = _native.program_text(module)
        assert text.startswith(header)
        assert (KERNEL_DIR / f"{module}.cu").read_text() in text


def test_an_error_in_a_kernel_fails_with_nvrtcs_message():
    _nvrtc()
    bad = 'extern "C" __global__ void k(float* x) { x[0] = undefined_name; }'
    with pytest.raises(_native_error(), match="undefined_name"):
        _native.compile_source(bad, "broken", "sm_90")
    _, log = _native.compile_source(
        'extern "C" __global__ void k(float* x) { int unused = 1; x[0] = 1.0f; }', "w", "sm_90"
    )
    assert "warning" in log, "a warning must reach the log, or the check above sees nothing"


def test_an_architecture_is_checked():
    with pytest.raises(_native_error(), match="sm_90"):
        _native.compile_module("reduce", "90")


def test_the_cache_key_follows_the_source_arch_and_compiler():
    key = _native.cache_key("reduce", "sm_90", "13.0")
    assert len(key) == 16 and key == _native.cache_key("reduce", "sm_90", "13.0")
    assert key != _native.cache_key("reduce", "sm_80", "13.0")
    assert key != _native.cache_key("reduce", "sm_90", "13.1")
    assert key != _native.cache_key("norm", "sm_90", "13.0")


def _native_error() -> type[Exception]:
    from riftco.backends.cuda.errors import CudaError

    return CudaError
