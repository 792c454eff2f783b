"""LoRA and QLoRA on the ``small`` model (V=512, T=256, D=384, H=6, L=6, FF=1536).

1. Base-weight memory: the bytes of every linear weight as float32 and as packed NF4
   (block 64 with and without double quantization, and other block sizes), and the
   whole model's stored bytes (parameters and buffers) before and after quantizing.
2. Step time (B=8, T=256; forward, backward and AdamW over the trainable parameters)
   of full fine-tuning, LoRA (rank 4 on query and value, float32 base) and QLoRA (the
   same adapters on an NF4 base, paged moments), measured alternately; and the
   one-time cost of quantizing.
3. One-sequence greedy decoding with the key/value cache, float32 base vs NF4 base.

Figures only; nothing is asserted about time.

    python bench/bench_qlora.py [--preset gpt2] [--steps 3] [--decode 32]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import riftco.nn as nn
import riftco.tensor as rt
from riftco.optim import AdamW

B, T = 8, 256
LORA = nn.LoraConfig(rank=4, alpha=8, targets=("attention.query", "attention.value"))


def mib(n: int) -> str:
    return f"{n / 2**20:7.2f} MiB"


def stored_bytes(model: nn.Module) -> int:
    tensors = [p.value for p in model.parameters()] + [b for _, b in model.named_buffers()]
    return sum(t.numpy().nbytes for t in tensors)


def memory(preset: str) -> None:
    config = nn.TransformerConfig.preset(preset, size="small")
    print(f"-- base-weight memory, {preset} small")
    fp32 = nn.DecoderOnlyTransformer(config, seed=0)
    w = nn.weight_memory(fp32)
    total_fp32 = stored_bytes(fp32)
    print(f"linear weights: {w.elements:,} in {w.layers} layers; float32 {mib(w.stored_bytes)}")
    for block, dq in [(64, True), (64, False), (32, True), (128, True), (256, True)]:
        model = nn.DecoderOnlyTransformer(config, seed=0)
        start = time.perf_counter()
        nn.quantize_model(model, block, dq)
        seconds = time.perf_counter() - start
        q = nn.weight_memory(model)
        label = f"NF4 block {block:3d}{' + double quant' if dq else '               '}"
        line = (
            f"{label}: {mib(q.stored_bytes)}  {q.bits_per_weight:5.3f} bits/weight  "
            f"x{q.ratio:4.2f} smaller  (quantized in {seconds:.2f} s)"
        )
        if block == 64 and dq:
            line += (
                f"\n  whole model stored: float32 {mib(total_fp32)} -> {mib(stored_bytes(model))}"
            )
        print(line, flush=True)


def build(config: nn.TransformerConfig, method: str):
    model = nn.DecoderOnlyTransformer(config, seed=0)
    if method == "qlora":
        nn.quantize_model(model)
    if method != "full":
        nn.attach_lora(model, LORA)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = AdamW(params, lr=1e-3, weight_decay=0.0, paged=method == "qlora")
    return model, opt


def step(model, opt, x, y) -> None:
    opt.zero_grad()
    model.loss(x, y).backward()
    opt.step()


def step_times(preset: str, steps: int) -> None:
    config = nn.TransformerConfig.preset(preset, size="small")
    print(f"-- step time, {preset} small, B={B} T={T} ({B * T} tokens/step)")
    toks = np.random.default_rng(0).integers(0, config.vocab_size, (B, T + 1))
    x, y = rt.tensor(toks[:, :-1]), rt.tensor(toks[:, 1:])
    runs = {m: build(config, m) for m in ("full", "lora", "qlora")}
    for model, opt in runs.values():
        step(model, opt, x, y)  # warm up
    times: dict[str, list[float]] = {m: [] for m in runs}
    for _ in range(steps):  # alternate, so drift hits every method alike
        for method, (model, opt) in runs.items():
            start = time.perf_counter()
            step(model, opt, x, y)
            times[method].append(time.perf_counter() - start)
    best = {m: min(t) for m, t in times.items()}
    for method, (model, _) in runs.items():
        trainable = sum(p.size for p in model.parameters() if p.requires_grad)
        print(
            f"{method:6s} {best[method]:6.3f} s/step {B * T / best[method]:7.0f} tok/s  "
            f"trainable {trainable:>10,}  (x{best[method] / best['lora']:.2f} of LoRA)",
            flush=True,
        )


def decode(preset: str, tokens: int) -> None:
    config = nn.TransformerConfig.preset(preset, size="small")
    print(f"-- decode, {preset} small, batch 1, {tokens} new tokens")
    prompt = np.random.default_rng(1).integers(0, config.vocab_size, 16).tolist()
    models = {"float32": nn.DecoderOnlyTransformer(config, seed=0)}
    models["nf4"] = nn.DecoderOnlyTransformer(config, seed=0)
    nn.quantize_model(models["nf4"])
    sampling = nn.SamplingConfig(max_new_tokens=tokens)
    best = {k: float("inf") for k in models}
    for model in models.values():
        nn.generate(model, [prompt], nn.SamplingConfig(max_new_tokens=4))
    for _ in range(2):
        for name, model in models.items():
            start = time.perf_counter()
            nn.generate(model, [prompt], sampling)
            best[name] = min(best[name], time.perf_counter() - start)
    print("  ".join(f"{k} {tokens / v:6.1f} tok/s" for k, v in best.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2", choices=("gpt2", "riftco_v1", "llama"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--decode", type=int, default=32)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {rt.get_num_threads()} kernel threads")
    memory(args.preset)
    step_times(args.preset, args.steps)
    if args.decode:
        decode(args.preset, args.decode)


if __name__ == "__main__":
    main()
