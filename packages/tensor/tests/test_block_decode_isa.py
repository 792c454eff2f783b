"""The decode step's Q8_0 / Q4_0 linears (tiles of 16 rows at ``avx512-vnni``, the GGUF
rows below it) give the same logits, bit for bit, at every vector level this machine
runs, on 1 and 2 threads, for each sequence alone or in a batch, and without the tiles
(``RIFTCO_CPU_DECODE_LAYOUT=rows``, read when a program is built: a child process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tensor_helpers import reachable

import riftco.tensor as rt

D, H, HKV, DH, V, FF = 64, 4, 2, 16, 50, 96
STEPS = 4
PROMPTS = ([3, 17, 8], [41, 2, 30])


def spec_of(fmt: str) -> rt.DecodeSpec:
    rng = np.random.default_rng(3)
    w = lambda *s: (rng.normal(0, 1, s) / np.sqrt(s[-1])).astype(np.float32)  # noqa: E731
    t = lambda a: None if a is None else rt.tensor(a)  # noqa: E731
    lin = lambda a, b=None: rt.DecodeLinear.of(rt.block_quantize(t(a), fmt), t(b))  # noqa: E731
    norm = lambda: rt.DecodeNorm(t(1 + w(D)), None)  # noqa: E731
    roles = rt.FEED_FORWARDS["swiglu"]
    layers = tuple(
        rt.DecodeLayer(
            {"attention": norm(), "feed_forward": norm()},
            {
                "query": lin(w(H * DH, D), w(H * DH)),
                "key": lin(w(HKV * DH, D)),
                "value": lin(w(HKV * DH, D)),
                "output": lin(w(D, H * DH)),
                **dict(zip(roles, (lin(w(FF, D)), lin(w(FF, D)), lin(w(D, FF))), strict=True)),
            },
            "swiglu",
        )
        for _ in range(2)
    )
    return rt.DecodeSpec(
        heads=H,
        kv_heads=HKV,
        head_dim=DH,
        norm="rms",
        eps=1e-6,
        token_embedding=t(w(V, D) * 8),
        position_embedding=None,
        rope_theta=10000.0,
        window=0,
        layers=layers,
        final_norm=norm(),
        head=lin(w(V, D) * 4),
    )


def run(decoder: rt.Decoder, ids: list[int]) -> np.ndarray:
    cap = len(PROMPTS[0]) + STEPS
    n = len(ids)
    keys = [rt.zeros((n * cap, HKV, DH)) for _ in range(2)]
    values = [rt.zeros((n * cap, HKV, DH)) for _ in range(2)]
    feeds = [[PROMPTS[j] for j in ids]] + [
        [[(7 * s + 5 * j + 1) % V] for j in ids] for s in range(STEPS)
    ]
    lengths = [0] * n
    out = []
    for feed in feeds:
        toks, pos, rows, starts, counts, logit_rows = [], [], [], [], [], []
        for j, f in enumerate(feed):
            starts.append(len(toks))
            counts.append(len(f))
            for i, tok in enumerate(f):
                toks.append(tok)
                pos.append(lengths[j] + i)
                rows.append(j * cap + lengths[j] + i)
            lengths[j] += len(f)
            logit_rows.append(len(toks) - 1)
        step = decoder.step(
            toks,
            pos,
            rows,
            keys,
            values,
            logit_rows=logit_rows,
            q_starts=starts,
            q_counts=counts,
            kv_lengths=lengths,
            kv_starts=[j * cap for j in range(n)],
        )
        out.append(step.numpy().copy())
    return np.stack(out)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_every_level_and_thread_count_gives_the_same_logits(fmt):
    decoder = rt.Decoder(spec_of(fmt))
    got = {}
    # The layers' attention and norms differ at the portable level by float32 rounding
    # (float32 code paths of their own), so the steps compare from avx2 on; the block
    # products' own bits are compared with the portable loops in the crate.
    for isa in [i for i in reachable() if i != "portable"]:
        rt.set_cpu_isa(isa)
        for threads in (1, 2):
            rt.set_num_threads(threads)
            got[f"{isa}/{threads}"] = run(decoder, [0, 1])
    keys = list(got)
    want = got[keys[0]]
    assert np.isfinite(want).all()
    for k in keys[1:]:
        assert np.array_equal(got[k].view(np.uint32), want.view(np.uint32)), k
    for j in range(len(PROMPTS)):
        alone = run(decoder, [j])[:, 0]
        assert np.array_equal(alone.view(np.uint32), want[:, j].view(np.uint32)), j


def test_the_tiles_give_the_bits_of_the_gguf_rows(tmp_path):
    got = {}
    for layout in ("", "rows"):
        out = tmp_path / f"{layout or 'tiles'}.npz"
        env = {**os.environ, "RIFTCO_CPU_DECODE_LAYOUT": layout}
        subprocess.run([sys.executable, __file__, str(out)], env=env, check=True, timeout=300)
        with np.load(out) as f:
            got[layout] = dict(f)
    for fmt in ("q8_0", "q4_0"):
        a, b = got[""][fmt], got["rows"][fmt]
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), fmt


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    np.savez(sys.argv[1], **{f: run(rt.Decoder(spec_of(f)), [0, 1]) for f in ("q8_0", "q4_0")})
