"""``bench/bench_cuda.py --micro`` on the host emulation, at a small shape: both
attention routes and the product run through the bench's own code, timed by events
(the emulation's stand-in for CUDA events), without torch."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

BENCH = Path(__file__).resolve().parents[3] / "bench"
pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None or not (BENCH / "bench_cuda.py").exists(),
    reason="needs the host emulation and the repository's bench/",
)


def test_the_microbench_times_both_attention_routes_by_events(monkeypatch, capsys):
    for module in ("riftco.nn", "riftco.optim", "riftco.train"):
        pytest.importorskip(module)
    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("bench_cuda")
    monkeypatch.setattr(bench, "torch", None)
    bench.micro(0.02, "cudaemu", shape=(1, 64, 2, 16))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "micro attention fwd+bwd",
        "micro attention fwd+bwd, cuBLAS route",
        "micro gemm 64x32x96",
    ]
    assert all("/s on the GPU's clock" in line for line in lines)
