"""Pretraining throughput of riftco.train next to PyTorch eager, on the ``small`` model.

The ``small`` GPT-2-topology configuration (V=512, T=256, D=384, H=6, L=6, FF=1536,
B=8; ``--size tiny``: D=128, H=4, L=2, FF=512 and windows of its context, T=64) pretrains on the embedded default corpus (a byte-level BPE of 507 merges + 5
special tokens = 512 ids, random windows). Each step of ours is a full engine step:
batch, forward, loss, backward, global-norm clipping, AdamW update and the metric.
PyTorch eager runs the same model, the same batches, AdamW with the same groups and
clipping, at the same thread count; with ``--compile`` its model goes through
``torch.compile`` (inductor's default mode; its compile happens in the untimed warmup
steps, so give it ``--warmup`` of at least 2). The two alternate in rounds within one run (this
machine's speed drifts); the figures are the medians of the per-step tokens/s and
their ratio. Figures only; nothing is asserted about time.

    python bench/bench_train.py [--rounds 3] [--steps 4] [--threads N] [--warmup 2]
                                [--precision f32|bf16] [--compile] [--size small|tiny]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

import riftco.nn as nn
import riftco.tensor as rt
from riftco.optim import AdamW, WarmupCosineSchedule, weight_decay_groups
from riftco.train.batches import RandomWindows
from riftco.train.corpus import load_text, split_corpus
from riftco.train.engine import Trainer
from riftco.train.tokens import encode_documents, fit_tokenizer, token_stream

try:
    import torch
except ImportError:  # the comparison is optional
    torch = None

B = 8
LR, WEIGHT_DECAY, CLIP = 3e-4, 0.1, 1.0


def data() -> tuple[np.ndarray, int]:
    train, _ = split_corpus(load_text())
    tokenizer = fit_tokenizer("bpe", train, vocab_size=512 - 5)
    return token_stream(encode_documents(tokenizer, train)), tokenizer.vocab_size


def ours(
    config: nn.TransformerConfig, stream: np.ndarray, total: int, precision: str = "f32"
) -> Trainer:
    model = nn.DecoderOnlyTransformer(config, seed=0)
    groups = [g for g in weight_decay_groups(model.named_parameters(), WEIGHT_DECAY) if g["params"]]
    optimizer = AdamW(groups, lr=LR, betas=(0.9, 0.95), max_grad_norm=CLIP)
    schedule = WarmupCosineSchedule(LR, min(10, total), total)
    source = RandomWindows(stream, min(256, config.context_length), B, seed=0)
    return Trainer(
        model,
        optimizer,
        schedule,
        source,
        stage="pretraining",
        total_steps=total,
        precision=precision,
    )


def torch_model(config: nn.TransformerConfig):
    d, h = config.d_model, config.n_heads

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc, self.out = torch.nn.Linear(d, config.d_ff), torch.nn.Linear(config.d_ff, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            gelu = torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh")
            return x + self.out(gelu)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = torch.nn.Embedding(config.vocab_size, d)
            self.wpe = torch.nn.Embedding(config.context_length, d)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(config.n_layers))
            self.ln_f = torch.nn.LayerNorm(d)
            self.head = torch.nn.Linear(d, config.vocab_size, bias=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    torch.manual_seed(0)
    return Model()


class TorchRun:
    """The same loop in PyTorch eager: batch, forward, loss, backward, clip, AdamW."""

    def __init__(
        self, config: nn.TransformerConfig, stream: np.ndarray, total: int, compile: bool = False
    ) -> None:
        torch.set_num_threads(rt.get_num_threads())
        self.model = torch_model(config)
        self.forward = torch.compile(self.model) if compile else self.model
        decay = [
            p
            for n, p in self.model.named_parameters()
            if p.ndim >= 2 and "wte" not in n and "wpe" not in n
        ]
        keep = [
            p
            for n, p in self.model.named_parameters()
            if not (p.ndim >= 2 and "wte" not in n and "wpe" not in n)
        ]
        groups = [
            {"params": decay, "weight_decay": WEIGHT_DECAY},
            {"params": keep, "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.95))
        self.source = RandomWindows(stream, min(256, config.context_length), B, seed=0)

    def step(self) -> float:
        start = time.perf_counter()
        batch = self.source.next_batch()
        x, y = torch.from_numpy(batch.inputs), torch.from_numpy(batch.targets)
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.forward(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.optimizer.step()
        loss.item()
        return batch.tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternations of ours and PyTorch")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per round and side")
    parser.add_argument("--threads", type=int, default=None, help="kernel threads (default: all)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    parser.add_argument(
        "--precision",
        choices=("f32", "bf16"),
        default="f32",
        help="ours in float32 or in mixed bf16 (PyTorch stays float32)",
    )
    parser.add_argument(
        "--compile", action="store_true", help="PyTorch's model through torch.compile"
    )
    parser.add_argument("--size", choices=("small", "tiny"), default="small")
    args = parser.parse_args()
    if args.threads:
        rt.set_num_threads(args.threads)
    stream, vocab = data()
    config = nn.TransformerConfig.preset("gpt2", size=args.size, vocab_size=vocab)
    total = args.rounds * args.steps + args.warmup + 1
    trainer = ours(config, stream, total, args.precision)
    theirs = TorchRun(config, stream, total, args.compile) if torch is not None else None
    print(
        f"riftco.train pretraining, {args.size} gpt2 (V={vocab}, "
        f"T={min(256, config.context_length)}, D={config.d_model}, "
        f"H={config.n_heads}, L={config.n_layers}, FF={config.d_ff}, B={B}), "
        f"{rt.get_num_threads()} threads, {platform.machine()}, precision {args.precision}"
    )
    for _ in range(args.warmup):  # first-touch allocations, caches, grown heaps
        trainer.train_step()
        if theirs is not None:
            theirs.step()
    ours_rates, torch_rates = [], []
    for round_index in range(args.rounds):
        rates = [trainer.train_step().tokens_per_second for _ in range(args.steps)]
        ours_rates += rates
        line = f"round {round_index + 1}: riftco {statistics.median(rates):8,.0f} tok/s"
        if theirs is not None:
            rates = [theirs.step() for _ in range(args.steps)]
            torch_rates += rates
            line += f" | torch {statistics.median(rates):8,.0f} tok/s"
        print(line, flush=True)
    mine = statistics.median(ours_rates)
    summary = f"median: riftco {mine:,.0f} tok/s"
    if torch_rates:
        other = statistics.median(torch_rates)
        summary += (
            f", torch {torch.__version__} {'compiled' if args.compile else 'eager'} "
            f"{other:,.0f} tok/s, ratio x{mine / other:.2f}"
        )
    else:
        summary += " (torch not installed: no comparison)"
    print(summary)


if __name__ == "__main__":
    main()
