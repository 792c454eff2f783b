import sys
from pathlib import Path

from riftco.testing.tensor import backend  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent))
