"""Run by test_on_xla_cpu.py in a fresh process: what discovery and one op did
to the tpu backend's client and caches, printed as one JSON line."""

from __future__ import annotations

import json
import sys

import numpy as np

import riftco.tensor as rt

report: dict[str, object] = {}
(info,) = [b for b in rt.backends() if b.name == "tpu"]
report["available"] = info.available
report["reason"] = info.reason
report["description"] = info.description
if info.available:
    backend = rt.get_backend("tpu")
    device = backend.device  # type: ignore[attr-defined]
    report["created_by_listing"] = device.client_created
    report["runs_on_host"] = backend.runs_on_host
    if "--run" in sys.argv:
        x = rt.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), backend="tpu")
        report["result"] = ((x * 2.0) @ x.T).numpy().tolist()
        report["created"] = device.client_created
        report["device_count"] = device.device_count
        report["compile_options"] = device.compile_options().hex()
        report["disk"] = device.disk_cache_stats()
        report["disk_dir"] = str(device.disk_cache_dir)
print("PROBE " + json.dumps(report))
