"""The chat web page at ``/``: one HTML file, a script and a style sheet, all
served from the package (no CDN), under a strict Content-Security-Policy."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

STATIC_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "chat.js": "text/javascript; charset=utf-8",
    "chat.css": "text/css; charset=utf-8",
}

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def static_file(name: str) -> bytes:
    """The bytes of one packaged file (``index.html``, ``chat.js``, ``chat.css``)."""
    return (files("riftco.serve") / "static" / name).read_bytes()


async def _serve(request: Request) -> Response:
    name = request.path_params.get("name", "index.html")
    if name not in STATIC_TYPES:
        return Response("not found\n", status_code=404, media_type="text/plain")
    return Response(static_file(name), media_type=STATIC_TYPES[name], headers=SECURITY_HEADERS)


def page_routes() -> list[Route]:
    return [
        Route("/", _serve, methods=["GET"]),
        Route("/static/{name}", _serve, methods=["GET"]),
    ]


__all__ = ["page_routes", "static_file"]
