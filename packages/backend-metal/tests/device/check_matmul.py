"""Every matmul path the device offers against a float64 reference, within the
documented bound (run by ../test_on_device.py): the f32 paths (``tiled``,
``blocked``, ``subgroup``, ``coop`` on f32 tiles) within ``2 K 2^-24 (|A| |B|)``
elementwise, as a sum in order over k gives; the ``f16`` path (inputs rounded to f16)
within ``(2^-10 + 2 K 2^-24) (|A| |B|)``; ``coop`` on f16 tiles within
``(2^-9 + 2 K 2^-24) (|A| |B|)`` (its inputs rounded by pack2x16float, whose rounding
WGSL leaves to the device: to nearest or toward zero). Paths the device cannot run are
skipped with the reason; where the adapter has no cooperative matrices, asking for the
coop path is refused, typed, with the reason."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import riftco.backends.metal as metal
from riftco.backends.metal import _native, linalg
from riftco.backends.metal.backend import MATMUL_PATHS, MATMUL_VAR, coop_config
from riftco.backends.metal.runtime import Runtime
from riftco.tensor.plugin import BackendUnavailable, DType

# (a_shape, b_shape, transpose_a, transpose_b): odd sizes, transposes, broadcast
# batch axes, an empty k and one-wide outputs.
CASES = [
    ((1, 1), (1, 1), False, False),
    ((3, 5), (5, 7), False, False),
    ((64, 64), (64, 64), False, False),
    ((100, 37), (37, 65), False, False),
    ((130, 7), (3, 130), True, True),
    ((37, 100), (65, 37), True, True),
    ((70, 33), (70, 18), True, False),
    ((9, 130), (131, 130), False, True),
    ((2, 1, 5, 6), (3, 6, 4), False, False),
    ((4, 17, 12), (12, 9), False, False),
    ((2, 3, 8, 16), (2, 3, 16, 8), False, False),
    ((3, 40, 20), (3, 20, 9), False, False),
    ((2, 1, 20, 40), (3, 9, 20), True, True),
    ((1, 1000), (1000, 1), False, False),
    ((200, 1), (1, 3), False, False),
    ((5, 0), (0, 6), False, False),
]


def _bound(rt_path: Runtime, k: int, scale: np.ndarray) -> np.ndarray:
    rounding = 0.0
    if rt_path.matmul_path == "f16":
        rounding = 2.0**-10
    elif rt_path.matmul_path == "coop" and rt_path.coop is not None and rt_path.coop[1] == "f16":
        rounding = 2.0**-9
    return (2 * k * 2.0**-24 + rounding) * scale + 1e-30


_COOP_DEVICES: dict[int, _native.Device] = {}


def _coop_device(gpu) -> _native.Device:
    """A device with cooperative matrices on the backend's adapter (the backend's own
    where RIFTCO_WGPU_MATMUL=coop opened it so), or skip saying why there is none."""
    if coop_config(gpu.device) is not None:
        return gpu.device
    if gpu.adapter.cooperative_matrix_config is None:
        pytest.skip(
            f"{gpu.adapter.name} has no cooperative matrices the coop path can use "
            f"(shader features: {gpu.adapter.features()}): no coop path here"
        )
    if gpu.adapter.index not in _COOP_DEVICES:
        _COOP_DEVICES[gpu.adapter.index] = _native.Device(
            gpu.name, gpu.adapter.index, 1 << 28, cooperative_matrix=True
        )
    return _COOP_DEVICES[gpu.adapter.index]


def _runtime(gpu, path: str) -> Runtime:
    if path == "f16" and not gpu.device.shader_f16:
        pytest.skip(f"{gpu.device.name} does not offer SHADER_F16: no f16 path here")
    if path == "subgroup" and gpu.device.subgroup_sizes[0] < 8:
        pytest.skip(
            f"{gpu.device.name} offers no subgroups of 8 lanes or more "
            f"({gpu.device.subgroup_sizes}): no subgroup path here"
        )
    if path == "coop":
        return Runtime(_coop_device(gpu), path)
    return Runtime(gpu.device, path)


@pytest.mark.parametrize("path", list(MATMUL_PATHS))
def test_every_path_matches_float64_within_its_bound(gpu, path):
    rt_path = _runtime(gpu, path)
    rng = np.random.default_rng(7)
    for a_shape, b_shape, ta, tb in CASES:
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        a_dev = rt_path.upload(a, DType.float32)
        b_dev = rt_path.upload(b, DType.float32)
        out = linalg.matmul(rt_path, a_dev, a_shape, b_dev, b_shape, ta, tb)
        a64 = np.swapaxes(a, -1, -2) if ta else a
        b64 = np.swapaxes(b, -1, -2) if tb else b
        want = np.matmul(a64.astype(np.float64), b64.astype(np.float64))
        scale = np.matmul(np.abs(a64).astype(np.float64), np.abs(b64).astype(np.float64))
        got = rt_path.download(out).reshape(want.shape)
        k = a64.shape[-1]
        err = np.abs(got - want)
        assert (err <= _bound(rt_path, k, scale)).all(), (
            f"{path} {a_shape}{'T' if ta else ''} @ {b_shape}{'T' if tb else ''}: "
            f"max error {err.max():.3g}"
        )


@pytest.mark.parametrize("path", ["tiled", "blocked", "subgroup", "coop"])
def test_paths_are_deterministic(gpu, path):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 72)).astype(np.float32)
    rt_path = _runtime(gpu, path)
    a_dev, b_dev = rt_path.upload(a, DType.float32), rt_path.upload(b, DType.float32)
    first = rt_path.download(linalg.matmul(rt_path, a_dev, a.shape, b_dev, b.shape, False, False))
    again = rt_path.download(linalg.matmul(rt_path, a_dev, a.shape, b_dev, b.shape, False, False))
    assert first.tobytes() == again.tobytes(), path
    # A row's result does not depend on the other rows of the product.
    row = rt_path.download(
        linalg.matmul(
            rt_path, rt_path.upload(a[5:6], DType.float32), (1, 200), b_dev, b.shape, False, False
        )
    )
    assert row.tobytes() == first.reshape(96, 72)[5].tobytes(), path


def test_the_chosen_path_is_reported(gpu):
    assert gpu.matmul_path in MATMUL_PATHS
    assert gpu.rt.matmul_path == gpu.matmul_path
    assert f"matmul path {gpu.matmul_path}" in gpu.describe()
    if "RIFTCO_WGPU_MATMUL" not in os.environ:
        assert gpu.matmul_path == ("blocked" if gpu.runs_on_host else "tiled")


def test_coop_is_refused_typed_where_the_adapter_has_no_cooperative_matrices(gpu, monkeypatch):
    if gpu.adapter.cooperative_matrix_config is not None:
        pytest.skip(f"{gpu.adapter.name} offers {gpu.adapter.cooperative_matrix_config}")
    with pytest.raises(metal.GpuError, match="offers no cooperative-matrix configuration"):
        _native.Device(gpu.name, gpu.adapter.index, 1 << 20, cooperative_matrix=True)
    monkeypatch.setenv(MATMUL_VAR, "coop")
    with pytest.raises(BackendUnavailable, match=f"{MATMUL_VAR}=coop needs cooperative") as e:
        getattr(metal, f"create_{gpu.name}")()
    assert gpu.adapter.name in str(e.value)
    assert "coop" not in gpu.describe().split("offered here: ")[1].split(")")[0]
    refused = Runtime(gpu.device, "coop")
    a = refused.upload(np.ones((2, 2), np.float32), DType.float32)
    with pytest.raises(metal.GpuError, match="needs a device opened with cooperative matrices"):
        linalg.matmul(refused, a, (2, 2), a, (2, 2), False, False)


# -- the coop path emulated --------------------------------------------------------
# The coop matmul path on a device without cooperative matrices (lavapipe), with
# matmul_coop.wgsl's cooperative operations replaced by plain WGSL that does what
# SPV_KHR_cooperative_matrix defines for them. Everything else is the path as it runs
# on a GPU: linalg's packing to whole tiles (matmul_pack_coop.wgsl, f16 pairs or f32),
# the kernel's batch offsets, tile origins, strides and k loop, the dispatch grid and
# the unpacking of a padded product. The replacement: a workgroup of T x T
# invocations, each holding element (r, c) of every tile of C (a coop_mat{T}x{T}<f32, C>
# becomes that f32); coopLoadT(&x[i], s) keeps (i, s), the origin and stride of a
# row-major tile whose element (r, c) is x[i + r s + c]; coopMultiplyAdd adds
# A[r][k] B[k][c] over the tile's k in order; coopStoreT writes element (r, c) back.
# What it cannot show: naga's lowering of the real operations (cargo test -p
# riftco-wgpu validates that and writes its SPIR-V) and a device's own multiply-add.

_HELPERS = """
var<private> emu_r: u32;
var<private> emu_c: u32;
fn emu_mad(x: vec2<u32>, y: vec2<u32>, acc: f32) -> f32 {
    var s = acc;
    for (var k = 0u; k < TU; k = k + 1u) {
        s = s + f32(a[x.x + emu_r * x.y + k]) * f32(b[y.x + k * y.y + emu_c]);
    }
    return s;
}
"""


def emulated(text: str, size: int) -> str:
    """matmul_coop.wgsl's text with its cooperative operations in plain WGSL (run with a
    workgroup of ``size * size`` invocations)."""
    out = text.replace("enable wgpu_cooperative_matrix;\n", "")
    out, n_zero = re.subn(rf"coop_mat{size}x{size}<f32, C>\(\)", "f32()", out)
    out, n_load = re.subn(
        rf"coopLoadT<coop_mat{size}x{size}<\w+, [AB]>>\(&[ab]\[(\w+)\], (\w+)\)",
        r"vec2<u32>(\1, \2)",
        out,
    )
    out, n_mad = re.subn(r"coopMultiplyAdd\(", "emu_mad(", out)
    out, n_store = re.subn(
        r"coopStoreT\((\w+), &c\[(\w+)\], (\w+)\);",
        r"c[\2 + emu_r * \3 + emu_c] = \1;",
        out,
    )
    out, n_main = re.subn(
        r"fn main\(@builtin\(workgroup_id\) wid: vec3<u32>\) \{",
        "fn main(@builtin(workgroup_id) wid: vec3<u32>, "
        "@builtin(local_invocation_index) emu_li: u32) {\n"
        f"    emu_r = emu_li / {size}u;\n    emu_c = emu_li % {size}u;",
        out,
    )
    # The kernel as linalg runs it: four accumulators, two tiles of A and two of B a step.
    assert (n_zero, n_load, n_mad, n_store, n_main) == (4, 4, 4, 4, 1), (
        n_zero,
        n_load,
        n_mad,
        n_store,
        n_main,
    )
    code = "\n".join(line.split("//")[0] for line in out.splitlines())
    assert not re.search(r"\bcoop", code), "a cooperative operation is left"
    return out + _HELPERS.replace("TU", f"{size}u")


class EmulatedCoop(Runtime):
    """A Runtime on the coop path whose matmul_coop kernel is the emulated one."""

    def __init__(self, device, size: int, inputs: str):
        super().__init__(device, "coop")
        self.coop = (size, inputs, size * size)
        self._emulated: dict[tuple, object] = {}

    def kernel(self, file: str, entry: str = "main", **subs: str):
        if file != "matmul_coop":
            return super().kernel(file, entry, **subs)
        size = self.coop[0]
        assert (subs["T"], subs["WG"]) == (str(size), str(size * size)), subs
        key = tuple(sorted(subs.items()))
        if key not in self._emulated:
            text = emulated(self.kernel_text(file, **subs), size)
            self._emulated[key] = self.device.kernel(text, entry)
        return self._emulated[key]


EMULATED = [(16, "f16"), (8, "f16"), (8, "f32"), (16, "f32")]


@pytest.mark.parametrize("size, inputs", EMULATED)
def test_the_coop_path_emulated_matches_float64_within_its_bound(gpu, size, inputs):
    if inputs == "f16" and not gpu.device.shader_f16:
        pytest.skip(f"{gpu.device.name} has no SHADER_F16 to hold f16 tiles in")
    rt_path = EmulatedCoop(gpu.device, size, inputs)
    rng = np.random.default_rng(11)
    for a_shape, b_shape, ta, tb in CASES:
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        a_dev, b_dev = rt_path.upload(a, DType.float32), rt_path.upload(b, DType.float32)
        out = linalg.matmul(rt_path, a_dev, a_shape, b_dev, b_shape, ta, tb)
        a64 = np.swapaxes(a, -1, -2) if ta else a
        b64 = np.swapaxes(b, -1, -2) if tb else b
        want = np.matmul(a64.astype(np.float64), b64.astype(np.float64))
        scale = np.matmul(np.abs(a64).astype(np.float64), np.abs(b64).astype(np.float64))
        got = rt_path.download(out).reshape(want.shape)
        k = a64.shape[-1]
        err = np.abs(got - want)
        assert (err <= _bound(rt_path, k, scale)).all(), (
            f"coop {size} {inputs} {a_shape}{'T' if ta else ''} @ {b_shape}"
            f"{'T' if tb else ''}: max error {err.max():.3g}"
        )
        if inputs == "f16":
            # The inputs were rounded to f16 (to nearest on this device, as numpy rounds)
            # and the products summed in f32: within the f32 bound of the f16 product.
            a16 = a64.astype(np.float16).astype(np.float64)
            b16 = b64.astype(np.float16).astype(np.float64)
            assert (np.abs(got - np.matmul(a16, b16)) <= 2 * k * 2.0**-24 * scale + 1e-30).all()


def test_the_emulation_replaces_only_the_cooperative_operations(gpu):
    rt_path = EmulatedCoop(gpu.device, 16, "f16")
    text = rt_path.kernel_text(
        "matmul_coop", ENABLE="enable f16;", AB="f16", T="16", T2="32", WG="256"
    )
    plain = emulated(text, 16)
    kept = [line for line in text.splitlines() if "coop" not in line and "fn main" not in line]
    assert kept and all(line in plain.splitlines() for line in kept)
