import sys
from pathlib import Path

from riftco.testing.tensor import backend  # noqa: F401  (every available backend, NAME too)

sys.path.insert(0, str(Path(__file__).parent))
