"""The CPU's vector paths (``rt.set_cpu_isa``): every level this machine can run gives the
float32 and F16 row products and the whole decode step the same bits as every other level
and every thread count, and the packed matmul the same bits at every vector width (the
portable level's matmul is the ``gemm`` crate's, in its own order); a level the CPU lacks
is skipped with the reason."""

from __future__ import annotations

import time

import numpy as np
import pytest
from tensor_helpers import LEVELS, reachable
from test_decode import Model, cache

import riftco.tensor as rt
from riftco.tensor.ops.blockquant import BlockWeight, quantize_block_array


def run_everything(matmul: bool = True) -> list[np.ndarray]:
    """Products whose bits the vector paths must agree on (the matmuls with ``matmul``)."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.2, (389, 200)).astype(np.float32)
    x = rng.normal(0, 1, (5, 200)).astype(np.float32)
    # Deeper than one packed slice (384), wider than two panels.
    a = rng.normal(0, 1, (70, 900)).astype(np.float32)
    b = rng.normal(0, 1, (900, 90)).astype(np.float32)
    raw = quantize_block_array(w[:, :192], "f16")
    f16 = BlockWeight.from_bytes(raw, "f16", (389, 192))
    model = Model("swiglu", seed=4)
    decoder = model.decoder("cpu")
    keys, values = cache(16, "cpu"), cache(16, "cpu")
    logits = []
    for p, token in enumerate([3, 7, 1, 8]):
        step = decoder.step(
            [token],
            [p],
            [p],
            keys,
            values,
            logit_rows=[0],
            q_starts=[0],
            q_counts=[1],
            kv_lengths=[p + 1],
            kv_starts=[0],
        )
        logits.append(step.numpy())
    products = [
        rt.block_linear(rt.tensor(x[:, :192]), f16).numpy(),
        rt.block_linear(rt.tensor(x[:1, :192]), f16).numpy(),
        *logits,
    ]
    if matmul:
        products += [
            rt.matmul(rt.tensor(a), rt.tensor(b)).numpy(),
            rt.matmul(rt.tensor(a[:3]), rt.tensor(b)).numpy(),
            rt.matmul(rt.tensor(x[:1]), rt.tensor(w.T.copy())).numpy(),
        ]
    return products


def bits(arrays: list[np.ndarray]) -> list[bytes]:
    return [a.tobytes() for a in arrays]


def test_the_level_names_and_the_cap(restore):
    assert rt.cpu_isa_detected() in LEVELS
    for level in reachable():
        assert rt.set_cpu_isa(level) == level
        assert rt.cpu_isa() == level
    # A cap above the CPU's level is lowered to it.
    assert rt.set_cpu_isa("avx512-vnni") == rt.cpu_isa_detected()


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_gives_the_bits_of_the_widest(restore, level):
    if level not in reachable():
        pytest.skip(f"this CPU's widest level is {rt.cpu_isa_detected()}, not {level}")
    matmul = level != "portable"
    rt.set_num_threads(1)
    rt.set_cpu_isa(rt.cpu_isa_detected())
    want = bits(run_everything(matmul))
    rt.set_cpu_isa(level)
    for threads in (1, 2, 3):
        rt.set_num_threads(threads)
        assert bits(run_everything(matmul)) == want, f"{level} on {threads} threads"


def test_the_portable_matmul_keeps_its_bits_across_threads(restore):
    rt.set_cpu_isa("portable")
    rt.set_num_threads(1)
    want = bits(run_everything())
    rt.set_num_threads(3)
    assert bits(run_everything()) == want


def test_no_thread_spins_while_the_process_is_idle(restore):
    rt.set_num_threads(3)
    rng = np.random.default_rng(5)
    # Large enough to go to the team of helper threads.
    w = rt.tensor(rng.normal(0, 1, (1024, 512)).astype(np.float32))
    x = rt.tensor(rng.normal(0, 1, (1, 1024)).astype(np.float32))
    for _ in range(20):
        rt.matmul(x, w).numpy()
    time.sleep(0.05)  # the helpers' short spin ends
    start = time.process_time()
    time.sleep(0.3)
    spent = time.process_time() - start
    # Spinning helpers would burn about 0.3 s each of the 0.3 s asleep.
    assert spent < 0.1, f"{spent:.3f} s of CPU time while asleep for 0.3 s"
