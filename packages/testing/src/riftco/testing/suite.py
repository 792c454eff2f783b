"""riftco-tensor's op suite, and a backend's own device checks, in a subprocess.

``run_backend_suite("cuda")`` runs every test of riftco-tensor's suite
(``packages/tensor/tests``) that the ``backend`` fixture parametrizes with ``cuda``:
each capability against its numpy formula, on the device. ``run_checks(path)`` runs a
backend's ``check_*.py`` files (its tiny-model check, its runtime checks). Each runs in a
fresh interpreter, so a driver crash or an aborting runtime fails the test instead of
ending the run; the test fails unless the run exits 0 with at least one test passed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import riftco.tensor as rt

#: The pytest plugin that keeps a run to one backend (see riftco.testing.suite_plugin).
SUITE_PLUGIN = "riftco.testing.suite_plugin"
#: Where riftco-tensor's suite is, relative to the repository root (or set
#: ``RIFTCO_TENSOR_SUITE`` to its folder).
SUITE_FOLDER = Path("packages") / "tensor" / "tests"

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


@dataclass
class PytestOutcome:
    """What a pytest subprocess did: its exit status, its output and the counts of its
    summary line (``passed``, ``failed``, ``skipped``, ``error``, ...)."""

    returncode: int
    output: str
    counts: dict[str, int]

    def summary(self) -> str:
        return ", ".join(f"{n} {what}" for what, n in self.counts.items()) or "no summary"

    def require_passed(
        self,
        *,
        record: Callable[[str, object], None] | None = None,
        skip_if_nothing_ran: bool = False,
    ) -> PytestOutcome:
        """Fail the calling test unless the run exited 0 with a test passed. ``record``
        (pytest's ``record_property``) gets the summary first; ``skip_if_nothing_ran``
        skips instead when every test skipped (a device that turned out absent)."""
        if record is not None:
            record("summary", self.summary())
        print(self.summary())
        if self.returncode != 0:
            pytest.fail(
                f"subprocess exited with {self.returncode} ({self.summary()}):\n"
                + self.output[-8000:]
            )
        if skip_if_nothing_ran and not self.counts.get("passed") and self.counts.get("skipped"):
            last = (self.output.strip().splitlines() or [""])[-1]
            pytest.skip(f"every check skipped: {last}")
        assert self.counts.get("passed", 0) > 0, self.output[-2000:]
        return self


def run_pytest(
    args: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    plugins: Sequence[str] = (),
    pythonpath: Sequence[str | Path] = (),
    timeout: float = 1800,
) -> PytestOutcome:
    """``python -m pytest -q args`` in a fresh interpreter, with ``env`` added to this
    one's environment, ``plugins`` loaded with ``-p`` (before any conftest, so a plugin
    can register a backend that the ``backend`` fixture then lists) and ``pythonpath``
    put first on the module path."""
    path = os.pathsep.join([*map(str, pythonpath), os.environ.get("PYTHONPATH", "")])
    environ = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": path, **(env or {})}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    for plugin in plugins:
        command += ["-p", plugin]
    done = subprocess.run(
        [*command, *map(str, args)], env=environ, capture_output=True, text=True, timeout=timeout
    )
    output = done.stdout + done.stderr
    summaries = [line for line in output.strip().splitlines() if _COUNT.search(line)][-1:] or [""]
    counts = {
        what.rstrip("s") if what.startswith("error") else what: int(n)
        for n, what in _COUNT.findall(summaries[0])
    }
    return PytestOutcome(done.returncode, output, counts)


def tensor_suite() -> Path | None:
    """riftco-tensor's suite: ``RIFTCO_TENSOR_SUITE``, else ``packages/tensor/tests`` in the
    repository around the working directory (or around this file, in a checkout)."""
    named = os.environ.get("RIFTCO_TENSOR_SUITE")
    if named:
        return Path(named)
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / SUITE_FOLDER / "conftest.py").is_file():
                return folder / SUITE_FOLDER
    return None


def run_backend_suite(
    backend: str,
    *,
    env: Mapping[str, str] | None = None,
    plugins: Sequence[str] = (),
    pythonpath: Sequence[str | Path] = (),
    skip_undeclared: bool = False,
    skip_if_nothing_ran: bool = False,
    record: Callable[[str, object], None] | None = None,
    timeout: float = 1800,
) -> PytestOutcome:
    """riftco-tensor's op suite on ``backend`` alone, in a subprocess; fails the calling
    test unless it passes (see ``PytestOutcome.require_passed``) and skips it where the
    suite is not at hand (an installed wheel, away from the repository).

    ``env``, ``plugins`` and ``pythonpath`` reach the subprocess (a plugin module that
    registers an emulated backend, say). ``skip_undeclared``: a test stopped by a
    capability the backend does not declare is a skip naming it (a backend that is
    still growing); otherwise it fails."""
    suite = tensor_suite()
    if suite is None or not suite.is_dir():
        pytest.skip(
            f"riftco-tensor's tests are not at hand ({SUITE_FOLDER}; run from the repository)"
        )
    selection = {"RIFTCO_SUITE_BACKEND": backend}
    if skip_undeclared:
        selection["RIFTCO_SUITE_SKIP_UNDECLARED"] = "1"
    outcome = run_pytest(
        [suite],
        env={**(env or {}), **selection},
        plugins=[*plugins, SUITE_PLUGIN],
        pythonpath=pythonpath,
        timeout=timeout,
    )
    return outcome.require_passed(record=record, skip_if_nothing_ran=skip_if_nothing_ran)


def run_checks(
    *paths: str | Path,
    env: Mapping[str, str] | None = None,
    plugins: Sequence[str] = (),
    pythonpath: Sequence[str | Path] = (),
    skip_if_nothing_ran: bool = False,
    record: Callable[[str, object], None] | None = None,
    timeout: float = 1800,
) -> PytestOutcome:
    """A backend's ``check_*.py`` files (collected only this way, never by the plain
    suite) in a subprocess; fails the calling test unless they pass."""
    outcome = run_pytest(
        ["-o", "python_files=check_*.py", *paths],
        env=env,
        plugins=plugins,
        pythonpath=pythonpath,
        timeout=timeout,
    )
    return outcome.require_passed(record=record, skip_if_nothing_ran=skip_if_nothing_ran)


def unavailable_reason(backend: str) -> str | None:
    """None when discovery lists ``backend`` as available, else why it is not."""
    info = {i.name: i for i in rt.backends()}.get(backend)
    if info is None:
        return f"no {backend} backend is registered"
    return None if info.available else info.reason


def available_backend(backend: str) -> rt.Backend:
    """The backend named, or a failure with the reason it is unavailable (for the
    fixtures of checks that only run where the device is)."""
    reason = unavailable_reason(backend)
    if reason is not None:
        pytest.fail(f"the {backend} backend is not available: {reason}")
    return rt.get_backend(backend)


__all__ = [
    "PytestOutcome",
    "available_backend",
    "run_backend_suite",
    "run_checks",
    "run_pytest",
    "tensor_suite",
    "unavailable_reason",
]
