"""Soak riftco serve: 64 mixed clients for N minutes against a tiny served model.

A tiny GPT-2-style model (random weights, a byte-level BPE tokenizer trained on a
small corpus) is saved as a .rift bundle in a temporary folder and served by
``riftco serve`` in a subprocess on a free loopback port. ``--clients`` clients (64)
each loop until the time is up, choosing at random (seeded) among:

- a streamed completion (its time to first token is measured: the first event
  carrying text), a streamed chat completion, a plain completion;
- a bad body (malformed JSON, a wrong type, a wrong content type, an unknown field,
  a body over the size limit);
- a stream the client leaves after its first event (a disconnect mid-stream).

Each client speaks raw HTTP/1.1 from its own loopback address (127.0.4.x), so the
server's per-client limits see 64 clients, not one. Every ``--sample`` seconds the
server's resident memory (VmRSS) and open descriptors are read from /proc.

Reported: requests a second, responses by status, p50/p99 time to first token,
RSS and descriptors over time, and the count of 5xx responses (and of streams that
ended without ``data: [DONE]``). Prints figures only; nothing here asserts. Not part
of ``make test``.

    python bench/bench_soak.py [--minutes 10] [--clients 64] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

CORPUS = (
    "The quick brown fox jumps over the lazy dog. A server answers many clients at once; "
    "each request is admitted, prefilled, decoded and streamed back. Hello, world! "
) * 8
TEXT_EVENT = re.compile(rb'"(?:text|content)":"[^"]')


def build_bundle(folder: Path) -> Path:
    import riftco.nn as nn
    from riftco.interchange import save_bundle
    from riftco.text import BpeTokenizer

    tokenizer = BpeTokenizer.train(CORPUS, vocab_size=320)
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size, context_length=128
    )
    model = nn.DecoderOnlyTransformer(config, seed=3)
    path = folder / "soak.rift"
    save_bundle(path, model, tokenizer)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(bundle: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    code = "import sys; from riftco.serve.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", code, str(bundle), "--port", str(port), "--model-id", "soak"]
    cmd += ["--log-level", "warning", "--max-running", "16", "--max-waiting", "128"]
    cmd += ["--max-body-bytes", "65536", "--threads", "1"]
    with open(log_path, "wb") as log:  # the server keeps its own copy of the descriptor
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not come up")


def request_bytes(path: str, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def completion(rng: random.Random, stream: bool) -> bytes:
    body = {
        "model": "soak",
        "prompt": f"The quick {rng.randrange(1000)} fox",
        "max_tokens": rng.randint(4, 24),
        "temperature": rng.choice([0.0, 0.8]),
        "seed": rng.randrange(1 << 30),
        "stream": stream,
    }
    return request_bytes("/v1/completions", json.dumps(body).encode())


def chat(rng: random.Random) -> bytes:
    body = {
        "model": "soak",
        "messages": [{"role": "user", "content": f"Hello {rng.randrange(1000)}"}],
        "max_tokens": rng.randint(4, 24),
        "stream": True,
    }
    return request_bytes("/v1/chat/completions", json.dumps(body).encode())


def bad_body(rng: random.Random) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:
        return request_bytes("/v1/completions", b'{"model": "soak", "prompt": "x"')
    if kind == 1:
        return request_bytes("/v1/completions", b'{"model": "soak", "prompt": 3.5e400}')
    if kind == 2:
        return request_bytes("/v1/completions", b'{"model": "soak"}', "text/plain")
    if kind == 3:
        return request_bytes("/v1/chat/completions", b'{"model": "soak", "messages": [], "x": 1}')
    return request_bytes("/v1/completions", b'{"prompt": "' + b"a" * 70_000 + b'"}')


class Tally:
    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()
        self.kinds: Counter[str] = Counter()
        self.ttft: list[float] = []
        self.unfinished_streams = 0
        self.failures: Counter[str] = Counter()


async def exchange(
    port: int, source: str, raw: bytes, tally: Tally, kind: str, leave_early: bool = False
) -> None:
    start = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 30
        )
    except (OSError, asyncio.TimeoutError) as exc:
        tally.failures[f"connect: {type(exc).__name__}"] += 1
        return
    try:
        writer.write(raw)
        await writer.drain()
        buffer = b""
        status = None
        first_token = None
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 120)
            if not chunk:
                break
            buffer += chunk
            if status is None and b"\r\n" in buffer:
                status = int(buffer.split(b" ", 2)[1])
                tally.statuses[status] += 1
            if first_token is None and TEXT_EVENT.search(buffer):
                first_token = time.perf_counter() - start
                if leave_early:
                    break
        tally.kinds[kind] += 1
        if kind.startswith("stream") and status == 200:
            if first_token is not None:
                tally.ttft.append(first_token)
            if not leave_early and b"data: [DONE]" not in buffer:
                tally.unfinished_streams += 1
        if status is None:
            tally.failures["no status line"] += 1
    except (OSError, asyncio.TimeoutError, ValueError, IndexError) as exc:
        tally.failures[f"{kind}: {type(exc).__name__}"] += 1
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


async def client(index: int, port: int, until: float, seed: int, tally: Tally) -> None:
    rng = random.Random(seed * 1000 + index)
    source = f"127.0.4.{1 + index % 250}"
    while time.monotonic() < until:
        roll = rng.random()
        if roll < 0.35:
            await exchange(port, source, completion(rng, True), tally, "stream")
        elif roll < 0.50:
            await exchange(port, source, chat(rng), tally, "stream-chat")
        elif roll < 0.70:
            await exchange(port, source, completion(rng, False), tally, "completion")
        elif roll < 0.85:
            await exchange(port, source, bad_body(rng), tally, "bad-body")
        else:
            raw = completion(rng, True)
            await exchange(port, source, raw, tally, "left-mid-stream", leave_early=True)


def read_proc(pid: int) -> tuple[int, int]:
    """(VmRSS in KiB, open descriptors) of ``pid``."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def sampler(pid: int, every: float, stop: threading.Event, out: list) -> None:
    start = time.monotonic()
    while True:
        try:
            rss, fds = read_proc(pid)
        except OSError:
            return
        out.append((time.monotonic() - start, rss, fds))
        if stop.wait(every):
            try:
                rss, fds = read_proc(pid)
                out.append((time.monotonic() - start, rss, fds))
            except OSError:
                pass
            return


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def soak(port: int, args: argparse.Namespace, tally: Tally) -> float:
    until = time.monotonic() + args.minutes * 60
    start = time.perf_counter()
    await asyncio.gather(*(client(i, port, until, args.seed, tally) for i in range(args.clients)))
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between RSS/fd samples")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bundle = build_bundle(folder)
        proc, port = start_server(bundle, folder / "server.log")
        samples: list[tuple[float, int, int]] = []
        stop = threading.Event()
        watcher = threading.Thread(target=sampler, args=(proc.pid, args.sample, stop, samples))
        watcher.start()
        tally = Tally()
        try:
            elapsed = asyncio.run(soak(port, args, tally))
        finally:
            stop.set()
            watcher.join()
            proc.terminate()
            proc.wait(60)
        log_text = (folder / "server.log").read_text(errors="replace")
        log_bytes = len(log_text.encode())
        log_kinds = Counter(re.sub(r"\d+", "N", line)[:100] for line in log_text.splitlines())
    total = sum(tally.statuses.values())
    fivexx = sum(n for s, n in tally.statuses.items() if s >= 500)
    figures = {
        "date": time.strftime("%Y-%m-%d"),
        "minutes": args.minutes,
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "responses": total,
        "requests_per_second": round(total / elapsed, 1),
        "by_kind": dict(tally.kinds),
        "by_status": {str(k): v for k, v in sorted(tally.statuses.items())},
        "ttft_p50_ms": round(1000 * percentile(tally.ttft, 0.50), 1),
        "ttft_p99_ms": round(1000 * percentile(tally.ttft, 0.99), 1),
        "streams_timed": len(tally.ttft),
        "http_5xx": fivexx,
        "streams_without_done": tally.unfinished_streams,
        "client_failures": dict(tally.failures),
        "server_log_bytes": log_bytes,
        "server_log_lines": dict(log_kinds.most_common(20)),
        "samples": [{"t": round(t, 1), "rss_kib": r, "fds": f} for t, r, f in samples],
    }
    print(
        f"{args.clients} clients for {elapsed:.0f} s: {total} responses, "
        f"{figures['requests_per_second']} requests/s"
    )
    print(f"  by kind: {dict(tally.kinds)}")
    print(
        f"  by status: {figures['by_status']}; 5xx: {fivexx}; "
        f"streams without [DONE]: {tally.unfinished_streams}"
    )
    print(
        f"  time to first token: p50 {figures['ttft_p50_ms']} ms, "
        f"p99 {figures['ttft_p99_ms']} ms over {len(tally.ttft)} streams"
    )
    if tally.failures:
        print(f"  client-side failures: {dict(tally.failures)}")
    rss = [r for _, r, _ in samples]
    fds = [f for _, _, f in samples]
    if samples:
        print(
            f"  server RSS (MiB): start {rss[0] / 1024:.1f}, min {min(rss) / 1024:.1f}, "
            f"max {max(rss) / 1024:.1f}, end {rss[-1] / 1024:.1f}"
        )
        print(f"  server open fds: start {fds[0]}, min {min(fds)}, max {max(fds)}, end {fds[-1]}")
        series = ", ".join(f"{t:.0f}s {r / 1024:.0f}MiB/{f}" for t, r, f in samples)
        print(f"  over time (RSS/fds): {series}")
    print(f"  server log: {log_bytes} bytes")
    for line, count in log_kinds.most_common(8):
        print(f"    {count} x {line}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
