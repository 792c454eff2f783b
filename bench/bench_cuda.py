"""Training and decode throughput on an NVIDIA GPU: riftco's ``cuda`` backend next
to PyTorch on the same GPU, on GPT-2 124M shapes (V=50257, T=1024, D=768, H=12,
L=12, FF=3072).

- Training tokens/s: a full step (forward, loss, backward, global-norm clipping,
  AdamW) on random tokens, B sequences of T; float32 (TF32 off on the torch side,
  as riftco's matmuls are float32), and bfloat16 (torch autocast; riftco's
  ``precision="bf16"`` where riftco-train has it, else reported as missing).
- Decode tokens/s: batch 1, greedy, a KV cache, after a 1-token prompt.

The two sides alternate in rounds; figures are medians, printed with their ratio.
Nothing asserts on time.

    python bench/bench_cuda.py [--batch 4] [--steps 5] [--rounds 2] [--decode 64] [--compile]
    python bench/bench_cuda.py --estimate [--batch 4]      # no GPU needed
    python bench/bench_cuda.py --micro 10                  # attention and a GEMM, 10 s

``--estimate`` runs one training step's real ops over the counting stand-in device
(riftco.backends.cuda.counting) and prints what it counted and a roofline estimate
at the H200's figures (989 TFLOP/s bfloat16 dense, 67 TFLOP/s float32, 4.8 TB/s):
each launch or product takes the longer of its FLOPs at peak and its bytes at full
bandwidth. It is the design's expected step time, on record before a device run;
it leaves out launch latency and the host's time between launches.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import time

import numpy as np

import riftco.nn as nn
import riftco.tensor as rt
from riftco.optim import AdamW, WarmupCosineSchedule, weight_decay_groups
from riftco.train.batches import RandomWindows
from riftco.train.engine import Trainer

try:
    import torch
except ImportError:  # the comparison is optional
    torch = None

GPT2 = dict(vocab_size=50257, context_length=1024, d_model=768, n_heads=12, n_layers=12, d_ff=3072)
LR, WEIGHT_DECAY, CLIP = 3e-4, 0.1, 1.0


def ours_trainer(config, stream, batch: int, total: int, precision: str) -> Trainer | None:
    kwargs = {}
    if precision != "f32":
        if "precision" not in inspect.signature(Trainer.__init__).parameters:
            return None
        kwargs["precision"] = precision
    model = nn.DecoderOnlyTransformer(config, seed=0, backend="cuda")
    groups = [g for g in weight_decay_groups(model.named_parameters(), WEIGHT_DECAY) if g["params"]]
    optimizer = AdamW(groups, lr=LR, betas=(0.9, 0.95), max_grad_norm=CLIP)
    source = RandomWindows(stream, config.context_length, batch, seed=0)
    return Trainer(
        model,
        optimizer,
        WarmupCosineSchedule(LR, 2, total),
        source,
        stage="pretraining",
        total_steps=total,
        backend="cuda",
        **kwargs,
    )


def torch_model(config):
    d, h = config.d_model, config.n_heads

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc, self.out = torch.nn.Linear(d, config.d_ff), torch.nn.Linear(config.d_ff, d)

        def forward(self, x, cache=None):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
            if cache is not None:
                if cache:
                    k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
                cache[:] = [k, v]
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = torch.nn.Embedding(config.vocab_size, d)
            self.wpe = torch.nn.Embedding(config.context_length, d)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(config.n_layers))
            self.ln_f = torch.nn.LayerNorm(d)
            self.head = torch.nn.Linear(d, config.vocab_size, bias=False)

        def forward(self, idx, caches=None, start=0):
            pos = torch.arange(start, start + idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for i, block in enumerate(self.blocks):
                x = block(x, None if caches is None else caches[i])
            return self.head(self.ln_f(x))

    torch.manual_seed(0)
    return Model().cuda()


class TorchRun:
    def __init__(self, config, stream, batch: int, precision: str, compile_: bool) -> None:
        self.model = torch_model(config)
        self.step_model = torch.compile(self.model) if compile_ else self.model
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=LR, betas=(0.9, 0.95), fused=True
        )
        self.source = RandomWindows(stream, config.context_length, batch, seed=0)
        self.precision = precision

    def step(self) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        batch = self.source.next_batch()
        x = torch.from_numpy(batch.inputs).cuda(non_blocking=True)
        y = torch.from_numpy(batch.targets).cuda(non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            logits = self.step_model(x)
            loss = torch.nn.functional.cross_entropy(
                logits.view(-1, logits.shape[-1]).float(), y.view(-1)
            )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.optimizer.step()
        loss.item()
        return batch.tokens / (time.perf_counter() - start)


def training(args, config, stream, precision: str) -> None:
    total = args.rounds * args.steps + 2
    trainer = ours_trainer(config, stream, args.batch, total + 1, precision)
    runs = {"eager": TorchRun(config, stream, args.batch, precision, False)} if torch else {}
    if torch and args.compile:
        runs["compile"] = TorchRun(config, stream, args.batch, precision, True)
    if trainer is None:
        print(f"riftco {precision}: this riftco-train has no precision option; torch only")
    for _ in range(2):  # warm-up: kernel compiles, pools, autotuning
        if trainer is not None:
            trainer.train_step()
        for run in runs.values():
            run.step()
    rates: dict[str, list[float]] = {"riftco": [], **{k: [] for k in runs}}
    for r in range(args.rounds):
        if trainer is not None:
            rates["riftco"] += [trainer.train_step().tokens_per_second for _ in range(args.steps)]
        for name, run in runs.items():
            rates[name] += [run.step() for _ in range(args.steps)]
        print(
            f"  round {r + 1}: "
            + ", ".join(f"{k} {statistics.median(v):,.0f}" for k, v in rates.items() if v),
            flush=True,
        )
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    line = f"training {precision} B={args.batch} T={config.context_length}: " + ", ".join(
        f"{k} {v:,.0f} tok/s" for k, v in med.items()
    )
    if "riftco" in med and "eager" in med:
        line += f"; riftco / torch eager x{med['riftco'] / med['eager']:.2f}"
    print(line, flush=True)


def decode_ours(config, tokens: int) -> float:
    model = nn.DecoderOnlyTransformer(config, seed=0, backend="cuda").eval()
    cache = nn.ContiguousKVCache(model.config, max_sequences=1, backend=model.backend)
    sid = cache.add_sequence()
    logits = model.forward_incremental([[1]], cache, [sid]).numpy()
    token, start = int(np.argmax(logits[0])), time.perf_counter()
    for _ in range(tokens):
        logits = model.forward_incremental([[token]], cache, [sid]).numpy()
        token = int(np.argmax(logits[0]))
    return tokens / (time.perf_counter() - start)


def decode_torch(config, tokens: int) -> float:
    with torch.no_grad():
        return _decode_torch(torch_model(config).eval(), config, tokens)


def _decode_torch(model, config, tokens: int) -> float:
    caches: list[list] = [[] for _ in range(config.n_layers)]
    idx = torch.tensor([[1]], device="cuda")
    logits = model(idx, caches, 0)
    token = int(logits[0, -1].argmax())
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(tokens):
        logits = model(torch.tensor([[token]], device="cuda"), caches, i + 1)
        token = int(logits[0, -1].argmax())
    return tokens / (time.perf_counter() - start)


def estimate(args) -> None:
    from riftco.backends.cuda.counting import H200, roofline, training_step_counts

    print(
        f"roofline at {H200['bf16_flops'] / 1e12:.0f} TFLOP/s bf16, "
        f"{H200['f32_flops'] / 1e12:.0f} TFLOP/s f32, {H200['bytes'] / 1e12:.1f} TB/s; "
        f"GPT-2 124M, B={args.batch}, T=1024"
    )
    for precision in args.precision.split(","):
        counts = training_step_counts(precision, batch=args.batch)
        r = roofline(counts)
        tokens = args.batch * 1024
        top = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in list(r["by_kind"].items())[:6])
        print(f"{precision}: {counts.summary()}")
        print(
            f"  estimated step {r['seconds'] * 1e3:.1f} ms ({tokens / r['seconds']:,.0f} tok/s); "
            f"compute floor {r['ideal'] * 1e3:.1f} ms, x{r['seconds'] / r['ideal']:.2f} of it; "
            f"{counts.gemm_flops / 1e12:.2f} TFLOP in {counts.gemms} GEMMs"
        )
        if counts.epilogues:
            # cuBLASLt products: each call's bytes include its bias read or bias
            # gradient written (riftco.backends.cuda.counting.CountingDevice.gemm_epilogue).
            fused = ", ".join(f"{k} {v}" for k, v in sorted(counts.epilogues.items()))
            print(f"  GEMMs with fused epilogues: {fused}")
        print(f"  largest (ms): {top}", flush=True)
    __import__("cuda_decode_estimate").print_estimate()  # the decode roofline (no GPU)


def _event_rate(fn, seconds: float, sync, events) -> tuple[float, float]:
    """Calls of ``fn`` per second over about ``seconds``: by the GPU's clock (CUDA events
    recorded around the calls: ``events()`` records one, ``elapsed(a, b)`` gives their
    milliseconds) and by the wall clock (the host's enqueueing included)."""
    record, elapsed = events
    fn()
    sync()
    calls, first, start = 0, record(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    last = record()
    gpu_ms = elapsed(first, last)
    wall = time.perf_counter() - start
    return calls / (gpu_ms / 1e3), calls / wall


def micro(
    seconds: float, name: str = "cuda", shape: tuple[int, int, int, int] = (4, 1024, 12, 64)
) -> None:
    """One GPT-2 layer's attention forward and backward (B=4, T=1024, H=12, Dh=64,
    bfloat16, causal; FlashAttention-2 and the cuBLAS route) and the QKV GEMM (4096 x
    768 -> 2304, bfloat16), riftco and torch alternating in two rounds each; figures
    are calls per second timed by CUDA events (the GPU's time) and by the wall clock."""
    b, t, h, dh = shape
    backend = rt.get_backend(name)
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.normal(size=(b, t, h, dh)).astype(np.float32) for _ in range(4))
    x, w = rng.normal(size=(b * t, h * dh)), rng.normal(size=(3 * h * dh, h * dh)) * 0.02
    Q, K, V = (rt.tensor(a, backend=backend).astype("bfloat16") for a in (q, k, v))
    G = rt.tensor(g, backend=backend)
    X, W = (rt.tensor(a, backend=backend).astype("bfloat16") for a in (x, w))

    def ours_attention():
        # riftco-nn's mixed precision: every product on the tensor cores (API 1.12),
        # FlashAttention-2 where the GPU has bfloat16 mma.sync.
        out, stats = rt.attention_with_stats(Q, K, V, causal=True, compute="bfloat16")
        rt.attention_backward(G, Q, K, V, out, stats, causal=True, compute="bfloat16")

    def ours_cublas_attention():
        was = os.environ.get("RIFTCO_CUDA_FLASH")
        os.environ["RIFTCO_CUDA_FLASH"] = "0"
        try:
            ours_attention()
        finally:
            if was is None:
                del os.environ["RIFTCO_CUDA_FLASH"]
            else:
                os.environ["RIFTCO_CUDA_FLASH"] = was

    def ours_gemm():
        rt.matmul(X, W, transpose_b=True)

    gemm = f"gemm {b * t}x{h * dh}x{3 * h * dh}"
    cases = {
        "attention fwd+bwd": ours_attention,
        "attention fwd+bwd, cuBLAS route": ours_cublas_attention,
        gemm: ours_gemm,
    }
    theirs = {}
    if torch is not None:
        tq, tk, tv = (
            torch.tensor(a, device="cuda").permute(0, 2, 1, 3).to(torch.bfloat16).requires_grad_()
            for a in (q, k, v)
        )
        tg = torch.tensor(g, device="cuda").permute(0, 2, 1, 3).to(torch.bfloat16)
        tx, tw = (torch.tensor(a, device="cuda", dtype=torch.bfloat16) for a in (x, w))

        def torch_attention():
            out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
            out.backward(tg)

        theirs = {
            "attention fwd+bwd": torch_attention,
            "attention fwd+bwd, cuBLAS route": torch_attention,
            gemm: lambda: tx @ tw.T,
        }
    device = backend.device
    ours_events = (device.record_event, lambda a, b: a.elapsed_ms(b))

    def torch_event():
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    torch_events = (torch_event, lambda a, b: (b.synchronize(), a.elapsed_time(b))[1])
    share = seconds / (4 * len(cases))
    for name, ours in cases.items():
        mine, other = [], []
        for _ in range(2):  # alternating sides, the best of two rounds each
            mine.append(_event_rate(ours, share, device.synchronize, ours_events))
            if name in theirs:
                other.append(_event_rate(theirs[name], share, torch.cuda.synchronize, torch_events))
        gpu, wall = max(r[0] for r in mine), max(r[1] for r in mine)
        line = f"micro {name}: riftco {gpu:,.1f}/s on the GPU's clock ({wall:,.1f}/s wall)"
        if other:
            their_gpu, their_wall = max(r[0] for r in other), max(r[1] for r in other)
            line += (
                f", torch {their_gpu:,.1f}/s ({their_wall:,.1f}/s wall), "
                f"x{gpu / their_gpu:.2f} (x{wall / their_wall:.2f} wall)"
            )
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round and side")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--decode", type=int, default=64, help="decoded tokens (0: skip)")
    parser.add_argument("--precision", default="f32,bf16")
    parser.add_argument("--compile", action="store_true", help="also torch.compile")
    parser.add_argument(
        "--estimate", action="store_true", help="count one step on the stand-in; no GPU"
    )
    parser.add_argument(
        "--micro", type=float, default=0, help="seconds of the attention and GEMM microbench"
    )
    args = parser.parse_args()
    if args.micro:
        micro(args.micro)
        return
    if args.estimate:
        estimate(args)
        return
    print(rt.get_backend("cuda").describe())
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    config = nn.TransformerConfig.preset("gpt2", **GPT2)
    stream = np.random.default_rng(0).integers(0, config.vocab_size, 4_000_000)
    for precision in args.precision.split(","):
        training(args, config, stream, precision)
    if args.decode:
        ours = [decode_ours(config, args.decode) for _ in range(2)]
        line = f"decode batch 1, {args.decode} tokens: riftco {max(ours):,.1f} tok/s"
        if torch is not None:
            theirs = [decode_torch(config, args.decode) for _ in range(2)]
            line += f", torch eager {max(theirs):,.1f} tok/s, x{max(ours) / max(theirs):.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
