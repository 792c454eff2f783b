import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def png_ink(path) -> float:
    """The share of an image's pixels that are not near-white (0 for a blank image)."""
    from matplotlib.image import imread

    image = imread(path)
    return float((image[..., :3].mean(axis=2) < 0.9).mean())


def help_text(module: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
