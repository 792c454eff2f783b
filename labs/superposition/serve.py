"""Serve the interactive page from this folder on the loopback interface only.

The page is self-contained (its script and style sit beside it; nothing comes from
a CDN) and every response carries a Content-Security-Policy that allows only this
origin, so a page that reached for another host would fail visibly.
"""

from __future__ import annotations

import functools
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "page"
POLICY = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'"


class PageHandler(SimpleHTTPRequestHandler):
    def end_headers(self) -> None:
        self.send_header("Content-Security-Policy", POLICY)
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # quiet by default
        pass


def make_server(port: int = 0, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A server for the page (not yet serving); ``port`` 0 picks a free one."""
    handler = functools.partial(PageHandler, directory=str(PAGE))
    return ThreadingHTTPServer((host, port), handler)


def serve(port: int = 8765) -> int:
    server = make_server(port)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    print(f"superposition page at {url} (Ctrl-C stops)", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
