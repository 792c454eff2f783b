"""Whole-step decoding (``rt.Decoder``, the ``decode_step`` capability) against a float64
numpy forward of the same model, over contiguous and paged caches, on every backend
with the native kernel (the others refuse a Decoder: riftco-nn decodes op by op there);
and the checks that refuse what does not fit."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import riftco.tensor as rt

D, H, HKV, DH, V, CONTEXT = 16, 4, 2, 4, 29, 12


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def rope(x, positions, theta=10000.0):
    half = x.shape[-1] // 2
    freq = theta ** (-np.arange(half) * 2.0 / x.shape[-1])
    ang = positions[:, None, None] * freq
    a, b = x[..., :half], x[..., half:]
    return np.concatenate(
        [a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], -1
    )


class Model:
    """Random weights, the numpy forward of a whole sequence, and the Decoder."""

    def __init__(self, kind: str, seed: int = 0, window: int = 0):
        rng = np.random.default_rng(seed)
        self.kind, self.window = kind, window
        self.w = lambda *s: rng.normal(0, 0.4, s).astype(np.float32)
        w = self.w
        self.emb = w(V, D)
        self.pos = w(CONTEXT, D) if kind == "gelu_tanh" else None
        ff = 24
        self.layers = []
        for _ in range(2):
            layer = dict(
                n1=(1 + w(D), w(D) if kind != "swiglu" else None),
                q=(w(H * DH, D), w(H * DH)),
                k=(w(HKV * DH, D), w(HKV * DH)),
                v=(w(HKV * DH, D), None),
                o=(w(D, H * DH), w(D)),
                n2=(1 + w(D), w(D) if kind != "swiglu" else None),
                ff=[(w(ff, D), w(ff)), (w(ff, D), None), (w(D, ff), w(D))]
                if kind == "swiglu"
                else [(w(ff, D), w(ff)), (w(D, ff), None)],
            )
            self.layers.append(layer)
        self.final = (1 + w(D), w(D) if kind != "swiglu" else None)
        self.head = (w(V, D), None)

    def norm(self, x, nw):
        weight, bias = (np.float64(v) if v is not None else None for v in nw)
        if self.kind == "swiglu":
            y = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
        else:
            c = x - x.mean(-1, keepdims=True)
            y = c / np.sqrt((c**2).mean(-1, keepdims=True) + 1e-5)
        return y * weight + (0 if bias is None else bias)

    def forward(self, tokens):
        """float64 logits of every position of one sequence."""
        t = len(tokens)
        positions = np.arange(t)
        lin = lambda x, p: x @ p[0].T.astype(np.float64) + (0 if p[1] is None else p[1])  # noqa: E731
        x = self.emb[tokens].astype(np.float64)
        if self.pos is not None:
            x = x + self.pos[:t]
        for layer in self.layers:
            h = self.norm(x, layer["n1"])
            q = lin(h, layer["q"]).reshape(t, H, DH)
            k = lin(h, layer["k"]).reshape(t, HKV, DH)
            v = lin(h, layer["v"]).reshape(t, HKV, DH)
            if self.pos is None:
                q, k = rope(q, positions), rope(k, positions)
            k, v = np.repeat(k, H // HKV, 1), np.repeat(v, H // HKV, 1)
            s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(DH)
            i, j = np.indices((t, t))
            hidden = (j > i) | ((j <= i - self.window) if self.window else False)
            s = np.where(hidden, -np.inf, s)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            a = np.einsum("hqk,khd->qhd", p, v).reshape(t, H * DH)
            x = x + lin(a, layer["o"])
            h = self.norm(x, layer["n2"])
            if self.kind == "swiglu":
                g, u = lin(h, layer["ff"][0]), lin(h, layer["ff"][1])
                inner = g / (1 + np.exp(-g)) * u
            else:
                inner = gelu_tanh(lin(h, layer["ff"][0]))
            x = x + lin(inner, layer["ff"][-1])
        return lin(self.norm(x, self.final), self.head)

    def spec(self, backend):
        t = lambda a: None if a is None else rt.tensor(a, backend=backend)  # noqa: E731
        lin = lambda p: rt.DecodeLinear.of(t(p[0]), t(p[1]))  # noqa: E731
        norm = lambda n: rt.DecodeNorm(t(n[0]), t(n[1]))  # noqa: E731
        ff_roles = rt.FEED_FORWARDS[self.kind]
        layers = tuple(
            rt.DecodeLayer(
                {"attention": norm(la["n1"]), "feed_forward": norm(la["n2"])},
                {
                    "query": lin(la["q"]),
                    "key": lin(la["k"]),
                    "value": lin(la["v"]),
                    "output": lin(la["o"]),
                    **{role: lin(p) for role, p in zip(ff_roles, la["ff"], strict=True)},
                },
                self.kind,
            )
            for la in self.layers
        )
        learned = self.pos is not None
        return rt.DecodeSpec(
            heads=H,
            kv_heads=HKV,
            head_dim=DH,
            norm="layer" if learned else "rms",
            eps=1e-5 if learned else 1e-6,
            token_embedding=t(self.emb),
            position_embedding=t(self.pos),
            rope_theta=None if learned else 10000.0,
            window=self.window,
            layers=layers,
            final_norm=norm(self.final),
            head=lin(self.head),
        )

    def decoder(self, backend):
        return rt.Decoder(self.spec(backend))


def native_decoder(model, backend):
    """The model's Decoder, or None (after checking the refusal) without the kernel."""
    if rt.Decoder.available(backend):
        return model.decoder(backend)
    with pytest.raises(rt.CapabilityMissing, match="does not implement 'decode_step'"):
        model.decoder(backend)
    return None


def cache(rows, backend):
    return [rt.zeros((rows, HKV, DH), backend=backend) for _ in range(2)]


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize(
    "kind, window", [("gelu_tanh", 0), ("swiglu", 0), ("swiglu", 3)], ids=["gpt", "llama", "window"]
)
def test_decoding_token_by_token_matches_the_full_forward(backend, kind, window, paged):
    model = Model(kind, seed=1, window=window)
    decoder = native_decoder(model, backend)
    if decoder is None:
        return
    seqs = [[3, 7, 1, 8, 2, 9, 4], [5, 5, 0, 28, 11]]
    want = [model.forward(s) for s in seqs]
    page = 4
    keys, values = cache(32, backend), cache(32, backend)
    # Sequence 0 owns rows 0.. (pages 0, 1); sequence 1 rows 16.. (pages 5, 4).
    tables = np.array([[0, 1, 2, 3], [5, 4, 6, 7]])
    for p in range(max(map(len, seqs))):
        live = [j for j, s in enumerate(seqs) if p < len(s)]
        rows = [tables[j][p // page] * page + p % page if paged else 16 * j + p for j in live]
        logits = decoder.step(
            [seqs[j][p] for j in live],
            [p] * len(live),
            rows,
            keys,
            values,
            logit_rows=range(len(live)),
            q_starts=range(len(live)),
            q_counts=[1] * len(live),
            kv_lengths=[p + 1] * len(live),
            kv_starts=None if paged else [16 * j for j in live],
            page_table=tables[live] if paged else None,
            page_size=page if paged else 0,
        ).numpy()
        for r, j in enumerate(live):
            np.testing.assert_allclose(logits[r], want[j][p], rtol=2e-5, atol=2e-5)


def test_a_step_of_several_tokens_returns_the_rows_asked_for(backend):
    model = Model("gelu_tanh", seed=2)
    decoder = native_decoder(model, backend)
    if decoder is None:
        return
    keys, values = cache(16, backend), cache(16, backend)
    tokens = [4, 1, 20, 6]
    logits = decoder.step(
        tokens, range(4), range(4), keys, values, logit_rows=[3, 1],
        q_starts=[0], q_counts=[4], kv_lengths=[4], kv_starts=[0],
    ).numpy()  # fmt: skip
    want = model.forward(tokens)
    np.testing.assert_allclose(logits, want[[3, 1]], rtol=2e-5, atol=2e-5)
    assert keys[0].version > 0 and values[1].version > 0  # written in place


def _steps(decoder, tokens, backend):
    keys, values = cache(16, backend), cache(16, backend)
    return decoder.step(
        tokens, range(len(tokens)), range(len(tokens)), keys, values,
        logit_rows=range(len(tokens)), q_starts=[0], q_counts=[len(tokens)],
        kv_lengths=[len(tokens)], kv_starts=[0],
    ).numpy()  # fmt: skip


def _as_f16(spec):
    """``spec`` with every layer linear's weight in the F16 block layout."""
    from dataclasses import replace

    from riftco.tensor.ops.blockquant import BlockWeight, quantize_block_array

    def f16(lin):
        w = lin.arrays[0]
        data = rt.tensor(quantize_block_array(w.numpy(), "f16"), backend=w.backend)
        return rt.DecodeLinear.of(BlockWeight("f16", w.shape, data), lin.bias)

    layers = tuple(
        replace(la, linears={role: f16(lin) for role, lin in la.linears.items()})
        for la in spec.layers
    )
    return replace(spec, layers=layers)


@pytest.mark.parametrize("weights", ["f32", "f16"])
def test_cpu_tiled_weights_give_the_row_layouts_bits(monkeypatch, weights):
    """The CPU program's tiled copies of its float32 and F16 weights (the default) and
    the model's own row-major arrays (RIFTCO_CPU_DECODE_LAYOUT=rows) give the same bits."""
    cpu = rt.get_backend("cpu")
    spec = Model("swiglu", seed=4).spec(cpu)
    if weights == "f16":
        spec = _as_f16(spec)
    tokens = [3, 9, 1, 27, 5]
    tiled = _steps(rt.Decoder(spec), tokens, cpu)
    monkeypatch.setenv("RIFTCO_CPU_DECODE_LAYOUT", "rows")
    rows = _steps(rt.Decoder(spec), tokens, cpu)
    assert tiled.view(np.uint32).tolist() == rows.view(np.uint32).tolist()


def test_writing_a_weight_in_place_reaches_the_next_step(backend):
    """A program may hold its own copy of a weight (the CPU's tiles, a device upload):
    an in-place write (the tensor's version moves) is seen by the next step."""
    if not rt.Decoder.available(backend):
        return
    spec = Model("gelu_tanh", seed=5).spec(backend)
    decoder = rt.Decoder(spec)
    tokens = [2, 8, 4]
    before = _steps(decoder, tokens, backend)
    query = spec.layers[0].linears["query"].arrays[0]
    query.assign_(query * 3.0)
    after = _steps(decoder, tokens, backend)
    fresh = _steps(rt.Decoder(spec), tokens, backend)
    assert not np.array_equal(before, after)
    np.testing.assert_array_equal(after, fresh)


def test_bad_steps_and_models_are_refused_with_what_was_found():
    model = Model("swiglu")
    decoder = model.decoder("cpu")
    keys, values = cache(8, "cpu"), cache(8, "cpu")

    def step(**kw):
        args = dict(
            tokens=[1], positions=[0], cache_rows=[0], keys=keys, values=values,
            logit_rows=[0], q_starts=[0], q_counts=[1], kv_lengths=[1], kv_starts=[0],
        )  # fmt: skip
        args.update(kw)
        return decoder.step(**args)

    with pytest.raises(rt.KernelError, match="token 29 .* outside the vocabulary of 29"):
        step(tokens=[29])
    with pytest.raises(rt.KernelError, match="cache row 8 is outside"):
        step(cache_rows=[8])
    with pytest.raises(rt.KernelError, match="logits of row 1"):
        step(logit_rows=[1])
    with pytest.raises(rt.ShapeError, match="1 tokens, 2 positions"):
        step(positions=[0, 1])
    with pytest.raises(rt.ShapeError, match="key and 2 value caches for 2 layers"):
        step(keys=keys[:1])
    with pytest.raises(rt.ShapeError, match=r"caches must be \[rows, 2, 4\]"):
        step(keys=[rt.zeros((8, 4, 4))] * 2, values=[rt.zeros((8, 4, 4))] * 2)
    with pytest.raises(rt.ShapeError, match="needs kv_starts"):
        step(kv_starts=None)
    layer = model.decoder("cpu").spec.layers[0]
    assert layer.linears["query"].shape == (H * DH, D)
    spec = model.spec("cpu")
    zeros = lambda *s: rt.DecodeLinear.of(rt.zeros(s))  # noqa: E731
    bad = rt.DecodeLayer(
        {"attention": rt.DecodeNorm(), "feed_forward": rt.DecodeNorm()},
        {"query": zeros(16, 16), "key": zeros(16, 16), "value": zeros(8, 16),
         "output": zeros(16, 16), "gate": zeros(8, 16), "up": zeros(8, 16),
         "down": zeros(16, 8)},
        "swiglu",
    )  # fmt: skip
    with pytest.raises(rt.ShapeError, match=r"layers\[0\].key must be \[8, 16\], found \[16, 16\]"):
        rt.Decoder(replace(spec, layers=(bad,)))
    with pytest.raises(rt.ShapeError, match="exactly one of position_embedding"):
        rt.Decoder(replace(spec, layers=(), rope_theta=None))
    first = spec.layers[0]
    no_output = {k: v for k, v in first.linears.items() if k != "output"}
    with pytest.raises(rt.ShapeError, match=r"layers\[0\] has no output"):
        rt.Decoder(replace(spec, layers=(replace(first, linears=no_output),)))


def test_a_part_the_native_step_does_not_decode_is_refused_typed():
    spec = Model("swiglu").spec("cpu")
    query_norm = rt.DecodeNorm(rt.ones(DH))
    layers = tuple(replace(la, norms={**la.norms, "query": query_norm}) for la in spec.layers)
    with pytest.raises(rt.CapabilityMissing, match="norm role 'query'"):
        rt.Decoder(replace(spec, layers=layers))
    with pytest.raises(rt.CapabilityMissing, match="topology flag 'parallel_blocks'"):
        rt.Decoder(replace(spec, topology={"parallel_blocks": True}))


def test_undecodable_names_what_a_plugin_decoder_lacks():
    spec = Model("swiglu").spec("cpu")
    everything = dict(
        norms=rt.NORM_ROLES,
        linears=(*rt.ATTENTION_ROLES, *rt.FEED_FORWARDS["swiglu"]),
        feed_forwards=tuple(rt.FEED_FORWARDS),
    )
    assert rt.undecodable(spec, **everything) == []
    assert rt.undecodable(spec, **everything, formats=("f32",)) == []
    assert rt.undecodable(spec, **everything, formats=("q8_0",)) == ["f32 weights"]
    per_kind = {"gelu": ("query", "key", "value", "output", "expand", "project")}
    # A kind the mapping does not name has no linear role it may use.
    lacking = rt.undecodable(spec, **{**everything, "linears": per_kind, "feed_forwards": ["gelu"]})
    roles = sorted(f"linear role {r!r}" for r in spec.layers[0].linears)
    assert lacking == ["feed-forward 'swiglu'", *roles]
    per_kind["swiglu"] = ("query", "key", "value", "output", "gate", "up")
    lacking = rt.undecodable(spec, **{**everything, "linears": per_kind})
    assert lacking == ["linear role 'down'"]
    flagged = replace(spec, topology={"parallel_blocks": True})
    assert rt.undecodable(flagged, **everything) == ["topology flag 'parallel_blocks'"]
    assert rt.undecodable(flagged, **everything, topology={"parallel_blocks"}) == []


def test_a_backend_without_the_capability_is_told_so():
    from plugins_for_tests import Partial

    assert not rt.Decoder.available(Partial())
    assert rt.Decoder.available(rt.get_backend("cpu"))
