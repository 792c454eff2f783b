"""Running checks in a subprocess on a PJRT plugin (shared by the tests here).

Tests that execute programs through a PJRT plugin live in ``pjrt/`` as
``check_*.py`` files (not collected here) and run in a subprocess each, with
``RIFTCO_PJRT_PLUGIN`` set: XLA aborts the whole process on a failed internal
check, and a crash there must not take this suite down with it.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
#: The plugin the checks run on: XLA's CPU plugin from PyPI unless
#: RIFTCO_TPU_TEST_PLUGIN names another (a path or a package, e.g. jax-cuda13-pjrt).
PLUGIN_PACKAGE = os.environ.get("RIFTCO_TPU_TEST_PLUGIN", "xla-cpu-pjrt")


def plugin_installed() -> bool:
    if Path(PLUGIN_PACKAGE).is_file():
        return True
    try:
        importlib.metadata.distribution(PLUGIN_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@dataclass
class Outcome:
    returncode: int
    output: str
    counts: dict[str, int]

    def summary(self) -> str:
        return ", ".join(f"{n} {what}" for what, n in self.counts.items()) or "no summary"


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


def run_pytest(args: list[str], plugin: str = PLUGIN_PACKAGE, timeout: float = 1800) -> Outcome:
    """Run pytest in a fresh interpreter with ``RIFTCO_PJRT_PLUGIN=plugin``."""
    env = dict(os.environ, RIFTCO_PJRT_PLUGIN=plugin, PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    tail = output.strip().splitlines()[-1:] or [""]
    counts = {
        what.rstrip("s") if what.startswith("error") else what: int(n)
        for n, what in _COUNT.findall(tail[0])
    }
    return Outcome(done.returncode, output, counts)


needs_plugin = pytest.mark.skipif(
    not plugin_installed(),
    reason=f"{PLUGIN_PACKAGE} is not installed (pip install riftco-backend-tpu[test])",
)
