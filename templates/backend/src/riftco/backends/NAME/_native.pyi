"""riftco.backends.NAME._native: the compiled kernels (private; see backend.py)."""

import numpy as np

__version__: str
BUILD_ID: str
BUILD_ID_MARKER: str

def softmax(x: np.ndarray, causal_queries: int, log: bool) -> np.ndarray: ...
