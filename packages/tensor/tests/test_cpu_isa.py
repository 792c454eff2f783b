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


def assert_the_bits_of_the_widest(level: str, run, threads=(1, 2, 3)) -> None:
    """``run()``'s arrays at ``level`` on each thread count are those of the CPU's
    widest level on one thread (skipped for a level the CPU lacks)."""
    if level not in reachable():
        pytest.skip(f"this CPU's widest level is {rt.cpu_isa_detected()}, not {level}")
    rt.set_num_threads(1)
    rt.set_cpu_isa(rt.cpu_isa_detected())
    want = bits(run())
    rt.set_cpu_isa(level)
    for n in threads:
        rt.set_num_threads(n)
        assert bits(run()) == want, f"{level} on {n} threads"


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_gives_the_bits_of_the_widest(restore, level):
    matmul = level != "portable"
    assert_the_bits_of_the_widest(level, lambda: run_everything(matmul))


def run_training_kernels(attention: bool = True) -> list[np.ndarray]:
    """A training step's other kernels (elementwise functions and their gradients,
    norms, softmax, the loss, column sums, Adam, and with ``attention`` attention
    both ways, whose tiles are packed products), sized to take the team and ragged
    enough for every vector tail."""
    rng = np.random.default_rng(7)
    t = lambda *shape, scale=1.0: rt.tensor(  # noqa: E731
        rng.normal(0, scale, shape).astype(np.float32)
    )
    x, g = t(300, 131, scale=2.0), t(300, 131)
    w, b = t(131), t(131)
    out = [rt.gelu(x), rt.gelu(x, approximate="tanh"), rt.exp(x), rt.tanh(x), rt.sigmoid(x)]
    out += [rt.silu(x), rt.activation_backward("gelu_tanh", x, g), x * g + w, rt.sum(g, axis=0)]
    y, mean, rstd = rt.layer_norm_with_stats(x, w, b)
    out += [
        y,
        mean,
        rstd,
        *[p for p in rt.layer_norm_backward(g, x, w, mean, rstd) if p is not None],
    ]
    y, rstd = rt.rms_norm_with_stats(x, w)
    out += [y, rstd, *[p for p in rt.rms_norm_backward(g, x, w, rstd) if p is not None]]
    out += [rt.softmax(x), rt.log_softmax(x)]
    targets = rt.tensor(rng.integers(0, 131, 300).astype(np.int64))
    loss, lse = rt.softmax_cross_entropy(x, targets)
    out += [loss, lse, rt.softmax_cross_entropy_backward(t(300), x, targets, lse)]
    if attention:
        q, k, v, dout = (t(3, 77, 4, 24) for _ in range(4))
        att, stats = rt.attention_with_stats(q, k, v)
        out += [att, *stats, *rt.attention_backward(dout, q, k, v, att, stats)]
    params, grads = [t(300, 131), t(131)], [t(300, 131), t(131)]
    m = [[rt.tensor(np.zeros(p.size, np.float32))] for p in params]
    vv = [[rt.tensor(np.zeros(p.size, np.float32))] for p in params]
    hyper = dict(lr=[1e-2] * 2, beta1=[0.9] * 2, beta2=[0.99] * 2, eps=[1e-8] * 2)
    rt.adam_update_(
        params, grads, m, vv, **hyper, weight_decay=[0.1, 0.0], step=[3, 3], decoupled=True
    )
    out += [*params, m[0][0], vv[1][0]]
    return [a.numpy() for a in out]


@pytest.mark.parametrize("level", LEVELS)
def test_the_training_kernels_give_the_same_bits_at_every_level(restore, level):
    # The multiversioned kernels are compiled for AVX-512, AVX2 + FMA and the
    # baseline: the same operations in the same order at every width (attention's
    # tiles at the portable level are the gemm crate's products, in its own order).
    attention = level != "portable"
    assert_the_bits_of_the_widest(level, lambda: run_training_kernels(attention), (1, 2))


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
