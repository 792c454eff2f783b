"""The ``riftco serve`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from riftco.serve.config import ServerConfig
from riftco.serve.connections import ConnectionLimits, uvicorn_config
from riftco.serve.listener import GuardedServer
from riftco.serve.loading import app_from_bundle, default_model_id, require_serving_backend
from riftco.serve.scheduler import SchedulerLimits


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="riftco serve",
        description="Serve a .rift bundle with an OpenAI-compatible HTTP API and a chat page.",
    )
    p.add_argument("bundle", type=Path, help="the .rift model bundle to serve")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to bind (default: 8000)")
    p.add_argument(
        "--model-id", default=None, help="the model's name in the API (default: file stem)"
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on /v1 and /metrics (or set RIFTCO_API_KEY)",
    )
    p.add_argument(
        "--allowed-hosts",
        default="",
        metavar="NAMES",
        help="comma-separated Host names to accept besides loopback names (a load balancer's)",
    )
    p.add_argument(
        "--backend", default=None, help="tensor backend (default: RIFTCO_BACKEND or cpu)"
    )
    p.add_argument(
        "--weights",
        default="float32",
        choices=("float32", "f16", "q8_0", "q4_0"),
        help="precision of the linear weights (llama.cpp's F16, Q8_0, Q4_0; default float32)",
    )
    p.add_argument("--threads", type=int, default=None, help="kernel threads (default: all cores)")
    p.add_argument("--max-running", type=int, default=16, help="sequences per batched step")
    p.add_argument("--max-waiting", type=int, default=64, help="queued requests before 429")
    p.add_argument(
        "--pages",
        type=int,
        default=None,
        help="KV cache pages (default: full context for every running sequence)",
    )
    p.add_argument("--page-size", type=int, default=16, help="token positions per KV cache page")
    p.add_argument("--max-tokens-limit", type=int, default=4096, help="largest max_tokens accepted")
    p.add_argument("--default-max-tokens", type=int, default=256, help="max_tokens when omitted")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body")
    p.add_argument(
        "--drain-timeout", type=float, default=30.0, help="seconds to finish requests on SIGTERM"
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=512,
        help="open connections before 503 refusals (lowered to what the open-file limit allows)",
    )
    p.add_argument(
        "--max-connections-per-client",
        type=int,
        default=64,
        help="open connections one peer address may hold (default: 64)",
    )
    p.add_argument(
        "--max-requests-per-client",
        type=int,
        default=32,
        help="/v1 requests one peer address may have in flight before 429 (default: 32)",
    )
    p.add_argument(
        "--max-choices",
        type=int,
        default=16,
        help="the most choices one request may ask for: n times its prompts (default: 16)",
    )
    p.add_argument(
        "--first-byte-timeout",
        type=float,
        default=5.0,
        help="seconds a new connection has to send its first byte (then 408 and close)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds a connection has to complete a request's headers (then 408 and close)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds a client has to send a whole request, body included (then 408 and close)",
    )
    p.add_argument(
        "--fd-reserve",
        type=int,
        default=64,
        help="descriptors kept free for files, the model and the log (default: 64)",
    )
    p.add_argument(
        "--trusted-proxies",
        default="",
        metavar="ADDRESSES",
        help="comma-separated reverse-proxy addresses: exempt from the per-client connection "
        "limit, and their X-Forwarded-For names the client",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=5.0,
        help="seconds an idle connection stays open",
    )
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    return p


def main(argv: list[str]) -> int:
    """Serve a .rift bundle over an OpenAI-compatible HTTP API (with a chat page)."""
    args = _parser().parse_args(argv)
    if not args.bundle.is_file():
        print(f"riftco serve: no such bundle: {args.bundle}", file=sys.stderr)
        return 2
    for name in (
        "max_running",
        "max_waiting",
        "page_size",
        "max_tokens_limit",
        "max_body_bytes",
        "max_connections",
        "max_connections_per_client",
        "max_requests_per_client",
        "max_choices",
        "first_byte_timeout",
        "header_timeout",
        "request_timeout",
        "keep_alive_timeout",
        "fd_reserve",
    ):
        if getattr(args, name) <= 0:
            print(f"riftco serve: --{name.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    model_id = args.model_id or default_model_id(args.bundle)
    try:
        config = ServerConfig(
            model_id=model_id,
            bind_host=args.host,
            api_key=args.api_key or os.environ.get("RIFTCO_API_KEY") or None,
            allowed_hosts=tuple(h.strip() for h in args.allowed_hosts.split(",") if h.strip()),
            max_body_bytes=args.max_body_bytes,
            max_tokens_limit=args.max_tokens_limit,
            default_max_tokens=min(args.default_max_tokens, args.max_tokens_limit),
            max_requests_per_client=args.max_requests_per_client,
            max_choices=args.max_choices,
        )
        connection_limits = ConnectionLimits(
            max_connections=args.max_connections,
            max_connections_per_client=args.max_connections_per_client,
            first_byte_timeout=args.first_byte_timeout,
            header_timeout=args.header_timeout,
            request_timeout=args.request_timeout,
            keep_alive_timeout=args.keep_alive_timeout,
            fd_reserve=args.fd_reserve,
            trusted_proxies=tuple(a.strip() for a in args.trusted_proxies.split(",") if a.strip()),
        )
    except ValueError as exc:
        print(f"riftco serve: {exc}", file=sys.stderr)
        return 2
    if args.threads:
        import riftco.tensor as rt

        rt.set_num_threads(args.threads)
    from riftco.tensor import RiftcoError

    try:  # before the server starts: a backend that cannot serve the model is an error now
        require_serving_backend(args.bundle, args.backend, args.weights)
    except RiftcoError as exc:
        print(f"riftco serve: {exc}", file=sys.stderr)
        return 1
    limits = SchedulerLimits(max_running=args.max_running, max_waiting=args.max_waiting)
    app = app_from_bundle(
        args.bundle,
        config,
        model_id=model_id,
        backend=args.backend,
        pages=args.pages,
        page_size=args.page_size,
        limits=limits,
        weights=args.weights,
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if not config.checks_host:
        logging.getLogger("riftco.serve").warning(
            "bound to %s: the Host check is off%s",
            args.host,
            "" if config.api_key else " and no API key is required",
        )
    server = GuardedServer(
        uvicorn_config(
            app,
            connection_limits,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            timeout_graceful_shutdown=args.drain_timeout,
            lifespan="on",
        )
    )
    server.run()
    return 0


__all__ = ["main"]
