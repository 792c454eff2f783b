import numpy as np
import pytest

import riftco.tensor as rt
from riftco.autograd import Variable
from riftco.testing.tensor import backend  # noqa: F401


def _values(shape, seed, domain):
    rng = np.random.Generator(np.random.PCG64(seed))
    n = int(np.prod(shape, dtype=np.int64))
    if domain == "any":
        values = rng.uniform(-1.0, 1.0, n)
    elif domain == "positive":
        values = rng.uniform(0.5, 2.0, n)
    elif domain == "away":  # at least 0.2 from 0: no kink of relu or abs nearby
        values = rng.choice([-1.0, 1.0], n) * rng.uniform(0.2, 1.0, n)
    elif domain in ("grid", "grid_shifted"):  # distinct, 0.1 apart; the two grids interleave
        values = rng.permutation(n) * 0.1 - 0.3 + (0.05 if domain == "grid_shifted" else 0.0)
    else:
        raise ValueError(domain)
    return values.reshape(shape)


@pytest.fixture(autouse=True)
def _fresh_scalar_cache():
    """riftco.tensor caches scalar operands by ``id(backend)``; the backend fixture makes
    new backend objects, and a recycled id would hand one backend another's storage."""
    from riftco.tensor.ops import _common

    getattr(_common, "_SCALARS", {}).clear()
    yield
    getattr(_common, "_SCALARS", {}).clear()


@pytest.fixture
def make(backend):  # noqa: F811 - the shared fixture imported above
    """make(shape, seed=0, domain="any", requires_grad=True, name=None) -> Variable."""

    def make(shape, seed=0, domain="any", requires_grad=True, name=None):
        value = rt.from_numpy(_values(tuple(shape), seed, domain), backend=backend)
        return Variable(value, requires_grad=requires_grad, name=name)

    return make


@pytest.fixture
def const(backend):  # noqa: F811
    """const(data, dtype=None) -> a Tensor on the backend under test."""

    def const(data, dtype=None):
        return rt.tensor(data, dtype=dtype, backend=backend)

    return const
