import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
