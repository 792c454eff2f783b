"""Whole-step decoding on the cuda backend (ops.decode's plan, decode.cu and sample.cu)
run on the host emulation (``cudaemu``) against the CPU backend's native decoder:
every topology (GPT-2, exact GELU, Llama-style with grouped keys and a sliding window),
contiguous and paged caches, float32 and bfloat16 weights, rows independent of the
batch (bits), greedy tokens over 64 steps, device sampling, graph replay, and the
counted per-token budget (uploads, launches, reads)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.backends.cuda.ops.decode import DecodePlan, Sampling
from riftco.tensor.ops.decode import DecodeBatch

sys.path.insert(0, str(Path(__file__).resolve().parent / "emulator"))
import cuda_emulation

pytestmark = pytest.mark.skipif(
    cuda_emulation.available() is not None, reason=str(cuda_emulation.available())
)

V, D, HEADS, DH, LAYERS, HIDDEN, CONTEXT = 40, 16, 2, 8, 2, 24, 48
#: float32 logits of the device plan against the CPU decoder: max error relative to
#: the largest logit (sums in a different order: fixed trees in double here).
TOL = 2e-5
#: the same with bfloat16 weights (8 bits of mantissa).
TOL_BF16 = 2e-2
#: Q8_0 / Q4_0 weights (the inputs quantized to 8 bits per block of 32 on both sides).
TOL_BLOCKS = 2e-5

TOPOLOGIES = {
    "gpt2": dict(norm="layer", ff="gelu_tanh", rope=None, kv=2, bias=True, window=0),
    "exact_gelu": dict(norm="layer", ff="gelu", rope=None, kv=2, bias=True, window=0),
    "llama": dict(norm="rms", ff="swiglu", rope=10000.0, kv=1, bias=False, window=0),
    "llama_window": dict(norm="rms", ff="swiglu", rope=10000.0, kv=1, bias=False, window=5),
}


@pytest.fixture(scope="module")
def emu():
    return cuda_emulation.EmulatedCudaBackend()


def weights(topology: str, seed: int = 0) -> dict:
    t = TOPOLOGIES[topology]
    rng = np.random.default_rng(seed)

    def w(*shape, s=0.3):
        return rng.normal(0, s, shape).astype(np.float32)

    kvw = t["kv"] * DH
    out = {"emb": w(V, D, s=1.0), "pos": w(CONTEXT, D), "head": w(V, D), "layers": []}
    for _ in range(LAYERS):
        layer = {
            "q": w(HEADS * DH, D),
            "k": w(kvw, D),
            "v": w(kvw, D),
            "o": w(D, HEADS * DH),
            "n1": 1 + w(D, s=0.1),
            "b1": w(D, s=0.1),
            "n2": 1 + w(D, s=0.1),
            "b2": w(D, s=0.1),
            "qb": w(HEADS * DH, s=0.1),
            "kb": w(kvw, s=0.1),
            "vb": w(kvw, s=0.1),
            "ob": w(D, s=0.1),
        }
        if t["ff"] == "swiglu":
            layer.update(gate=w(HIDDEN, D), up=w(HIDDEN, D), down=w(D, HIDDEN))
        else:
            layer.update(
                expand=w(HIDDEN, D), project=w(D, HIDDEN), eb=w(HIDDEN, s=0.1), pb=w(D, s=0.1)
            )
        out["layers"].append(layer)
    out["fn"], out["fb"] = 1 + w(D, s=0.1), w(D, s=0.1)
    return out


def decoder(topology: str, backend, wts: dict) -> rt.Decoder:
    t = TOPOLOGIES[topology]

    def T(a):
        return rt.from_numpy(a, backend=backend)

    def lin(wname, bname=None, layer=None):
        src = layer if layer is not None else wts
        bias = T(src[bname]) if (bname and t["bias"]) else None
        return rt.DecodeLinear.of(T(src[wname]), bias)

    def norm(wn, bn, src):
        return rt.DecodeNorm(T(src[wn]), T(src[bn]) if t["norm"] == "layer" else None)

    layers = []
    for layer in wts["layers"]:
        linears = {
            "query": lin("q", "qb", layer),
            "key": lin("k", "kb", layer),
            "value": lin("v", "vb", layer),
            "output": lin("o", "ob", layer),
        }
        if t["ff"] == "swiglu":
            linears.update(
                gate=lin("gate", None, layer),
                up=lin("up", None, layer),
                down=lin("down", None, layer),
            )
        else:
            linears.update(expand=lin("expand", "eb", layer), project=lin("project", "pb", layer))
        norms = {"attention": norm("n1", "b1", layer), "feed_forward": norm("n2", "b2", layer)}
        layers.append(rt.DecodeLayer(norms, linears, t["ff"]))
    spec = rt.DecodeSpec(
        heads=HEADS,
        kv_heads=t["kv"],
        head_dim=DH,
        norm=t["norm"],
        eps=1e-5,
        token_embedding=T(wts["emb"]),
        layers=tuple(layers),
        final_norm=norm("fn", "fb", wts),
        head=lin("head"),
        position_embedding=None if t["rope"] else T(wts["pos"]),
        rope_theta=t["rope"],
        window=t["window"],
    )
    return rt.Decoder(spec)


class Run:
    """Sequences decoded through one Decoder over a contiguous or a paged cache."""

    PAGE = 4
    TABLE = np.array([[5, 2, 7, 0], [1, 6, 3, 4], [9, 8, 11, 10]], dtype=np.int64)

    def __init__(self, dec: rt.Decoder, backend, seqs: int, paged: bool, kv: int, cap: int = 16):
        self.dec, self.paged, self.cap = dec, paged, cap
        rows = 12 * self.PAGE if paged else seqs * cap
        zeros = np.zeros((rows, kv, DH), dtype=np.float32)
        self.keys = [rt.from_numpy(zeros, backend=backend) for _ in range(LAYERS)]
        self.values = [rt.from_numpy(zeros, backend=backend) for _ in range(LAYERS)]
        self.lengths = [0] * seqs
        self.seqs = list(range(seqs))

    def row(self, j: int, p: int) -> int:
        if self.paged:
            return int(self.TABLE[j, p // self.PAGE] * self.PAGE + p % self.PAGE)
        return j * self.cap + p

    def batch(self, feeds: list[list[int]], which: list[int] | None = None):
        which = self.seqs if which is None else which
        tok, pos, rows, q0, qn, kvl = [], [], [], [], [], []
        for j, feed in zip(which, feeds):
            q0.append(len(tok))
            qn.append(len(feed))
            for t in feed:
                p = self.lengths[j]
                tok.append(t)
                pos.append(p)
                rows.append(self.row(j, p))
                self.lengths[j] += 1
            kvl.append(self.lengths[j])
        last = [q0[i] + qn[i] - 1 for i in range(len(which))]
        extra = (
            dict(page_table=self.TABLE[which], page_size=self.PAGE)
            if self.paged
            else dict(kv_starts=[j * self.cap for j in which])
        )
        return (tok, pos, rows, self.keys, self.values, last, q0, qn, kvl), extra

    def step(self, feeds: list[list[int]], which: list[int] | None = None) -> np.ndarray:
        args, extra = self.batch(feeds, which)
        return self.dec.step(*args, **extra).numpy()


def assert_close(got, want, tol):
    scale = max(float(np.abs(want).max()), 1.0)
    err = float(np.abs(got - want).max()) / scale
    assert err <= tol, f"relative error {err:.3g} over {tol}"


FEEDS = [[[3, 1, 4], [9, 2]], [[1], [6]], [[5], [3]], [[9], [0]], [[2], [7]], [[6], [5]]]


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_logits_equal_the_cpu_decoder(emu, topology, paged):
    wts = weights(topology)
    kv = TOPOLOGIES[topology]["kv"]
    cpu = Run(decoder(topology, "cpu", wts), "cpu", 2, paged, kv)
    dev = Run(decoder(topology, emu, wts), emu, 2, paged, kv)
    assert isinstance(dev.dec._program, DecodePlan)
    for feeds in FEEDS:
        assert_close(dev.step(feeds), cpu.step(feeds), TOL)
    for a, b in zip(dev.keys + dev.values, cpu.keys + cpu.values):
        assert_close(a.numpy(), b.numpy(), TOL)


def test_bfloat16_weights_decode_within_their_resolution(emu, monkeypatch):
    monkeypatch.setenv("RIFTCO_CUDA_DECODE_WEIGHTS", "bfloat16")
    wts = weights("llama", 1)
    cpu = Run(decoder("llama", "cpu", wts), "cpu", 2, True, 1)
    dev = Run(decoder("llama", emu, wts), emu, 2, True, 1)
    assert dev.dec._program.weights == "bfloat16"
    for feeds in FEEDS[:3]:
        assert_close(dev.step(feeds), cpu.step(feeds), TOL_BF16)


@pytest.mark.parametrize("topology", ["gpt2", "llama_window"])
def test_a_row_decodes_the_same_bits_alone_and_batched(emu, topology):
    wts = weights(topology, 2)
    kv = TOPOLOGIES[topology]["kv"]
    batched = Run(decoder(topology, emu, wts), emu, 3, True, kv)
    together = [batched.step([[1, 2], [3], [4, 5, 6]])]
    together += [batched.step([[7], [8], [9]]) for _ in range(3)]
    for j, first in enumerate([[1, 2], [3], [4, 5, 6]]):
        alone = Run(decoder(topology, emu, wts), emu, 3, True, kv)
        rows = [alone.step([first], [j])] + [alone.step([[7 + j]], [j]) for _ in range(3)]
        for a, b in zip(rows, together):
            np.testing.assert_array_equal(a[0], b[j])


def test_repeated_runs_give_the_same_bits(emu):
    wts = weights("gpt2", 3)
    outs = []
    for _ in range(2):
        run = Run(decoder("gpt2", emu, wts), emu, 2, False, 2)
        outs.append([run.step(f) for f in FEEDS[:3]])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def _sample(run: Run, feeds, sampling, counter, history=None):
    args, extra = run.batch(feeds)
    tok, pos, rows, keys, values, last, q0, qn, kvl = args
    paged = "page_table" in extra
    batch = DecodeBatch(
        np.asarray(tok, dtype=np.int64),
        np.asarray(pos, dtype=np.int64),
        np.asarray(rows, dtype=np.int64),
        len(tok),
        tuple(k._data for k in keys),
        tuple(v._data for v in values),
        tuple(keys[0].shape),
        tuple(last),
        tuple(q0),
        tuple(qn),
        () if paged else tuple(extra["kv_starts"]),
        tuple(kvl),
        extra.get("page_table"),
        4 if paged else 0,
        extra.get("page_size", 0),
    )
    for t in (*keys, *values):
        t.version += 1
    return run.dec.backend.decode_sample(run.dec._program, batch, sampling, counter, history)


@pytest.mark.parametrize("topology", ["gpt2", "llama"])
def test_greedy_tokens_equal_the_cpu_over_64_steps(emu, topology):
    wts = weights(topology, 4)
    kv = TOPOLOGIES[topology]["kv"]
    cpu = Run(decoder(topology, "cpu", wts), "cpu", 1, False, kv, cap=72)
    dev = Run(decoder(topology, emu, wts), emu, 1, False, kv, cap=72)
    t_cpu = t_dev = 3
    for step in range(64 if topology == "llama" else CONTEXT - 1):
        t_cpu = int(np.argmax(cpu.step([[t_cpu]])[0]))
        t_dev = int(_sample(dev, [[t_dev]], [Sampling()], step)[0])
        assert t_dev == t_cpu, f"step {step}"


def test_seeded_device_sampling_repeats_and_follows_its_rules(emu):
    wts = weights("gpt2", 5)
    rules = [
        Sampling(temperature=0.8, seed=7),
        Sampling(temperature=1.0, top_k=3, seed=7),
        Sampling(temperature=1.0, top_p=0.5, seed=9),
        Sampling(temperature=0.7, top_k=5, top_p=0.9, penalty=1.3, seed=11),
    ]
    draws = []
    for _ in range(2):
        run = Run(decoder("gpt2", emu, wts), emu, 2, False, 2)
        got = []
        for i, feeds in enumerate(FEEDS):
            for rule in rules:
                got.append(tuple(_sample(run, feeds, [rule], i, [[1, 2, 2], [5]])))
                run.lengths = [x - len(f) for x, f in zip(run.lengths, feeds)]
            run.step(feeds)
        draws.append(got)
    assert draws[0] == draws[1]
    assert len(set(draws[0])) > 1
    # top-k 1 is greedy; top-k 3 keeps only the three largest logits
    run = Run(decoder("gpt2", emu, wts), emu, 2, False, 2)
    logits = run.step(FEEDS[0])
    run.lengths = [0, 0]
    for seed in range(6):
        ids = _sample(run, FEEDS[0], [Sampling(temperature=1.0, top_k=3, seed=seed)], seed)
        run.lengths = [0, 0]
        for r, t in enumerate(ids):
            assert t in np.argsort(logits[r])[-3:]
    ids = _sample(run, FEEDS[0], [Sampling(temperature=1.0, top_k=1, seed=1)], 0)
    np.testing.assert_array_equal(ids, np.argmax(logits, axis=1))


def counting_backend(graphs: bool):
    backend = cuda_emulation.EmulatedCudaBackend()
    backend.device = backend.kernels.device = cuda_emulation.CountingDevice()
    if not graphs:
        backend.device.begin_capture = None  # type: ignore[method-assign]
        del backend.device.begin_capture
    return backend


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "no-graph"])
def test_a_batch_1_token_costs_one_upload_one_launch_and_one_read(monkeypatch, graphs):
    monkeypatch.setenv("RIFTCO_CUDA_GRAPHS", "1" if graphs else "0")
    backend = counting_backend(graphs)
    wts = weights("llama")
    run = Run(decoder("llama", backend, wts), backend, 1, True, 1)
    plan = run.dec._program
    assert plan.graphs is graphs
    _sample(run, [[3]], [Sampling()], 0)  # the first step of a shape builds and captures
    dev = backend.device
    for step in range(1, 4):
        dev.counts = dict.fromkeys(dev.counts, 0)
        _sample(run, [[step]], [Sampling()], step)
        launches = 0 if graphs else plan.launches_per_step + 1  # + the sampler
        assert dev.counts == {
            "upload": 1,
            "download": 1,
            "download_bytes": 8,
            "launch": launches,
            "graph_launch": int(graphs),
            "capture": 0,
        }
    # decode_step (logits kept on the device): one upload, no read
    dev.counts = dict.fromkeys(dev.counts, 0)
    run.step([[5]])
    run.step([[6]])
    dev.counts = dict.fromkeys(dev.counts, 0)
    logits = run.dec.step(*run.batch([[7]])[0], page_table=Run.TABLE[:1], page_size=4)
    assert dev.counts["upload"] == 1 and dev.counts["download"] == 0
    assert dev.counts["graph_launch"] == int(graphs)
    assert logits.shape == (1, V)


def test_graph_replay_gives_the_launch_lists_bits(monkeypatch):
    outs = []
    for graphs in ("1", "0"):
        monkeypatch.setenv("RIFTCO_CUDA_GRAPHS", graphs)
        backend = cuda_emulation.EmulatedCudaBackend()
        run = Run(decoder("gpt2", backend, weights("gpt2", 6)), backend, 2, True, 2)
        assert run.dec._program.graphs is (graphs == "1")
        outs.append([run.step(f) for f in FEEDS[:4]])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def test_bad_indices_are_refused_on_the_host_with_the_cpus_wording(emu):
    run = Run(decoder("gpt2", emu, weights("gpt2")), emu, 1, False, 2)
    with pytest.raises(rt.KernelError, match="outside the vocabulary of 40"):
        run.step([[V]])
    run.lengths = [0]
    args, extra = run.batch([[1]])
    args = (args[0], args[1], [10_000], *args[3:])
    with pytest.raises(rt.KernelError, match="cache row 10000"):
        run.dec.step(*args, **extra)


def test_a_weight_format_the_plan_does_not_hold_is_refused_typed(emu):
    spec = decoder("gpt2", emu, weights("gpt2")).spec
    head = spec.head
    odd = type(head)("q8_0", head.arrays, head.shape)
    with pytest.raises(rt.CapabilityMissing, match="q8_0 weights"):
        DecodePlan(emu, type(spec)(**{**spec.__dict__, "head": odd}))


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_riftco_nn_generation_decodes_through_the_plan_unchanged(emu, preset):
    nn = pytest.importorskip("riftco.nn")
    from riftco.nn.native_decode import decoder_for

    config = nn.TransformerConfig.preset(
        preset, vocab_size=48, context_length=32, d_model=32, n_heads=2, n_layers=2, d_ff=48
    )
    cpu = nn.DecoderOnlyTransformer(config, seed=3, backend="cpu")
    dev = nn.DecoderOnlyTransformer(config, seed=3, backend=emu)
    assert isinstance(decoder_for(dev)._program, DecodePlan)
    prompts = [[1, 2, 3], [7, 5]]
    sampling = nn.SamplingConfig(max_new_tokens=12, temperature=0.0)
    want = [r.tokens for r in nn.generate(cpu, prompts, sampling)]
    got = [r.tokens for r in nn.generate(dev, prompts, sampling)]
    assert got == want
    assert decoder_for(dev)._program.shapes  # the one-token steps ran through the plan


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_a_riftco_nn_session_token_costs_one_upload_one_graph_launch_one_read(paged):
    nn = pytest.importorskip("riftco.nn")
    backend = counting_backend(True)
    config = nn.TransformerConfig.preset(
        "gpt2", vocab_size=48, context_length=32, d_model=32, n_heads=2, n_layers=2, d_ff=48
    )
    model = nn.DecoderOnlyTransformer(config, seed=3, backend=backend)
    cache = (
        nn.PagedKVCache(config, pages=8, page_size=4, backend=backend)
        if paged
        else nn.ContiguousKVCache(config, max_sequences=1, capacity=32, backend=backend)
    )
    session = nn.DecodeSession(model, cache)
    session.prefill([1, 2, 3])
    session.step(4)
    session.step(5)  # a second page: the table's width (padded to 2) makes a new shape
    dev = backend.device
    for token in range(6, 9):
        dev.counts = dict.fromkeys(dev.counts, 0)
        session.step(token)  # riftco-nn samples on the host: the logits are the one read
        assert dev.counts == {
            "upload": 1,
            "download": 1,
            "download_bytes": 4 * 48,  # the float32 logits of one row
            "launch": 0,
            "graph_launch": 1,
            "capture": 0,
        }


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_block_layout_weights_decode_as_the_cpu_decodes_them(emu, preset, fmt):
    nn = pytest.importorskip("riftco.nn")
    from riftco.nn.native_decode import decoder_for

    config = nn.TransformerConfig.preset(
        preset, vocab_size=48, context_length=32, d_model=64, n_heads=2, n_layers=2, d_ff=96
    )
    models = []
    for backend in ("cpu", emu):
        model = nn.DecoderOnlyTransformer(config, seed=4, backend=backend)
        model.quantize_for_inference(fmt)
        models.append(model)
    plan = decoder_for(models[1])._program
    assert isinstance(plan, DecodePlan) and plan.blocks
    outs = []
    for model in models:
        cache = nn.ContiguousKVCache(config, max_sequences=2, capacity=16, backend=model.backend)
        ids = [cache.add_sequence() for _ in range(2)]
        steps = [model.forward_incremental([[1, 2, 3], [4, 5]], cache, ids).numpy()]
        for t in range(4):
            steps.append(model.forward_incremental([[t + 6], [t + 9]], cache, ids).numpy())
        outs.append(np.stack(steps))
    # activations are quantized to 8 bits per block as on the CPU (measured: within 6e-8
    # of the largest logit; a code could round the other way where the inputs differ in
    # their last bits)
    assert_close(outs[1], outs[0], TOL_BLOCKS)
