"""Every matmul path the device offers against a float64 reference, within the
documented bound (run by ../test_on_device.py): the f32 paths (``tiled``,
``blocked``) within ``2 K 2^-24 (|A| |B|)`` elementwise, as a sum in order over k
gives; the ``f16`` path (inputs rounded to f16) within ``(2^-10 + 2 K 2^-24) (|A| |B|)``.
Paths the device cannot run are skipped with the reason."""

from __future__ import annotations

import os

import numpy as np
import pytest

from riftco.backends.metal import linalg
from riftco.backends.metal.backend import MATMUL_PATHS
from riftco.backends.metal.runtime import Runtime
from riftco.tensor.plugin import DType

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
    ((1, 1000), (1000, 1), False, False),
    ((200, 1), (1, 3), False, False),
    ((5, 0), (0, 6), False, False),
]


def _bound(path: str, k: int, scale: np.ndarray) -> np.ndarray:
    rel = 2 * k * 2.0**-24 + (2.0**-10 if path == "f16" else 0.0)
    return rel * scale + 1e-30


@pytest.mark.parametrize("path", list(MATMUL_PATHS))
def test_every_path_matches_float64_within_its_bound(gpu, path):
    if path == "f16" and not gpu.device.shader_f16:
        pytest.skip(f"{gpu.device.name} does not offer SHADER_F16: no f16 path here")
    if path == "subgroup" and gpu.device.subgroup_sizes[0] < 8:
        pytest.skip(
            f"{gpu.device.name} offers no subgroups of 8 lanes or more "
            f"({gpu.device.subgroup_sizes}): no subgroup path here"
        )
    rt_path = Runtime(gpu.device, path)
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
        assert (err <= _bound(path, k, scale)).all(), (
            f"{path} {a_shape}{'T' if ta else ''} @ {b_shape}{'T' if tb else ''}: "
            f"max error {err.max():.3g}"
        )


def test_paths_are_deterministic(gpu):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 72)).astype(np.float32)
    for path in ("tiled", "blocked", "subgroup"):
        if path == "subgroup" and gpu.device.subgroup_sizes[0] < 8:
            continue
        rt_path = Runtime(gpu.device, path)
        a_dev, b_dev = rt_path.upload(a, DType.float32), rt_path.upload(b, DType.float32)
        first = rt_path.download(
            linalg.matmul(rt_path, a_dev, a.shape, b_dev, b.shape, False, False)
        )
        again = rt_path.download(
            linalg.matmul(rt_path, a_dev, a.shape, b_dev, b.shape, False, False)
        )
        assert first.tobytes() == again.tobytes(), path


def test_the_chosen_path_is_reported(gpu):
    assert gpu.matmul_path in MATMUL_PATHS
    assert gpu.rt.matmul_path == gpu.matmul_path
    assert f"matmul path {gpu.matmul_path}" in gpu.describe()
    if "RIFTCO_WGPU_MATMUL" not in os.environ:
        assert gpu.matmul_path == ("blocked" if gpu.runs_on_host else "tiled")
