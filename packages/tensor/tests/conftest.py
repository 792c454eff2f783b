import sys
from pathlib import Path

import pytest

import riftco.tensor as rt
from riftco.testing.tensor import backend  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def restore():
    """Put the CPU kernels' vector level and thread count back after the test."""
    isa, threads = rt.cpu_isa(), rt.get_num_threads()
    yield
    rt.set_cpu_isa(isa)
    rt.set_num_threads(threads)
