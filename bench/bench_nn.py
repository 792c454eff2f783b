"""riftco.nn speed: training and decoding of the ``small`` model, and attention alone.

1. Forward + backward of the ``small`` configuration (V=512, T=256, D=384, H=6,
   L=6, FF=1536, B=8) for each topology preset: seconds per step and tokens/s.
2. One-sequence greedy decoding with the key/value cache: tokens/s.
3. Causal attention alone (B=2, H=6, Dh=64) at T = 256, 512, 1024, 2048:
   forward + backward time and peak memory (tracemalloc: the arrays numpy
   allocates, which include every kernel output and saved statistic) of the
   materialized and Flash kernels.

Each figure sits next to PyTorch eager CPU on the same shapes and thread count
when ``torch`` is importable (measured alternately in the same run). Figures
only; nothing is asserted about time.

    python bench/bench_nn.py [--steps 3] [--decode 64] [--skip-model] [--skip-attention]
"""

from __future__ import annotations

import argparse
import platform
import time
import tracemalloc

import numpy as np

import riftco.nn as nn
import riftco.tensor as rt

try:
    import torch
except ImportError:  # the comparison is optional
    torch = None

B, T = 8, 256


def best_of(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def train_step(model, x, y):
    model.zero_grad()
    model.loss(x, y).backward()


def bench_model(preset: str, steps: int, decode: int) -> None:
    config = nn.TransformerConfig.preset(preset, size="small")
    model = nn.DecoderOnlyTransformer(config, seed=0)
    rng = np.random.default_rng(0)
    toks = rng.integers(0, config.vocab_size, (B, T + 1))
    x, y = rt.tensor(toks[:, :-1]), rt.tensor(toks[:, 1:])
    train_step(model, x, y)
    ours = best_of(lambda: train_step(model, x, y), steps)
    line = (
        f"{preset:10s} {model.num_parameters() / 1e6:5.1f}M  train {ours:6.3f} s/step "
        f"{B * T / ours:7.0f} tok/s"
    )
    # The PyTorch model is the GPT topology: compared for the GPT presets only.
    gpt = torch is not None and config.family == "gpt"
    theirs = torch_train(config, toks, steps) if gpt else None
    if theirs:
        line += f" | torch {theirs:6.3f} s/step {B * T / theirs:7.0f} tok/s (x{theirs / ours:.2f})"
    print(line, flush=True)
    prompt = rng.integers(0, config.vocab_size, 16).tolist()
    sampling = nn.SamplingConfig(max_new_tokens=decode)
    nn.generate(model, [prompt], nn.SamplingConfig(max_new_tokens=4))
    seconds = best_of(lambda: nn.generate(model, [prompt], sampling), 2)
    line = f"{'':10s} decode {decode / seconds:7.1f} tok/s (batch 1, KV cache)"
    if gpt:
        line += f" | torch {torch_decode(config, prompt, decode):7.1f} tok/s"
    print(line, flush=True)


def attention_once(method, q, k, v, g):
    out, stats = rt.attention_with_stats(q, k, v, method=method)
    return rt.attention_backward(g, q, k, v, out, stats, method=method)


def bench_attention(lengths, repeat: int) -> None:
    h, dh, batch = 6, 64, 2
    print(f"\nattention fwd+bwd, B={batch} H={h} Dh={dh}, causal", flush=True)
    peaks = {}
    for t in lengths:
        rng = np.random.default_rng(t)
        arrays = [rng.standard_normal((batch, t, h, dh)).astype(np.float32) for _ in range(4)]
        q, k, v, g = (rt.tensor(a) for a in arrays)
        cells = []
        for method in ("materialized", "flash"):
            attention_once(method, q, k, v, g)
            operands = (q, k, v, g)
            seconds = best_of(lambda m=method, o=operands: attention_once(m, *o), repeat)
            tracemalloc.start()
            attention_once(method, q, k, v, g)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            peaks[method, t] = peak
            cells.append(f"{method} {seconds * 1e3:8.1f} ms {peak / 2**20:7.1f} MiB")
        line = f"T={t:5d}  " + "  ".join(cells)
        if torch:
            line += f" | torch sdpa {torch_attention(arrays, repeat) * 1e3:8.1f} ms"
        print(line, flush=True)
    last = lengths[-1]
    ratio = peaks["flash", last] / peaks["materialized", last]
    print(f"flash / materialized peak at T={last}: {ratio:.3f}", flush=True)


# -- PyTorch eager, the same shapes --------------------------------------------------
def torch_model(config):
    d, hds = config.d_model, config.n_heads
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc, self.out = torch.nn.Linear(d, config.d_ff), torch.nn.Linear(config.d_ff, d)

        def forward(self, x, past=None):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, hds, d // hds).permute(2, 0, 3, 1, 4)
            if past is not None:
                k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=past is None)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.out(
                torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh")
            ), (k, v)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(config.vocab_size, d)
            self.wpe = torch.nn.Embedding(config.context_length, d)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(config.n_layers))
            self.ln, self.head = (
                torch.nn.LayerNorm(d),
                torch.nn.Linear(d, config.vocab_size, bias=False),
            )

        def forward(self, idx, cache=None, start=0):
            x = self.wte(idx) + self.wpe(torch.arange(start, start + idx.shape[1]))
            new = []
            for i, blk in enumerate(self.blocks):
                x, kv = blk(x, None if cache is None else cache[i])
                new.append(kv)
            return self.head(self.ln(x)), new

    return Model()


def torch_train(config, toks, steps):
    torch.set_num_threads(rt.get_num_threads())
    model = torch_model(config)
    x, y = torch.tensor(toks[:, :-1]), torch.tensor(toks[:, 1:])

    def step():
        model.zero_grad()
        logits, _ = model(x)
        torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
        ).backward()

    step()
    return best_of(step, steps)


def torch_decode(config, prompt, n):
    model = torch_model(config)

    def run():
        with torch.no_grad():
            idx = torch.tensor([prompt])
            logits, cache = model(idx)
            for i in range(n):
                tok = logits[:, -1].argmax(-1, keepdim=True)
                logits, cache = model(tok, [c for c in cache], start=len(prompt) + i)

    run()
    return n / best_of(run, 2)


def torch_attention(arrays, repeat):
    q, k, v, g = (torch.tensor(a).transpose(1, 2).contiguous() for a in arrays)
    for t in (q, k, v):
        t.requires_grad_(True)

    def run():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(g)

    run()
    return best_of(run, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--decode", type=int, default=64)
    parser.add_argument("--presets", default="gpt2,riftco_v1,llama")
    parser.add_argument("--lengths", default="256,512,1024,2048")
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--skip-attention", action="store_true")
    args = parser.parse_args()
    print(
        f"riftco.nn bench on {platform.machine()}, {rt.get_num_threads()} kernel threads; "
        f"torch {'absent' if torch is None else torch.__version__}",
        flush=True,
    )
    if not args.skip_model:
        print(f"small: V=512 T={T} D=384 H=6 L=6 FF=1536 B={B}", flush=True)
        for preset in args.presets.split(","):
            bench_model(preset, args.steps, args.decode)
    if not args.skip_attention:
        bench_attention([int(x) for x in args.lengths.split(",")], max(1, args.steps - 1))


if __name__ == "__main__":
    main()
