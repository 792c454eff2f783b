"""The whole-step decode plan (``decode_program`` / ``decode_step``) against the CPU
backend's native decoder: a GPT-2-style model (layer norm, learned positions, GELU,
biases, tied head) and a Llama-style one (RMS norm, rotary, grouped-query attention,
SwiGLU, a sliding window), contiguous and paged caches, prompts and batched single
tokens; greedy tokens equal over many steps; the counted device budget of a step."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import riftco.tensor as rt
from riftco.tensor import CapabilityMissing, DecodeLayer, DecodeLinear, DecodeNorm, DecodeSpec

#: Logits within this of the CPU decoder's (relative to the largest logit), since the
#: two sum their products in different orders (both in float32).
TOL = 2e-5
VOCAB, D, CONTEXT = 61, 32, 64


def _t(backend, a):
    return rt.tensor(np.asarray(a, np.float32), backend=backend)


def make_spec(backend: str, kind: str, layers: int = 2, seed: int = 0) -> DecodeSpec:
    r = np.random.default_rng(seed)
    gpt = kind == "gpt2"
    heads, kv_heads, hd = (4, 4, 8) if gpt else (4, 2, 8)
    hidden = 4 * D if gpt else 48

    def w(*shape, scale=0.2):
        return _t(backend, r.standard_normal(shape) * scale)

    def lin(rows, cols):
        return DecodeLinear.of(w(rows, cols), w(rows, scale=0.05) if gpt else None)

    def norm():
        return DecodeNorm(w(D, scale=0.1) + 1.0, w(D, scale=0.1) if gpt else None)

    out = []
    for _ in range(layers):
        linears = {
            "query": lin(heads * hd, D),
            "key": lin(kv_heads * hd, D),
            "value": lin(kv_heads * hd, D),
            "output": lin(D, heads * hd),
        }
        if gpt:
            linears |= {"expand": lin(hidden, D), "project": lin(D, hidden)}
        else:
            linears |= {"gate": lin(hidden, D), "up": lin(hidden, D), "down": lin(D, hidden)}
        norms = {"attention": norm(), "feed_forward": norm()}
        out.append(DecodeLayer(norms, linears, "gelu_tanh" if gpt else "swiglu"))
    embedding = w(VOCAB, D, scale=0.5)
    return DecodeSpec(
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hd,
        norm="layer" if gpt else "rms",
        eps=1e-5,
        token_embedding=embedding,
        layers=tuple(out),
        final_norm=norm(),
        head=DecodeLinear.of(embedding) if gpt else lin(VOCAB, D),
        position_embedding=w(CONTEXT, D, scale=0.3) if gpt else None,
        rope_theta=None if gpt else 10000.0,
        window=0 if gpt else 5,
    )


class Run:
    """One decoder and its caches on a backend."""

    def __init__(self, backend: str, kind: str, rows: int):
        self.decoder = rt.Decoder(make_spec(backend, kind))
        s = self.decoder.spec
        zeros = np.zeros((rows, s.kv_heads, s.head_dim), np.float32)
        self.keys = [_t(backend, zeros) for _ in s.layers]
        self.values = [_t(backend, zeros) for _ in s.layers]

    def step(self, **kw):
        return self.decoder.step(keys=self.keys, values=self.values, **kw)


def _close(a: np.ndarray, b: np.ndarray, what: str) -> None:
    scale = max(1.0, float(np.abs(b).max()))
    err = float(np.abs(a - b).max()) / scale
    assert err <= TOL, f"{what}: {err:.3g} of the largest magnitude, above {TOL}"


def _steps_contiguous():
    """Two sequences: prompts of 5 and 3 tokens, then single tokens (batched)."""
    r = np.random.default_rng(3)
    lengths = [0, 0]
    base = [0, 32]
    plan = [[5, 3]] + [[1, 1]] * 6 + [[1, 0]] * 2
    for counts in plan:
        tokens, positions, rows, q_starts, q_counts, kv_starts, kv_lengths = ([] for _ in range(7))
        at = 0
        for j, c in enumerate(counts):
            if c == 0:
                continue
            q_starts.append(at)
            q_counts.append(c)
            kv_starts.append(base[j])
            kv_lengths.append(lengths[j] + c)
            for i in range(c):
                tokens.append(int(r.integers(VOCAB)))
                positions.append(lengths[j] + i)
                rows.append(base[j] + lengths[j] + i)
            lengths[j] += c
            at += c
        n = len(tokens)
        yield dict(
            tokens=tokens, positions=positions, cache_rows=rows,
            logit_rows=list(range(n)), q_starts=q_starts, q_counts=q_counts,
            kv_starts=kv_starts, kv_lengths=kv_lengths,
        )  # fmt: skip


def _steps_paged(page_size=4):
    """Two sequences over scattered pages of a shared pool."""
    r = np.random.default_rng(4)
    table = np.array([[5, 2, 7, 0], [1, 6, 3, 4]], np.int64)
    lengths = [0, 0]
    for counts in [[6, 2]] + [[1, 1]] * 7:
        tokens, positions, rows, q_starts, q_counts, kv_lengths = ([] for _ in range(6))
        at = 0
        for j, c in enumerate(counts):
            q_starts.append(at)
            q_counts.append(c)
            kv_lengths.append(lengths[j] + c)
            for i in range(c):
                p = lengths[j] + i
                tokens.append(int(r.integers(VOCAB)))
                positions.append(p)
                rows.append(int(table[j, p // page_size]) * page_size + p % page_size)
            lengths[j] += c
            at += c
        n = len(tokens)
        yield dict(
            tokens=tokens, positions=positions, cache_rows=rows,
            logit_rows=[n - 1, 0], q_starts=q_starts, q_counts=q_counts,
            kv_lengths=kv_lengths, page_table=table, page_size=page_size,
        )  # fmt: skip


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("cache", ["contiguous", "paged"])
def test_logits_and_caches_match_the_cpu_decoder(gpu, kind, cache):
    rows = 64 if cache == "contiguous" else 32
    ref, dev = Run("cpu", kind, rows), Run(gpu.name, kind, rows)
    steps = _steps_contiguous() if cache == "contiguous" else _steps_paged()
    for i, kw in enumerate(steps):
        want = ref.step(**kw).numpy()
        got = dev.step(**kw).numpy()
        assert got.shape == want.shape
        _close(got, want, f"{kind} {cache} step {i} logits")
    for layer, (a, b) in enumerate(zip(dev.keys, ref.keys, strict=True)):
        _close(a.numpy(), b.numpy(), f"layer {layer} keys")
    for layer, (a, b) in enumerate(zip(dev.values, ref.values, strict=True)):
        _close(a.numpy(), b.numpy(), f"layer {layer} values")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_greedy_tokens_equal_the_cpu_decoders(gpu, kind):
    ref, dev = Run("cpu", kind, 64), Run(gpu.name, kind, 64)
    tokens = {"cpu": [3], "dev": [3]}
    for p in range(40):
        for name, run in (("cpu", ref), ("dev", dev)):
            kw = dict(
                tokens=[tokens[name][-1]], positions=[p], cache_rows=[p], logit_rows=[0],
                q_starts=[0], q_counts=[1], kv_starts=[0], kv_lengths=[p + 1],
            )  # fmt: skip
            tokens[name].append(int(run.step(**kw).argmax(axis=-1).numpy()[0]))
    assert tokens["dev"] == tokens["cpu"]


def test_batched_rows_do_not_depend_on_each_other(gpu):
    """A sequence's logits are the same bits alone and batched with another."""
    steps = list(_steps_contiguous())
    both, alone = Run(gpu.name, "llama", 64), Run(gpu.name, "llama", 64)
    for kw in steps[:1]:
        both.step(**kw)
        alone.step(**kw)
    kw = steps[1]
    together = both.step(**kw).numpy()
    single = dict(kw, tokens=kw["tokens"][:1], positions=kw["positions"][:1],
                  cache_rows=kw["cache_rows"][:1], logit_rows=[0], q_starts=[0],
                  q_counts=[1], kv_starts=kw["kv_starts"][:1], kv_lengths=kw["kv_lengths"][:1])  # fmt: skip
    by_itself = alone.step(**single).numpy()
    assert np.array_equal(together[0], by_itself[0])


def test_a_step_is_one_upload_one_submit_and_one_read(gpu):
    """A warm batch-1 step: the step block written once, no pipeline or buffer made,
    one submit and one read for the greedy token (argmax on the device)."""
    dev = Run(gpu.name, "gpt2", 64)
    device = gpu.device

    def kw(p):
        return dict(
            tokens=[p % VOCAB], positions=[p], cache_rows=[p], logit_rows=[0],
            q_starts=[0], q_counts=[1], kv_starts=[0], kv_lengths=[p + 1],
        )  # fmt: skip

    for p in range(3):
        dev.step(**kw(p)).argmax(axis=-1).numpy()
    before = device.stats()
    token = dev.step(**kw(3)).argmax(axis=-1).numpy()
    after = device.stats()
    delta = {k: after[k] - before[k] for k in after if k != "pooled_bytes"}
    assert token.shape == (1,)
    assert delta["uploads"] == 1, delta
    assert delta["submits"] == 1, delta
    assert delta["reads"] == 1, delta
    assert delta["pipelines"] == 0, delta
    assert delta["bind_groups"] <= 2, delta  # the logits and argmax buffers (pooled)
    assert delta["dispatches"] <= 8 + 9 * 2 + 1, delta


def test_bad_steps_are_refused_typed(gpu):
    dev = Run(gpu.name, "gpt2", 16)
    good = dict(
        tokens=[1], positions=[0], cache_rows=[0], logit_rows=[0], q_starts=[0],
        q_counts=[1], kv_starts=[0], kv_lengths=[1],
    )  # fmt: skip
    for change, text in [
        ({"tokens": [VOCAB]}, "outside the vocabulary"),
        ({"positions": [CONTEXT]}, "positions"),
        ({"cache_rows": [16]}, "cache row 16"),
        ({"logit_rows": [1]}, "logits of row 1"),
        ({"kv_starts": [10], "kv_lengths": [7]}, "exceed"),
        ({"q_counts": [2], "kv_lengths": [2]}, "does not fit"),
    ]:
        with pytest.raises(rt.KernelError, match=text):
            dev.step(**(good | change))
    paged = dict(good, page_table=np.array([[9]]), page_size=4)
    paged.pop("kv_starts")
    with pytest.raises(rt.KernelError, match="out of range for a pool of 4 pages"):
        dev.step(**paged)
    assert dev.step(**good).shape == (1, VOCAB)


def test_other_weight_formats_are_refused_so_the_model_decodes_op_by_op(gpu):
    spec = make_spec(gpu.name, "gpt2", layers=1)
    codes = rt.tensor(np.zeros((VOCAB, 34), np.uint8), backend=gpu.name)
    head = DecodeLinear("q8_0", (codes,), (VOCAB, D))
    with pytest.raises(CapabilityMissing, match="q8_0 weights"):
        rt.Decoder(replace(spec, head=head))


@pytest.mark.parametrize("preset", ["gpt2", "llama"])
def test_riftco_nn_generates_the_cpu_tokens_through_the_plan(gpu, preset):
    """riftco-nn's greedy generation (paged cache, ragged prompts, then batched single
    tokens through the plan) gives the CPU backend's tokens."""
    nn = pytest.importorskip("riftco.nn")
    from riftco.nn.generation import SamplingConfig, generate
    from riftco.nn.native_decode import decoder_for

    extra = {"kv_heads": 2} if preset == "llama" else {}
    tokens = {}
    for name in ("cpu", gpu.name):
        config = nn.TransformerConfig.preset(
            preset, vocab_size=97, d_model=64, n_heads=4, n_layers=2, context_length=128, **extra
        )
        model = nn.DecoderOnlyTransformer(config, seed=0, backend=name)
        assert decoder_for(model) is not None
        done = generate(
            model, [[1, 2, 3], [4, 5]], SamplingConfig(max_new_tokens=32, temperature=0.0)
        )
        tokens[name] = [r.tokens for r in done]
    assert tokens[gpu.name] == tokens["cpu"]


def test_the_ops_decode_path_offers_no_decode_step(gpu):
    """RIFTCO_WGPU_DECODE=ops (decode_path) leaves decoding to riftco-nn's op-by-op
    forward; ``plan`` offers the whole-step decoder."""
    assert gpu.decode_path == "plan" and rt.Decoder.available(gpu)
    try:
        gpu.decode_path = "ops"
        assert not rt.Decoder.available(gpu)
        assert "decode_step" not in gpu.capabilities()
    finally:
        gpu.decode_path = "plan"
    assert "decode path plan" in gpu.describe()


def test_unchecked_kernels_decode_the_same_bits(gpu):
    """RIFTCO_WGPU_UNCHECKED=1 compiles every kernel through create_shader_module_trusted
    without wgpu's bounds checks: a decode step gives the same bits."""
    import os
    import subprocess
    import sys

    script = (
        f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "import check_decode as c, riftco.tensor as rt\n"
        f"g = rt.get_backend({gpu.name!r})\n"
        "run = c.Run(g.name, 'llama', 64)\n"
        "kw = next(c._steps_contiguous())\n"
        "print(g.device.unchecked, run.step(**kw).numpy().tobytes().hex())\n"
    )
    env = dict(os.environ, RIFTCO_WGPU_UNCHECKED="1")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    flag, bits = done.stdout.split()
    assert flag == "True" and not gpu.device.unchecked
    here = Run(gpu.name, "llama", 64).step(**next(_steps_contiguous())).numpy()
    assert bits == here.tobytes().hex()
