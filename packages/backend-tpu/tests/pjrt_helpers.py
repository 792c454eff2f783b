"""Where the checks on a PJRT plugin run (shared by the tests here).

Tests that execute programs through a PJRT plugin live in ``pjrt/`` as
``check_*.py`` files (not collected here) and run in a subprocess each
(riftco.testing's ``run_checks`` and ``run_backend_suite``), with
``RIFTCO_PJRT_PLUGIN`` set: XLA aborts the whole process on a failed internal
check, and a crash there must not take this suite down with it.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: The plugin the checks run on: XLA's CPU plugin from PyPI unless
#: RIFTCO_TPU_TEST_PLUGIN names another (a path or a package, e.g. jax-cuda13-pjrt).
PLUGIN_PACKAGE = os.environ.get("RIFTCO_TPU_TEST_PLUGIN", "xla-cpu-pjrt")
#: What each subprocess is given: the plugin to load.
PLUGIN_ENV = {"RIFTCO_PJRT_PLUGIN": PLUGIN_PACKAGE}


def plugin_installed() -> bool:
    if Path(PLUGIN_PACKAGE).is_file():
        return True
    try:
        importlib.metadata.distribution(PLUGIN_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def plugin_library() -> Path | None:
    """The plugin's library file (a path, or the one the package ships)."""
    if Path(PLUGIN_PACKAGE).is_file():
        return Path(PLUGIN_PACKAGE)
    from riftco.backends.tpu.plugin import distribution_library

    return distribution_library(PLUGIN_PACKAGE)


needs_plugin = pytest.mark.skipif(
    not plugin_installed(),
    reason=f"{PLUGIN_PACKAGE} is not installed (pip install riftco-backend-tpu[test])",
)
