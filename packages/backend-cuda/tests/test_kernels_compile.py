"""Every kernel module compiles with NVRTC (the PyPI nvidia-cuda-nvrtc wheel; no
GPU needed) for sm_90 and sm_80 through the backend's own compile path, with
no warning, and defines every kernel the ops launch."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import riftco.backends.cuda.backend  # noqa: F401  (imports every op module, filling KERNELS)
from riftco.backends.cuda import _native, libraries
from riftco.backends.cuda.ops.launch import KERNELS

ARCHS = ("sm_90", "sm_80")
#: Kernels that keep a stack frame in local memory, and why: the double-precision
#: sine and cosine's argument reduction for large angles, and the exact sum's
#: partials. A kernel taking shapes and strides (``Dims``) must read them in place.
FRAMED = {"rotary_f32", "decode_rotary", "clip_gate"}
#: The CUBIN's per-function attribute holding its stack frame in bytes.
_EIATTR_FRAME_SIZE = 0x11
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


def _sections(elf: bytes) -> dict[str, bytes]:
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    size, count, names = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * size) for i in range(count)]
    table = heads[names][4]

    def name(at: int) -> str:
        return elf[table + at : elf.index(b"\0", table + at)].decode()

    return {name(h[0]): elf[h[4] : h[4] + h[5]] for h in heads}


def stack_frames(cubin: bytes) -> dict[str, int]:
    """Each function's stack frame in bytes (EIATTR_FRAME_SIZE of the CUBIN's
    ``.nv.info``: records of a format byte, an attribute byte and, for sized ones, a
    16-bit length; this one holds a symbol index and the size)."""
    sections = _sections(cubin)
    symtab, strtab = sections[".symtab"], sections[".strtab"]
    symbols = []
    for at in range(0, len(symtab), 24):
        (offset,) = struct.unpack_from("<I", symtab, at)
        symbols.append(strtab[offset : strtab.index(b"\0", offset)].decode())
    info, i, frames = sections[".nv.info"], 0, {}
    while i + 2 <= len(info):
        fmt, attr = info[i], info[i + 1]
        i += 2
        length = {1: 0, 2: 1, 3: 2}.get(fmt)
        if length is None:
            (length,) = struct.unpack_from("<H", info, i)
            i += 2
        if attr == _EIATTR_FRAME_SIZE and length == 8:
            symbol, frame = struct.unpack_from("<II", info, i)
            frames[symbols[symbol]] = frame
        i += length
    return frames


def test_the_frame_reader_sees_a_stack_frame():
    _nvrtc()
    indexed = (
        'extern "C" __global__ void k(float* x, long long n, long long j) { float a[64];'
        " for (long long i = 0; i < n; ++i) a[(i * 7) & 63] += x[i]; x[0] = a[j & 63]; }"
    )
    cubin, _ = _native.compile_source(indexed, "framed", "sm_90")
    assert stack_frames(cubin)["k"] >= 64


@pytest.mark.parametrize("arch", ARCHS)
def test_no_kernel_copies_its_arguments_to_local_memory(compiled, arch):
    # Shapes and strides indexed by a run-time axis were copied to a stack frame
    # (binary_f32's three Dims: 192 bytes) and every element's offset read them there.
    launched = {k.name for k in KERNELS}
    for module in _native.kernel_modules():
        frames = stack_frames(compiled[(module, arch)][0])
        assert launched & set(frames) or module not in {k.module for k in KERNELS}
        framed = {name for name, size in frames.items() if size and name in launched}
        assert framed <= FRAMED, f"{module} for {arch}: stack frames in {sorted(framed - FRAMED)}"
