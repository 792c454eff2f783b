import sys
from pathlib import Path

# The shared hypothesis strategies live beside the tests (cajal_strategies.py); the
# repository runs pytest in importlib mode, which does not put this folder on sys.path.
sys.path.insert(0, str(Path(__file__).parent))
