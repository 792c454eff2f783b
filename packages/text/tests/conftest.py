import sys
from pathlib import Path

# The grammar tests share a walk helper (grammar_walk.py) kept beside them.
sys.path.insert(0, str(Path(__file__).parent))
