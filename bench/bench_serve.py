"""Benchmark riftco-serve: single-stream decode and concurrent streaming clients.

1. Single-stream decode tokens/s: a GPT-2-topology model (random weights) decodes
   greedily over the paged key/value cache, after a prompt prefilled in one
   forward. Where torch is importable, the same weights run in PyTorch eager with
   a key/value cache (the usual past-keys/values loop) on the same threads, and
   the ratio is printed (the design's target is at least 2x).
2. Aggregate tokens/s of 1, 4 and 16 concurrent streaming clients: a `riftco serve`
   process on a free loopback port serves the model from a .rift bundle; each
   client streams completions; tokens are counted from the usage chunk (the
   target is 16 streams at least 4x one stream). With llama.cpp built in the cache
   folder (``bench/bench_decode.py --build-peer``), ``llama-server --parallel N`` serves
   the same model (exported to GGUF, float32) beside it, the two measured in
   alternating rounds (``--rounds``; medians), with the ratio per client count. One
   stream is also compared with the same request run in-process by ``nn.generate``
   (what ``riftco generate`` does: prefill, then ``--max-tokens`` sampled tokens).

3. With ``--json-mask``: the throughput cost of structured output's token mask. The
   same model, prompt, seeds and batch decode ``--max-tokens`` sampled tokens per
   sequence through riftco-nn's ``generate``, unconstrained and constrained by
   riftco-text's JSON grammar in alternating rounds; tokens/s of each (medians), the
   ratio and the mask's time per token (the grammar's masks are cached per automaton
   state: the first round of a fresh grammar is printed apart, as "cold"). The default
   schema is an object holding a list of at least 10,000 short strings, so that no
   constrained document ends before ``--max-tokens`` and both runs decode the same
   number of tokens; ``--schema FILE`` takes another (a document that ends early makes
   the ratio compare different batch sizes, and says so). The aim is a cost under 10%.

Prints figures only; nothing here asserts on time.

    python bench/bench_serve.py [--layers 8] [--d-model 512] [--decode-tokens 128]
                                [--clients 1 4 16] [--max-tokens 64] [--skip-server]
                                [--rounds 3] [--no-peer] [--peer-dir DIR]
    python bench/bench_serve.py --json-mask [--batch 4] [--max-tokens 64] [--schema FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pydoc_data.topics
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

import riftco.nn as nn
import riftco.tensor as rt
from riftco.serve import PagedKVCachePool
from riftco.text import BpeTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llamacpp_peer as peer


def build(args):
    text = "".join(pydoc_data.topics.topics.values())[: args.corpus_bytes]
    tokenizer = BpeTokenizer.train(text, vocab_size=args.vocab, pretokenize="gpt2")
    config = nn.TransformerConfig.preset(
        "gpt2",
        vocab_size=tokenizer.vocab_size,
        context_length=args.context,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        d_ff=4 * args.d_model,
    )
    model = nn.DecoderOnlyTransformer(config, seed=0).eval()
    return model, tokenizer


def riftco_decode(model, prompt, steps):
    warm = PagedKVCachePool(model.config, pages=64, page_size=16)
    wid = warm.add_sequence()
    for token in prompt[:16]:  # warm the kernels and threads up, as the servers are
        model.forward_incremental([[token]], warm, [wid])
    cache = PagedKVCachePool(model.config, pages=64, page_size=16)
    sid = cache.add_sequence()
    start = time.perf_counter()
    logits = model.forward_incremental([prompt], cache, [sid]).numpy()
    prefill = time.perf_counter() - start
    tokens = [int(np.argmax(logits[0]))]
    start = time.perf_counter()
    for _ in range(steps - 1):
        logits = model.forward_incremental([[tokens[-1]]], cache, [sid]).numpy()
        tokens.append(int(np.argmax(logits[0])))
    return (steps - 1) / (time.perf_counter() - start), prefill, tokens


class TorchGpt2:
    """The same weights in PyTorch eager, decoding with a key/value cache."""

    def __init__(self, model, torch):
        self.torch, c = torch, model.config
        self.w = {k: torch.from_numpy(np.array(v.numpy())) for k, v in model.state_dict().items()}
        self.layers, self.heads, self.eps = c.n_layers, c.n_heads, c.norm_eps
        self.head_dim = c.d_model // c.n_heads

    def _linear(self, x, name):
        return self.torch.nn.functional.linear(
            x, self.w[f"{name}.weight"], self.w.get(f"{name}.bias")
        )

    def _norm(self, x, name):
        w = self.w
        return self.torch.nn.functional.layer_norm(
            x, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"], self.eps
        )

    def step(self, ids, past):
        torch, F = self.torch, self.torch.nn.functional
        start = 0 if past is None else past[0][0].shape[1]
        n = ids.shape[0]
        x = (
            self.w["token_embedding.weight"][ids]
            + self.w["position_embedding.weight"][start : start + n]
        )
        new_past = []
        for i in range(self.layers):
            p = f"blocks.{i}"
            h = self._norm(x, f"{p}.attention_norm")
            q, k, v = (
                self._linear(h, f"{p}.attention.{s}")
                .view(n, self.heads, self.head_dim)
                .transpose(0, 1)
                for s in ("query", "key", "value")
            )
            if past is not None:
                k = torch.cat([past[i][0], k], dim=1)
                v = torch.cat([past[i][1], v], dim=1)
            new_past.append((k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=past is None and n > 1)
            x = x + self._linear(a.transpose(0, 1).reshape(n, -1), f"{p}.attention.output")
            h = self._norm(x, f"{p}.feed_forward_norm")
            h = F.gelu(self._linear(h, f"{p}.feed_forward.expand"), approximate="tanh")
            x = x + self._linear(h, f"{p}.feed_forward.project")
        x = self._norm(x[-1:], "final_norm")
        return self._linear(x, "language_model_head")[0], new_past


def torch_decode(model, prompt, steps, torch):
    gpt = TorchGpt2(model, torch)
    with torch.inference_mode():
        logits, past = gpt.step(torch.tensor(prompt), None)
        tokens = [int(torch.argmax(logits))]
        start = time.perf_counter()
        for _ in range(steps - 1):
            logits, past = gpt.step(torch.tensor([tokens[-1]]), past)
            tokens.append(int(torch.argmax(logits)))
        return (steps - 1) / (time.perf_counter() - start), tokens


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(bundle, args):
    port = free_port()
    code = "import sys; from riftco.serve.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", code, str(bundle), "--port", str(port), "--log-level", "warning"]
    cmd += ["--max-running", str(max(args.clients)), "--model-id", "bench"]
    return wait_up(subprocess.Popen(cmd), port)


def wait_up(proc, port):
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not come up")


async def clients(base, count, requests, max_tokens, extra=None):
    """``count`` clients, each streaming ``requests`` completions one after another;
    returns (completion tokens, seconds). ``extra``: more request fields (llama-server's
    ``ignore_eos``, so that both servers produce ``max_tokens`` a request)."""
    import httpx

    async def one(client, i):
        produced = 0
        for r in range(requests):
            body = {
                "model": "bench",
                "prompt": f"Client {i}, request {r}: the",
                "max_tokens": max_tokens,
                "temperature": 0.8,
                "seed": i * 100 + r,
                "stream": True,
                "stream_options": {"include_usage": True},
                **(extra or {}),
            }
            for attempt in range(3):
                try:
                    produced += await stream(client, body)
                    break
                except httpx.RemoteProtocolError:
                    # A keep-alive connection the server closed as the request left:
                    # send it again on a fresh one (counted, and printed at the end).
                    retries.append(attempt)
        return produced

    async def stream(client, body):
        async with client.stream("POST", f"{base}/v1/completions", json=body) as resp:
            resp.raise_for_status()
            async for line in resp.aiter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        return chunk["usage"]["completion_tokens"]
        return 0

    retries: list[int] = []

    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        start = time.perf_counter()
        produced = await asyncio.gather(*(one(client, i) for i in range(count)))
        if retries:
            print(f"  ({len(retries)} request(s) sent again after a closed connection at {base})")
        return sum(produced), time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--corpus-bytes", type=int, default=200_000)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--skip-server", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="alternating server rounds")
    ap.add_argument("--no-peer", action="store_true", help="riftco's figures alone")
    ap.add_argument("--peer-dir", type=Path, default=peer.DEFAULT_CACHE)
    ap.add_argument(
        "--json-mask", action="store_true", help="only the structured-output mask's cost"
    )
    ap.add_argument("--batch", type=int, default=4, help="sequences per step (--json-mask)")
    ap.add_argument("--schema", type=Path, default=None, help="a JSON schema (--json-mask)")
    ap.add_argument("--verbose", action="store_true", help="every round's figures (--json-mask)")
    args = ap.parse_args()

    model, tokenizer = build(args)
    if args.json_mask:
        print(
            f"model: gpt2 topology, {model.num_parameters():,} parameters "
            f"(d_model {args.d_model}, {args.layers} layers, vocab {tokenizer.vocab_size}); "
            f"{rt.get_num_threads()} kernel threads"
        )
        mask_cost(args, model, tokenizer)
        return 0
    threads = rt.get_num_threads()
    print(
        f"model: gpt2 topology, {model.num_parameters():,} parameters "
        f"(d_model {args.d_model}, {args.layers} layers, vocab {tokenizer.vocab_size}); "
        f"{threads} kernel threads"
    )
    prompt = list(np.random.default_rng(0).integers(0, tokenizer.vocab_size, args.prompt_tokens))
    prompt = [int(t) for t in prompt]
    ours, prefill, our_tokens = riftco_decode(model, prompt, args.decode_tokens)
    print(
        f"single-stream decode  riftco paged: {ours:8.1f} tokens/s  (prefill of {len(prompt)}: {prefill * 1000:.1f} ms)"
    )
    try:
        import torch
    except ImportError:
        print("single-stream decode  torch eager : not installed")
    else:
        torch.set_num_threads(threads)
        theirs, their_tokens = torch_decode(model, prompt, args.decode_tokens, torch)
        same = sum(a == b for a, b in zip(our_tokens, their_tokens))
        print(
            f"single-stream decode  torch eager : {theirs:8.1f} tokens/s  "
            f"(riftco/torch {ours / theirs:.2f}x; same greedy tokens: {same}/{len(our_tokens)})"
        )
    if args.skip_server:
        return 0
    serve_rounds(args, model, tokenizer)
    return 0


def mask_cost(args, model, tokenizer) -> None:
    """Unconstrained against JSON-constrained decoding, same everything else."""
    from riftco.text.grammar import TokenGrammar

    schema = (
        {
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {"type": "string", "maxLength": 8},
                    "minItems": 10_000,
                }
            },
            "required": ["items"],
        }
        if args.schema is None
        else json.loads(args.schema.read_text())
    )
    started = time.perf_counter()
    grammar = TokenGrammar.for_tokenizer(schema, tokenizer)
    compiled = time.perf_counter() - started
    prompts = [tokenizer.encode(f"Record {i} as JSON: ") for i in range(args.batch)]
    config = nn.SamplingConfig(
        max_new_tokens=args.max_tokens,
        temperature=0.8,
        seed=1,
        stop_ids=tokenizer.stop_ids(False),
        vocab_limit=tokenizer.vocab_size,
    )

    class Timed:
        """A grammar state whose mask time is counted."""

        spent = 0.0

        def __init__(self, state):
            self.state = state

        def allowed(self):
            start = time.perf_counter()
            mask = self.state.allowed()
            Timed.spent += time.perf_counter() - start
            return mask

        def advance(self, token_id):
            start = time.perf_counter()
            self.state.advance(token_id)
            Timed.spent += time.perf_counter() - start

    def run(constrained: bool) -> tuple[float, int, float]:
        Timed.spent = 0.0
        constraints = [Timed(grammar.start()) for _ in prompts] if constrained else None
        start = time.perf_counter()
        results = nn.generate(model, prompts, config, constraints=constraints)
        seconds = time.perf_counter() - start
        made = sum(len(r.tokens) for r in results)
        return made / seconds, made, Timed.spent

    nn.generate(model, prompts[:1], dataclasses_replace(config, max_new_tokens=4))  # warm up
    cold, cold_made, cold_mask = run(True)
    free_rates, mask_rates, mask_share, counts = [], [], [], set()
    for k in range(args.rounds):
        order = (False, True) if k % 2 == 0 else (True, False)  # ABBA: drift cancels
        measured = {constrained: run(constrained) for constrained in order}
        free_rates.append(measured[False][0])
        rate, made, spent = measured[True]
        mask_rates.append(rate)
        mask_share.append(spent / made)
        counts.add((measured[False][1], made))
        if args.verbose:
            print(f"  round {k}: unconstrained {free_rates[-1]:.1f}, constrained {rate:.1f}")
    free, masked = statistics.median(free_rates), statistics.median(mask_rates)
    paired = statistics.median(m / f for m, f in zip(mask_rates, free_rates))
    kind = "the default list schema" if args.schema is None else f"json_schema {args.schema.name}"
    same = all(a == b for a, b in counts)
    print(
        f"structured output ({kind}; grammar compiled in {compiled * 1000:.1f} ms; "
        f"batch {args.batch}, {args.max_tokens} tokens each, temperature 0.8; "
        f"{args.rounds} rounds, medians)"
    )
    print(
        "  tokens decoded unconstrained / constrained: "
        + ", ".join(f"{a}/{b}" for a, b in sorted(counts))
        + ("" if same else "  (not equal: the ratio compares different batch sizes)")
    )
    step = 1000 / free  # ms per token unconstrained
    print(f"  unconstrained       : {free:8.1f} tokens/s ({step:.3f} ms/token)")
    print(
        f"  constrained (warm)  : {masked:8.1f} tokens/s; constrained/unconstrained "
        f"{masked / free:.3f}x, cost {(1 - masked / free) * 100:.1f}% "
        f"(mask and advance {statistics.median(mask_share) * 1000:.3f} ms/token, "
        f"{statistics.median(mask_share) * 1000 / step * 100:.1f}% of an unconstrained token)"
    )
    print(
        f"  per-round ratio     : median {paired:.3f}x (cost {(1 - paired) * 100:.1f}%), "
        f"rounds from {min(m / f for m, f in zip(mask_rates, free_rates)):.3f}x to "
        f"{max(m / f for m, f in zip(mask_rates, free_rates)):.3f}x"
    )
    print(
        f"  constrained (cold)  : {cold:8.1f} tokens/s ({cold_made} tokens; mask and advance "
        f"{cold_mask / max(cold_made, 1) * 1000:.3f} ms/token, first masks of each state)"
    )


def dataclasses_replace(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


def generate_rate(model, tokenizer, args) -> float:
    """What ``riftco generate`` does for one request of the served shape: the prompt
    prefilled, ``--max-tokens`` sampled at temperature 0.8, end to end (tokens/s)."""
    prompt = tokenizer.encode("Client 0, request 0: the")
    config = nn.SamplingConfig(
        max_new_tokens=args.max_tokens,
        temperature=0.8,
        seed=1,
        stop_ids=tokenizer.stop_ids(False),
        vocab_limit=tokenizer.vocab_size,
    )
    nn.generate(model, [prompt], config)  # warm up
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        made = len(nn.generate(model, [prompt], config)[0].tokens)
        best = max(best, made / (time.perf_counter() - start))
    return best


def serve_rounds(args, model, tokenizer):
    """Both servers up at once, measured in alternating rounds; medians printed."""
    from riftco.interchange import export_gguf_model, save_bundle

    use_peer = not args.no_peer and peer.binary(args.peer_dir, "llama-server") is not None
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "bench.rift"
        save_bundle(bundle, model, tokenizer)
        servers = {"riftco": start_server(bundle, args)}
        try:
            if use_peer:
                gguf = export_gguf_model(model, Path(tmp) / "bench.gguf", tokenizer, "f32")
                port = free_port()
                proc = peer.start_server(
                    args.peer_dir, gguf, port, threads=rt.get_num_threads(),
                    parallel=max(args.clients), context=model.config.context_length,
                )  # fmt: skip
                servers["llama.cpp"] = wait_up(proc, port)
            extra = {"llama.cpp": {"ignore_eos": True}}
            for name, (_, base) in servers.items():
                asyncio.run(clients(base, 1, 1, 8, extra.get(name)))  # warm up
            rates = {name: {c: [] for c in args.clients} for name in servers}
            for _ in range(args.rounds):
                for name, (_, base) in servers.items():
                    for count in args.clients:
                        produced, seconds = asyncio.run(
                            clients(base, count, args.requests, args.max_tokens, extra.get(name))
                        )
                        rates[name][count].append(produced / seconds)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(60)
    median = {n: {c: statistics.median(v) for c, v in r.items()} for n, r in rates.items()}
    ours, first = median["riftco"], args.clients[0]
    for count in args.clients:
        line = (
            f"{count:3d} streaming clients: riftco serve {ours[count]:8.1f} tokens/s aggregate "
            f"({ours[count] / ours[first]:.1f}x {first})"
        )
        if "llama.cpp" in median:
            theirs = median["llama.cpp"][count]
            line += f"; llama-server {theirs:8.1f}; ratio {ours[count] / theirs:.2f}x"
        print(line)
    if 1 in ours:
        alone = generate_rate(model, tokenizer, args)
        print(
            f"one stream served / the same request through nn.generate: {ours[1]:.1f} / "
            f"{alone:.1f} = {ours[1] / alone:.2f}x"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
