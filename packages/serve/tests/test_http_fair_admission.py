"""Fair admission on a real server on 127.0.0.1: one client (or a few) holding their
per-client maximum of silent sockets cannot keep another client out; the first-byte,
header and body deadlines cut slow clients off at their own stage.

Clients pick their source address in 127.0.0.0/8 (all loopback on Linux), so
"another client" is another peer address, which is what per-client limits count.
Every socket has a timeout and every flood a small bound."""

import contextlib
import json
import socket
import threading
import time

from riftco.serve import ServerConfig, create_app
from riftco.serve.connections import ConnectionLimits, uvicorn_config
from riftco.serve.listener import GuardedServer
from riftco.testing.serve import ScriptedEngine

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
CHAT_BODY = json.dumps(
    {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
).encode()
CHAT = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(CHAT_BODY)
) + CHAT_BODY


@contextlib.contextmanager
def guarded_server(limits: ConnectionLimits, config: ServerConfig | None = None, engine=None):
    app = create_app(
        engine or ScriptedEngine(model_id="scripted"), config or ServerConfig(model_id="scripted")
    )
    uv = uvicorn_config(
        app, limits, host="127.0.0.1", port=0, lifespan="on", log_level="warning", backlog=512
    )
    server = GuardedServer(uv)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        while time.monotonic() < deadline and not request(port, HEALTH).startswith(b"HTTP/1.1 200"):
            time.sleep(0.05)
        yield port, server
    finally:
        server.should_exit = True
        thread.join(10)


def connect(port: int, source: str = "127.0.0.1", timeout: float = 5.0) -> socket.socket:
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    conn.bind((source, 0))
    conn.connect(("127.0.0.1", port))
    return conn


def read_all(conn: socket.socket) -> bytes:
    """Everything until the server closes (or the socket's timeout)."""
    chunks = []
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def request(port: int, raw: bytes, source: str = "127.0.0.1", timeout: float = 5.0) -> bytes:
    """One request on a fresh connection from ``source``; b"" if it failed."""
    try:
        with connect(port, source, timeout) as conn:
            conn.sendall(raw)
            return read_all(conn)
    except OSError:
        return b""


def timed(port: int, raw: bytes, source: str) -> tuple[bytes, float]:
    start = time.monotonic()
    answer = request(port, raw, source)
    return answer, time.monotonic() - start


def _silent(port: int, source: str, count: int) -> list[socket.socket]:
    return [connect(port, source) for _ in range(count)]


def _close(conns: list[socket.socket]) -> None:
    for c in conns:
        c.close()


def test_a_client_at_its_connection_maximum_leaves_room_for_others():
    limits = ConnectionLimits(
        max_connections=64,
        max_connections_per_client=16,
        first_byte_timeout=20.0,
        header_timeout=20.0,
        request_timeout=30.0,
    )
    with guarded_server(limits) as (port, server):
        held = _silent(port, "127.0.0.1", 16)
        time.sleep(0.2)
        # Its next connections are refused at once, not queued behind the held ones.
        extra = _silent(port, "127.0.0.1", 8)
        refusals = [read_all(c) for c in extra]
        health, health_s = timed(port, HEALTH, "127.0.0.2")
        chat, chat_s = timed(port, CHAT, "127.0.0.2")
        admission = server.admission
        holds = admission.held_by("127.0.0.1")
        _close(held + extra)
    print(f"health answered in {health_s:.3f} s, a chat completion in {chat_s:.3f} s")
    assert all(r.startswith(b"HTTP/1.1 503") for r in refusals), refusals[:1]
    assert holds == 16
    assert health.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in health
    assert chat.startswith(b"HTTP/1.1 200") and b'"chat.completion"' in chat
    assert health_s < 5.0 and chat_s < 5.0  # the bound is 1 s; generous on CI


def test_a_full_server_makes_room_for_a_client_holding_nothing():
    limits = ConnectionLimits(
        max_connections=32,
        max_connections_per_client=8,
        first_byte_timeout=20.0,
        header_timeout=20.0,
        request_timeout=30.0,
    )
    with guarded_server(limits) as (port, server):
        squatters = [_silent(port, f"127.0.1.{i}", 8) for i in range(1, 5)]  # 4 x 8 = the cap
        time.sleep(0.2)
        assert server.admission.admitted == 32
        # The newcomer takes the oldest idle socket of a busiest squatter; after it
        # leaves there is a free place, so the next one needs no eviction.
        health, health_s = timed(port, HEALTH, "127.0.0.2")
        chat, chat_s = timed(port, CHAT, "127.0.0.3")
        evicted = server.admission.evicted_total
        oldest = read_all(squatters[0][0]) if evicted else b""
        _close([c for group in squatters for c in group])
    print(f"full server: health in {health_s:.3f} s, chat in {chat_s:.3f} s")
    assert health.startswith(b"HTTP/1.1 200") and chat.startswith(b"HTTP/1.1 200")
    assert health_s < 5.0 and chat_s < 5.0
    assert evicted == 1
    assert oldest.startswith(b"HTTP/1.1 503")  # the oldest idle socket of a busiest client


def test_equal_clients_do_not_evict_each_other():
    limits = ConnectionLimits(
        max_connections=8,
        max_connections_per_client=8,
        first_byte_timeout=20.0,
        header_timeout=20.0,
    )
    with guarded_server(limits) as (port, server):
        a = _silent(port, "127.0.1.1", 4)
        b = _silent(port, "127.0.1.2", 4)
        time.sleep(0.2)
        c = connect(port, "127.0.1.2")  # holds 4 like the busiest: no room is made
        answer = read_all(c)
        _close([*a, *b, c])
        assert server.admission.evicted_total == 0
    assert answer.startswith(b"HTTP/1.1 503")


def test_first_byte_deadline():
    limits = ConnectionLimits(first_byte_timeout=1.0, header_timeout=10.0, request_timeout=30.0)
    with guarded_server(limits) as (port, _):
        conn = connect(port, "127.0.0.5", timeout=8.0)
        start = time.monotonic()
        answer = read_all(conn)
        elapsed = time.monotonic() - start
        conn.close()
    print(f"silent socket closed after {elapsed:.2f} s (first-byte deadline 1 s)")
    assert answer.startswith(b"HTTP/1.1 408")
    assert 0.5 < elapsed < 6.0


def test_slowloris_at_one_byte_a_second_gets_408_at_the_header_deadline():
    limits = ConnectionLimits(first_byte_timeout=1.5, header_timeout=3.0, request_timeout=30.0)
    with guarded_server(limits) as (port, _):
        conn = connect(port, "127.0.0.6", timeout=10.0)
        start = time.monotonic()
        head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 64
        answer = b""
        for byte in head:  # one byte a second; the headers would take over a minute
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                break
            conn.settimeout(1.0)
            try:
                answer = conn.recv(4096)
            except TimeoutError:
                continue
            break
        elapsed = time.monotonic() - start
        conn.close()
    print(f"slowloris answered after {elapsed:.2f} s (header deadline 3 s)")
    assert answer.startswith(b"HTTP/1.1 408")
    assert 2.0 < elapsed < 8.0  # the header deadline, not the first byte's or the request's


def test_the_body_gets_the_rest_of_the_request_timeout():
    limits = ConnectionLimits(first_byte_timeout=1.0, header_timeout=1.5, request_timeout=3.0)
    with guarded_server(limits) as (port, _):
        conn = connect(port, "127.0.0.7", timeout=10.0)
        conn.sendall(CHAT[: CHAT.index(b"\r\n\r\n") + 4])  # headers, no body
        start = time.monotonic()
        answer = read_all(conn)
        elapsed = time.monotonic() - start
        conn.close()
        # A complete request that took longer than the header deadline in all is served.
        slow = connect(port, "127.0.0.8", timeout=10.0)
        cut = CHAT.index(b"\r\n\r\n") + 4
        slow.sendall(CHAT[:cut])
        time.sleep(2.0)
        slow.sendall(CHAT[cut:])
        served = read_all(slow)
        slow.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert 1.5 < elapsed < 7.0
    assert served.startswith(b"HTTP/1.1 200")


def test_requests_in_flight_per_client_are_bounded():
    # The two slow requests hold their places for seconds, and the third is sent once
    # the engine has both (not after a fixed sleep: on a loaded machine they might not
    # have arrived, or a short one might have finished).
    engine = ScriptedEngine(model_id="scripted", token_delay=3.0)
    config = ServerConfig(model_id="scripted", max_requests_per_client=2)
    with guarded_server(ConnectionLimits(), config, engine) as (port, _):
        slow = [connect(port, "127.0.0.9", timeout=20.0) for _ in range(2)]
        for c in slow:
            c.sendall(CHAT)
        deadline = time.monotonic() + 10.0
        while engine.active < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.active == 2
        third = request(port, CHAT, "127.0.0.9")
        other = request(port, CHAT, "127.0.0.10", timeout=10.0)
        health = request(port, HEALTH, "127.0.0.9")
        firsts = [read_all(c) for c in slow]
        _close(slow)
    assert third.startswith(b"HTTP/1.1 429") and b"too_many_requests_per_client" in third
    assert b"retry-after: 1" in third.lower()
    assert other.startswith(b"HTTP/1.1 200") and health.startswith(b"HTTP/1.1 200")
    assert all(f.startswith(b"HTTP/1.1 200") for f in firsts)


def test_the_listener_pauses_at_the_descriptor_budget_and_resumes():
    limits = ConnectionLimits(max_connections=512, first_byte_timeout=20.0, header_timeout=20.0)
    with guarded_server(limits) as (port, server):
        admission = server.admission
        listener = server.listeners[0]
        # Pretend the budget is nearly spent: the listener must stop before accepting.
        real = admission._budget
        admission._budget = admission.sockets + 4
        conns = [connect(port, f"127.0.2.{i}") for i in range(1, 9)]
        time.sleep(0.5)
        paused_at = admission.sockets + listener.in_flight
        was_paused = listener.paused
        admission._budget = real
        conns[0].close()  # a close frees room: the listener resumes and takes the backlog
        time.sleep(0.5)
        health = request(port, HEALTH, "127.0.0.2")
        _close(conns)
    assert was_paused and paused_at <= 4 + 1
    assert health.startswith(b"HTTP/1.1 200")
    assert listener.pauses >= 1
