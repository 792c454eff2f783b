"""Abusive clients against a real server on 127.0.0.1: idle floods, slowloris, keep-alive
squatting. Every socket has a timeout and every flood a small bound."""

import contextlib
import logging
import socket
import threading
import time

import pytest
import uvicorn

from riftco.serve import ServerConfig, create_app
from riftco.serve.connections import ConnectionLimits, guarded_protocol, uvicorn_config
from riftco.testing.serve import ScriptedEngine

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@contextlib.contextmanager
def live_server(limits: ConnectionLimits):
    app = create_app(ScriptedEngine(model_id="scripted"), ServerConfig(model_id="scripted"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(app, limits, lifespan="on", log_level="warning", backlog=256)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    port = sock.getsockname()[1]
    try:
        while time.monotonic() < deadline and not _get_health(port).startswith(b"HTTP/1.1 200"):
            time.sleep(0.05)
        yield port, server
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _connect(port: int, timeout: float = 5.0) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    conn.settimeout(timeout)
    return conn


def _read_all(conn: socket.socket) -> bytes:
    """Everything until the server closes (or the socket's timeout)."""
    chunks = []
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := conn.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def _read_response(conn: socket.socket) -> bytes:
    """One /health response on a keep-alive connection."""
    data = b""
    while not data.endswith(b"}"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _get_health(port: int) -> bytes:
    try:
        with _connect(port, 2.0) as conn:
            conn.sendall(HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            return _read_all(conn)
    except OSError:
        return b""


def test_silent_connections_are_closed_with_408():
    limits = ConnectionLimits(max_connections=64, request_timeout=1.0, keep_alive_timeout=1.0)
    with live_server(limits) as (port, _):
        silent = [_connect(port) for _ in range(10)]
        start = time.monotonic()
        answers = [_read_all(c) for c in silent]
        elapsed = time.monotonic() - start
        for c in silent:
            c.close()
        assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers[:2]
        assert elapsed < 4.5  # closed by the server, not by our 5 s socket timeout
        assert _get_health(port).startswith(b"HTTP/1.1 200")


def test_slowloris_headers_are_cut_off():
    limits = ConnectionLimits(max_connections=64, request_timeout=1.0, keep_alive_timeout=1.0)
    with live_server(limits) as (port, _):
        conn = _connect(port)
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        start = time.monotonic()
        closed = False
        with contextlib.suppress(OSError):
            for i in range(40):  # one header byte every 0.1 s would last 4 s
                conn.sendall(b"X-Slow-%d: a\r\n" % i)
                time.sleep(0.1)
        closed = True
        answer = _read_all(conn)
        conn.close()
        assert closed and time.monotonic() - start < 4.5
        assert answer.startswith(b"HTTP/1.1 408") or answer == b""


def test_idle_keep_alive_connection_is_closed():
    limits = ConnectionLimits(max_connections=64, request_timeout=5.0, keep_alive_timeout=1.0)
    with live_server(limits) as (port, _):
        conn = _connect(port)
        conn.sendall(HEALTH)
        start = time.monotonic()
        answer = _read_all(conn)
        conn.close()
        assert answer.startswith(b"HTTP/1.1 200")
        assert time.monotonic() - start < 4.0


def test_connections_over_the_cap_are_refused_fast_and_logged_once(caplog):
    limits = ConnectionLimits(
        max_connections=8, request_timeout=3.0, keep_alive_timeout=1.0, log_interval=60.0
    )
    caplog.set_level(logging.WARNING, logger="riftco.serve")
    with live_server(limits) as (port, _):
        held = [_connect(port) for _ in range(8)]
        time.sleep(0.2)
        start = time.monotonic()
        extra = [_connect(port) for _ in range(40)]
        answers = [_read_all(c) for c in extra]
        refused_in = time.monotonic() - start
        for c in held + extra:
            c.close()
        assert all(a.startswith(b"HTTP/1.1 503") for a in answers), answers[:2]
        assert refused_in < 2.5  # before any held connection timed out
        time.sleep(0.3)
        assert _get_health(port).startswith(b"HTTP/1.1 200")
    refusals = [r for r in caplog.records if "over the connection limit" in r.getMessage()]
    assert len(refusals) == 1


def test_a_complete_request_is_served_after_the_timeout_would_have_fired():
    limits = ConnectionLimits(max_connections=64, request_timeout=0.5, keep_alive_timeout=2.0)
    with live_server(limits) as (port, _):
        conn = _connect(port)
        conn.sendall(HEALTH)
        first = _read_response(conn)
        time.sleep(0.8)  # longer than request_timeout, shorter than keep-alive
        conn.sendall(HEALTH)
        second = _read_response(conn)
        conn.close()
    assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("field", ["max_connections", "request_timeout", "keep_alive_timeout"])
def test_limits_must_be_positive(field):
    with pytest.raises(ValueError, match=field):
        ConnectionLimits(**{field: 0})


def test_protocol_class_is_h11():
    assert issubclass(
        guarded_protocol(ConnectionLimits()), uvicorn.protocols.http.h11_impl.H11Protocol
    )
