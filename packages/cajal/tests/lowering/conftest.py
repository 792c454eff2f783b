import sys
from pathlib import Path

from riftco.testing.tensor import backend  # noqa: F401

# programs.py lives beside the tests (pytest runs in importlib mode).
sys.path.insert(0, str(Path(__file__).parent))
