"""Schema-driven fuzzing of a live server (opt-in: ``tox -e schema-serve``).

Starts a server on 127.0.0.1 with a tiny random model, then runs schemathesis
against its ``/openapi.json`` in positive and in negative mode with the
``not_a_server_error`` check: any 5xx fails the run. Prints the number of
generated cases per mode and exits non-zero on a failure or on fewer than
``--min-cases`` cases in a mode.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

import riftco.nn as nn
import riftco.text as text
from riftco.serve import BatchEngine, ServerConfig, create_app
from riftco.serve.connections import ConnectionLimits, uvicorn_config

CORPUS = "the quick brown fox jumps over the lazy dog. " * 4 + "Hello, world! 0123456789"


def _server() -> tuple[uvicorn.Server, int, threading.Thread]:
    tokenizer = text.BpeTokenizer.train(CORPUS, vocab_size=300)
    config = nn.TransformerConfig.preset(
        "gpt2", size="tiny", vocab_size=tokenizer.vocab_size, context_length=64
    )
    engine = BatchEngine(nn.DecoderOnlyTransformer(config, seed=1), tokenizer, model_id="tiny")
    app = create_app(
        engine, ServerConfig(model_id="tiny", max_tokens_limit=8, default_max_tokens=8)
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn_config(app, ConnectionLimits(), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    return server, sock.getsockname()[1], thread


def _cases(ndjson: Path) -> int:
    """The number of test cases the run's event log records as executed."""
    count = 0
    for line in ndjson.read_text().splitlines():
        event = json.loads(line)
        for name, body in event.items():
            if name == "ScenarioFinished":
                count += len(body.get("recorder", {}).get("cases", {}))
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-examples", type=int, default=600, help="per operation and mode")
    parser.add_argument("--min-cases", type=int, default=1000, help="per mode")
    args = parser.parse_args()
    server, port, thread = _server()
    failed = False
    try:
        for mode in ("positive", "negative"):
            with tempfile.TemporaryDirectory() as folder:
                events = Path(folder) / "events.ndjson"
                run = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "schemathesis.cli",
                        "run",
                        f"http://127.0.0.1:{port}/openapi.json",
                        "--checks",
                        "not_a_server_error",
                        "--mode",
                        mode,
                        "--max-examples",
                        str(args.max_examples),
                        "--seed",
                        "1",
                        "--report",
                        "ndjson",
                        "--report-ndjson-path",
                        str(events),
                        "--no-color",
                    ],
                    check=False,
                    cwd=folder,
                )
                cases = _cases(events) if events.exists() else 0
            print(f"schemathesis {mode}: {cases} cases, exit status {run.returncode}")
            failed |= run.returncode != 0 or cases < args.min_cases
    finally:
        server.should_exit = True
        thread.join(30)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
