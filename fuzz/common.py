"""What every harness shares: a scratch file, the typed errors a reader may raise,
and the atheris entry point.

A harness feeds the fuzzer's bytes to one reader. A typed error (`RiftcoError`, or
riftco-text's `TokenizerError`) is the reader doing its job; any other exception,
a blow-up past the runner's memory cap (`MemoryError`) or an input that runs past
the per-input time limit is a finding.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

#: Where the seed script writes its valid files and seeds (``build/fuzz`` by default).
WORK = Path(
    os.environ.get("RIFTCO_FUZZ_WORK", Path(__file__).resolve().parent.parent / "build" / "fuzz")
)
SCRATCH = Path(tempfile.mkdtemp(prefix="riftco-fuzz-"))


def scratch(name: str, data: bytes) -> Path:
    """``data`` written to a fixed scratch path (one per name, reused across inputs)."""
    path = SCRATCH / name
    path.write_bytes(data)
    return path


def typed_errors() -> tuple[type[BaseException], ...]:
    from riftco.tensor import RiftcoError
    from riftco.text import TokenizerError

    return (RiftcoError, TokenizerError)


def fuzz(target: Callable[[bytes], None]) -> None:
    """Run ``target`` under atheris; typed errors are expected, anything else is a crash."""
    expected = typed_errors()

    def one_input(data: bytes) -> None:
        try:
            target(data)
        except expected:
            pass

    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
