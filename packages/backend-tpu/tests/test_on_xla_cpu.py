"""Real XLA execution through a PJRT plugin (XLA's CPU plugin by default, see
pjrt_helpers.PLUGIN_PACKAGE), each suite in its own process (riftco.testing's shared
calls). A run where every check skipped is a skip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from pjrt_helpers import HERE, PLUGIN_ENV, PLUGIN_PACKAGE, needs_plugin, plugin_library

from riftco.testing import run_backend_suite, run_checks

pytestmark = needs_plugin


@pytest.mark.parametrize("check", ["check_backend.py", "check_model.py"])
def test_checks_of_this_package(check, record_property, tmp_path):
    env = {**PLUGIN_ENV, "RIFTCO_PJRT_CACHE": str(tmp_path / "cache")}
    run_checks(HERE / "pjrt" / check, env=env, record=record_property, skip_if_nothing_ran=True)


def test_shared_tensor_suite_runs_on_tpu(record_property):
    """riftco-tensor's op suite with the `backend` fixture's tpu entries: every
    capability against numpy formulas on real XLA execution."""
    env = {**PLUGIN_ENV, "RIFTCO_PJRT_CACHE": "0"}
    run_backend_suite("tpu", env=env, record=record_property, skip_if_nothing_ran=True)


def probe(env: dict[str, str], *args: str) -> dict:
    """probe.py in a fresh process with the plugin and ``env``: what listing and
    one op did to the client and the caches."""
    full = {**os.environ, **PLUGIN_ENV, "RIFTCO_PJRT_CACHE": "0", **env}
    done = subprocess.run(
        [sys.executable, str(HERE / "probe.py"), *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stdout + done.stderr
    return json.loads(lines[-1][len("PROBE ") :])


EXPECTED = [[10.0, 28.0], [28.0, 100.0]]  # (2x) @ x.T for x = arange(6) as 2x3


def test_listing_backends_creates_no_client():
    found = probe({})
    assert found["available"], found["reason"]
    assert found["created_by_listing"] is False
    assert "client created on first use" in found["description"]
    assert found["runs_on_host"] is True  # told by the plugin's file name
    ran = probe({}, "--run")
    assert ran["created_by_listing"] is False and ran["created"] is True
    assert ran["result"] == EXPECTED


def test_client_options_reach_the_plugin():
    ran = probe({"RIFTCO_PJRT_OPTIONS": '{"cpu_device_count": 3}'}, "--run")
    assert ran["device_count"] == 3
    assert ran["result"] == EXPECTED
    # The CPU plugin compiles without the GPU's deterministic-ops override.
    assert ran["compile_options"] == "1a0420012801"


def test_a_bad_option_value_makes_tpu_unavailable_with_the_reason():
    found = probe({"RIFTCO_PJRT_OPTIONS": '{"memory_fraction": "most"}'})
    assert not found["available"]
    assert "memory_fraction: expected a number in (0, 1], found a string" in found["reason"]
    found = probe({"RIFTCO_PJRT_OPTIONS": "preallocate=false"})
    assert not found["available"] and "expected a JSON object" in found["reason"]


def test_a_second_process_loads_compiled_programs_from_disk(tmp_path):
    env = {"RIFTCO_PJRT_CACHE": str(tmp_path / "cache")}
    first = probe(env, "--run")
    hits, misses, stores, rejected, failed = first["disk"]
    assert first["disk_dir"] == str(tmp_path / "cache")
    assert (hits, rejected, failed) == (0, 0, 0) and misses > 0 and stores == misses
    entries = sorted((tmp_path / "cache").glob("*.pjrt"))
    assert len(entries) == stores
    second = probe(env, "--run")
    assert second["result"] == EXPECTED
    assert second["disk"] == [misses, 0, 0, 0, 0]  # every program from disk
    # Damaged entries are compiled again and rewritten, never trusted.
    for entry in entries:
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0xFF
        entry.write_bytes(bytes(data))
    entries[0].write_bytes(b"RFTPJRT1 short")
    third = probe(env, "--run")
    assert third["result"] == EXPECTED
    assert third["disk"] == [0, misses, misses, misses, 0]
    fourth = probe(env, "--run")
    assert fourth["disk"] == [misses, 0, 0, 0, 0]


def test_another_plugin_build_never_sees_the_entries(tmp_path):
    """The key holds the plugin library's path, size and time: a copy elsewhere,
    or the same file touched, is another plugin."""
    original = plugin_library()
    if original is None:
        pytest.skip(f"{PLUGIN_PACKAGE} ships no library file to copy")
    env = {"RIFTCO_PJRT_CACHE": str(tmp_path / "cache")}
    first = probe({**env, "RIFTCO_PJRT_PLUGIN": str(original)}, "--run")
    programs = first["disk"][1]
    copy = tmp_path / original.name
    shutil.copy2(original, copy)
    moved = probe({**env, "RIFTCO_PJRT_PLUGIN": str(copy)}, "--run")
    assert moved["disk"][:3] == [0, programs, programs]
    stat = copy.stat()
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    touched = probe({**env, "RIFTCO_PJRT_PLUGIN": str(copy)}, "--run")
    assert touched["disk"][:3] == [0, programs, programs]
    again = probe({**env, "RIFTCO_PJRT_PLUGIN": str(copy)}, "--run")
    assert again["disk"][:2] == [programs, 0]
    copy.unlink()
