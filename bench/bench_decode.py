"""Benchmark batch-1 decode and prefill on the CPU, side by side with llama.cpp.

A GPT-2-topology model (``small`` shapes by default: D=384, L=6, H=6, V=512;
random weights and a BPE tokenizer trained on the embedded corpus) is measured:

- greedy decode of ``--gen`` tokens after a 1-token prompt, float32 weights;
- the same after a ``--prompt``-token context;
- prefill of a ``--prompt``-token prompt (one forward);
- greedy decode with F16, Q8_0 and Q4_0 weights in llama.cpp's block layouts
  (``model.quantize_for_inference``: every matrix, embedding and head included), each
  beside llama.cpp at the same type, and with NF4 weights (``riftco.nn.quantize_model``)
  beside its Q4_0.

With llama.cpp built in the cache folder (``--build-peer`` builds it once from the
vendored source of the ``llama-cpp-python`` sdist; a few minutes of compiling), the
model is exported with ``riftco.interchange.export_gguf_model`` at each type (F32, F16,
Q8_0, Q4_0: by the same rule as ``quantize_for_inference``, the blocks of
``llama-quantize --pure``; llama-quantize's default would give a Q4_0 head Q8_0 or
Q6_K), so each file holds the matrices riftco runs, and ``llama-bench -p P -n N`` runs
alternately with riftco for ``--rounds`` rounds; each figure is the median over
rounds and is printed with its ratio. Without the peer it prints riftco's figures
alone. It also prints the CPU vector path in use (``rt.cpu_isa()``; ``RIFTCO_CPU_ISA``
lowers it), and for each decode row the GB/s of weights the step streamed (the weight
bytes one token reads times tokens/s) beside the machine's read bandwidth at the same
thread count (``bench_stream.py``'s numpy read, measured here once). Serving throughput is ``bench/bench_serve.py``'s. Nothing asserts on time.

    python bench/bench_decode.py [--threads 2] [--rounds 3] [--build-peer]
                                 [--peer-dir ~/.cache/riftco/llamacpp]
                                 [--weights f16,q8_0,q4_0,nf4]
"""

from __future__ import annotations

import argparse
import pydoc_data.topics
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import riftco.nn as nn
import riftco.tensor as rt
from riftco.text import BpeTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llamacpp_peer as peer
from bench_stream import read_bandwidth

#: Bytes per weight element of each type (NF4: 4-bit codes, a block scale per 64
#: with double quantization, about 0.52).
ELEMENT_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "nf4": 0.52}


def build_model(args: argparse.Namespace) -> tuple[nn.DecoderOnlyTransformer, BpeTokenizer]:
    text = "".join(pydoc_data.topics.topics.values())[: args.corpus_bytes]
    tokenizer = BpeTokenizer.train(text, vocab_size=args.vocab, pretokenize="gpt2")
    extra = tokenizer.vocab_size - args.vocab  # the special tokens come on top
    if extra > 0:
        size = args.vocab - extra
        tokenizer = BpeTokenizer.train(text, vocab_size=size, pretokenize="gpt2")
    config = nn.TransformerConfig.preset(
        "gpt2",
        vocab_size=args.vocab,
        context_length=args.context,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        d_ff=4 * args.d_model,
    )
    return nn.DecoderOnlyTransformer(config, seed=0).eval(), tokenizer


def decode(model: nn.DecoderOnlyTransformer, prompt: list[int], steps: int) -> float:
    """Greedy decode tokens/s after prefilling ``prompt``."""
    cache = nn.ContiguousKVCache(model.config, max_sequences=1, backend=model.backend)
    sid = cache.add_sequence()
    logits = model.forward_incremental([prompt], cache, [sid]).numpy()
    token = int(np.argmax(logits[0]))
    start = time.perf_counter()
    for _ in range(steps):
        logits = model.forward_incremental([[token]], cache, [sid]).numpy()
        token = int(np.argmax(logits[0]))
    return steps / (time.perf_counter() - start)


def prefill(model: nn.DecoderOnlyTransformer, prompt: list[int], repeats: int = 5) -> float:
    """Prefill tokens/s of ``prompt`` (best of ``repeats``, each on a fresh cache)."""
    best = float("inf")
    for _ in range(repeats):
        cache = nn.ContiguousKVCache(model.config, max_sequences=1, backend=model.backend)
        sid = cache.add_sequence()
        start = time.perf_counter()
        model.forward_incremental([prompt], cache, [sid]).numpy()
        best = min(best, time.perf_counter() - start)
    return len(prompt) / best


#: Reduced-precision weights: (model key, row key).
WEIGHTS = (("f16", "decode f16"), ("q8_0", "decode q8_0"), ("q4_0", "decode q4_0"))


def riftco_round(models: dict, prompt: list[int], gen: int) -> dict[str, float]:
    f32 = models["f32"]
    figures = {
        "decode f32": decode(f32, prompt[:1], gen),
        "decode f32 after context": decode(f32, prompt, gen),
        "prefill f32": prefill(f32, prompt),
    }
    for kind, key in (*WEIGHTS, ("nf4", "decode nf4")):
        if models.get(kind) is not None:
            figures[key] = decode(models[kind], prompt[:1], gen)
    return figures


def peer_files(args, model, tokenizer, folder: Path) -> dict[str, Path]:
    from riftco.interchange import export_gguf_model

    # The file of each type is the model quantize_for_inference makes (the same rule).
    kinds = ("f32", "f16", "q8_0", "q4_0")
    return {k: export_gguf_model(model, folder / f"model-{k}.gguf", tokenizer, k) for k in kinds}


def peer_round(args, files: dict[str, Path]) -> dict[str, float]:
    p, n, t = args.prompt, args.gen, args.threads
    f32 = peer.bench(args.peer_dir, files["f32"], t, prompt=p, gen=n)
    figures = {"decode f32": f32["decode"], "prefill f32": f32["prefill"]}
    after = peer.bench(args.peer_dir, files["f32"], t, prompt=0, gen=n, depth=p)
    figures["decode f32 after context"] = after["decode"]
    for kind, key in WEIGHTS:
        figures[key] = peer.bench(args.peer_dir, files[kind], t, prompt=0, gen=n)["decode"]
    figures["decode nf4"] = figures["decode q4_0"]  # its nearest type
    return figures


ROWS = (
    ("decode f32", "greedy decode, F32 weights (tok/s)"),
    ("decode f32 after context", "decode after the context (tok/s)"),
    ("prefill f32", "prefill of the prompt, F32 (tok/s)"),
    ("decode f16", "decode, F16 weights (tok/s)"),
    ("decode q8_0", "decode, Q8_0 weights (tok/s)"),
    ("decode q4_0", "decode, Q4_0 weights (tok/s)"),
    ("decode nf4", "decode, our NF4 / its Q4_0 (tok/s)"),
)


def weight_bytes(config, kind: str) -> float:
    """Weight bytes one decode step reads: every layer's matrices and the head (the
    head stays float32 under NF4, as ``quantize_model`` leaves it)."""
    d, ff = config.d_model, config.d_ff
    layers = config.n_layers * (4 * d * d + 2 * d * ff) * ELEMENT_BYTES[kind]
    head = config.vocab_size * d * ELEMENT_BYTES["f32" if kind == "nf4" else kind]
    return layers + head


def report_streaming(ours: list[dict], config, bandwidth: float) -> None:
    print(f"\nweights streamed per decode step (machine read bandwidth {bandwidth:.1f} GB/s)")
    for kind, key in (("f32", "decode f32"), *WEIGHTS, ("nf4", "decode nf4")):
        values = [r[key] for r in ours if key in r]
        if values:
            tok_s = statistics.median(values)
            gbs = weight_bytes(config, kind) * tok_s / 1e9
            print(
                f"  {kind:<5} {weight_bytes(config, kind) / 1e6:7.1f} MB/token  "
                f"{gbs:6.1f} GB/s  {gbs / bandwidth:5.2f}x of the machine's"
            )


def report(ours: list[dict], theirs: list[dict]) -> None:
    def median(rounds: list[dict], key: str) -> float | None:
        values = [r[key] for r in rounds if key in r]
        return statistics.median(values) if values else None

    width = max(len(label) for _, label in ROWS)
    header = f"{'figure':<{width}}  {'riftco':>9}  {'llama.cpp':>9}  {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for key, label in ROWS:
        a, b = median(ours, key), median(theirs, key)
        fa = f"{a:9.0f}" if a is not None else f"{'—':>9}"
        fb = f"{b:9.0f}" if b is not None else f"{'—':>9}"
        ratio = f"{a / b:5.2f}x" if a is not None and b else f"{'—':>6}"
        print(f"{label:<{width}}  {fa}  {fb}  {ratio}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=64, help="context / prefill tokens")
    parser.add_argument("--gen", type=int, default=128, help="decoded tokens per figure")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus-bytes", type=int, default=60_000)
    parser.add_argument(
        "--weights",
        default="f16,q8_0,q4_0,nf4",
        help="reduced-precision rows to measure, comma-separated (default: all)",
    )
    parser.add_argument("--build-peer", action="store_true", help="build llama.cpp if missing")
    parser.add_argument("--no-peer", action="store_true", help="riftco's figures alone")
    parser.add_argument("--peer-dir", type=Path, default=peer.DEFAULT_CACHE)
    args = parser.parse_args()
    rt.set_num_threads(args.threads)
    model, tokenizer = build_model(args)
    models = {"f32": model}
    for kind in filter(None, args.weights.split(",")):
        if kind not in ("f16", "q8_0", "q4_0", "nf4"):
            parser.error(f"--weights: expected f16, q8_0, q4_0 or nf4; found {kind!r}")
        models[kind], _ = build_model(args)
        if kind == "nf4":
            nn.quantize_model(models[kind])
        else:
            models[kind].quantize_for_inference(kind)
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(0, args.vocab, args.prompt)]
    if args.build_peer and not args.no_peer:
        peer.build(args.peer_dir, jobs=args.threads)
    use_peer = not args.no_peer and peer.available(args.peer_dir)
    c = model.config
    print(
        f"GPT-2 topology D={c.d_model} L={c.n_layers} H={c.n_heads} V={c.vocab_size}, "
        f"{model.num_parameters():,} parameters; batch 1; {args.threads} threads; "
        f"prompt {args.prompt}, {args.gen} decoded tokens; {args.rounds} alternating rounds"
    )
    bandwidth = read_bandwidth(args.threads)
    print(
        f"CPU vector path: {rt.cpu_isa()} (detected {rt.cpu_isa_detected()}); "
        f"read bandwidth at {args.threads} threads: {bandwidth:.1f} GB/s (numpy)"
    )
    if not use_peer:
        print(f"llama.cpp: not built in {args.peer_dir} (--build-peer builds it): riftco alone")
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        files = peer_files(args, model, tokenizer, Path(tmp)) if use_peer else {}
        riftco_round(models, prompt, 8)  # warm-up: the pool, malloc, the caches
        for _ in range(args.rounds):
            ours.append(riftco_round(models, prompt, args.gen))
            if use_peer:
                theirs.append(peer_round(args, files))
    report(ours, theirs)
    report_streaming(ours, c, bandwidth)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
