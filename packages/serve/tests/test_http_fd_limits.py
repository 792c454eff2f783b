"""The server under a low open-file limit (``RLIMIT_NOFILE`` 1,024, as ``prlimit
--nofile=1024`` sets it) against thousands of idle sockets: it stops accepting
before its descriptors run out, /health and a chat completion from another client
still answer, and its log grows by under 1 MB.

The server runs in a subprocess with the lowered limit; the test process raises its
own soft limit to its hard limit to hold the sockets, and skips where that is too low."""

import contextlib
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from riftco.serve.admission import connection_cap, raise_open_file_limit

SERVER = r"""
import logging, sys
from riftco.serve import ServerConfig, create_app
from riftco.serve.connections import ConnectionLimits, uvicorn_config
from riftco.serve.listener import GuardedServer
from riftco.testing.serve import ScriptedEngine

logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
app = create_app(ScriptedEngine(model_id="scripted"), ServerConfig(model_id="scripted"))
limits = ConnectionLimits(first_byte_timeout=20.0, header_timeout=20.0, request_timeout=30.0)
config = uvicorn_config(app, limits, host="127.0.0.1", port=int(sys.argv[1]), lifespan="on",
                        log_level="info")
GuardedServer(config).run()
"""

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
BODY = b'{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'
CHAT = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)
LIMIT = 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lower_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def _ask(port: int, raw: bytes, source: str = "127.0.0.2", timeout: float = 10.0):
    start = time.monotonic()
    chunks = []
    try:
        with socket.socket() as conn:
            conn.settimeout(timeout)
            conn.bind((source, 0))
            conn.connect(("127.0.0.1", port))
            conn.sendall(raw)
            with contextlib.suppress(TimeoutError, ConnectionResetError):
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
    except OSError:
        pass
    return b"".join(chunks), time.monotonic() - start


@contextlib.contextmanager
def _server(tmp_path: Path):
    port = _free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_lower_limit,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"server exited: {log_path.read_text()[-2000:]}")
            if _ask(port, HEALTH, timeout=2.0)[0].startswith(b"HTTP/1.1 200"):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the server did not start")
        yield port, proc, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _open_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections from 250 source addresses, none sending a byte."""
    conns = []
    for i in range(count):
        conn = socket.socket()
        conn.setblocking(False)
        conn.bind((f"127.0.3.{1 + i % 250}", 0))
        conn.connect_ex(("127.0.0.1", port))
        conns.append(conn)
    return conns


def _server_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to count descriptors")
@pytest.mark.parametrize("idle", [3_000, 10_000])
def test_thousands_of_idle_sockets_at_a_1024_descriptor_limit(tmp_path, idle):
    soft, hard = raise_open_file_limit()
    if soft < idle + 256:
        pytest.skip(
            f"this process may open {soft} descriptors (hard limit {hard}); needs {idle + 256}"
        )
    with _server(tmp_path) as (port, proc, log_path):
        before = log_path.stat().st_size
        start = time.monotonic()
        conns = _open_idle(port, idle)
        opened_s = time.monotonic() - start
        time.sleep(1.0)
        most_fds = _server_fds(proc.pid)
        answers = []
        for _ in range(3):
            answers.append(_ask(port, HEALTH))
            most_fds = max(most_fds, _server_fds(proc.pid))
        chat = _ask(port, CHAT)
        time.sleep(0.5)
        most_fds = max(most_fds, _server_fds(proc.pid))
        for conn in conns:
            conn.close()
        grown = log_path.stat().st_size - before
        alive = proc.poll() is None
        log_text = log_path.read_text(errors="replace")
    times = ", ".join(f"{t:.3f}" for _, t in answers)
    print(
        f"{idle} idle sockets opened in {opened_s:.2f} s; health answered in {times} s, "
        f"chat in {chat[1]:.3f} s; server held at most {most_fds} descriptors; "
        f"log grew {grown} bytes"
    )
    assert alive
    assert all(a.startswith(b"HTTP/1.1 200") for a, _ in answers), answers[0][0][:200]
    assert all(t < 5.0 for _, t in answers)  # the bound is 1 s; generous on CI
    assert chat[0].startswith(b"HTTP/1.1 200") and chat[1] < 5.0
    assert most_fds < LIMIT
    assert "Too many open files" not in log_text
    assert grown < 1_000_000


def test_the_connection_cap_follows_the_descriptor_budget():
    assert connection_cap(512, 100_000) == 512
    assert connection_cap(2048, 940) == 940 - 117  # room kept for refusals in flight
    assert connection_cap(512, 100) == 84
    with pytest.raises(ValueError, match="open-file limit"):
        connection_cap(512, 10)


def test_the_soft_limit_is_raised_to_the_hard_limit(tmp_path):
    code = (
        "import resource; from riftco.serve.admission import raise_open_file_limit;"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1024));"
        "print(*raise_open_file_limit())"
    )
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"the hard open-file limit is {hard}, under 1024")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1024", "1024"]
