"""Small helpers for the op suite."""

from __future__ import annotations

import numpy as np

import riftco.tensor as rt


def rand(shape, seed=0, low=-2.0, high=2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=shape).astype(np.float32)


def on(backend, array, dtype=None) -> rt.Tensor:
    return rt.from_numpy(np.asarray(array), dtype=dtype, backend=backend)


def close(t: rt.Tensor, expected, rtol=1e-5, atol=1e-6) -> None:
    got = t.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


# Shapes with size-1 dims, scalars and empty dims.
SHAPES = [(), (1,), (7,), (3, 1), (2, 3, 4), (1, 5, 1), (0,), (2, 0, 3), (33, 17)]
# Pairs that broadcast.
BROADCAST_PAIRS = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((3, 4), (3, 1)),
    ((2, 1, 4), (3, 1)),
    ((5,), ()),
    ((), (2, 3)),
    ((1, 1), (4, 1, 6)),
    ((2, 0, 3), (3,)),
    ((300, 257), (257,)),
]


#: The CPU kernels' vector levels, narrowest first (``rt.set_cpu_isa``).
LEVELS = ("portable", "avx2", "avx512", "avx512-vnni")


def reachable() -> list[str]:
    """The levels this machine can run."""
    detected = rt.cpu_isa_detected()
    return list(LEVELS[: LEVELS.index(detected) + 1]) if detected in LEVELS else [detected]
