"""The loopback Host check parses ``host[:port]`` (RFC 9110's Host, RFC 3986's authority
without userinfo) before it decides: nothing that merely starts with a loopback name passes."""

import pytest

from riftco.serve import ServerConfig
from riftco.serve.config import parse_host_header

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("127.0.0.1", ("127.0.0.1", None)),
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("LOCALHOST:80", ("localhost", 80)),
        ("localhost.", ("localhost", None)),
        ("[::1]", ("::1", None)),
        ("[::1]:65535", ("::1", 65535)),
        ("[0:0:0:0:0:0:0:1]:8000", ("::1", 8000)),
        ("llm.internal:443", ("llm.internal", 443)),
        ("  127.0.0.1  ", ("127.0.0.1", None)),
    ],
)
def test_well_formed_hosts(header, parsed):
    assert parse_host_header(header) == parsed


@pytest.mark.parametrize(
    "header",
    [
        "127.0.0.1:80@evil.com",  # userinfo: the host is evil.com
        "localhost@evil.com",
        "user:pass@127.0.0.1",
        "127.0.0.1:80:90",
        "127.0.0.1:",
        "127.0.0.1:http",
        "127.0.0.1:+80",
        "127.0.0.1:65536",
        "127.0.0.1:999999",
        "127.0.0.1/evil",
        "127.0.0.1?x",
        "127.0.0.1#x",
        "127.0.0.1, evil.com",
        "127.0.0.1 evil.com",
        "local%68ost",
        "[::1",
        "[::1]x",
        "[::1]:",
        "[127.0.0.1]",
        "[fe80::1%25eth0]",
        "[v1.fe]",
        "::1",
        "127.1",
        "0x7f.0.0.1",
        "2130706433",
        "127.0.0.256",
        "-localhost",
        "localhost..",
        "a" * 300,
        "lócalhost",
        "",
        "\x00",
    ],
)
def test_malformed_hosts(header):
    assert parse_host_header(header) is None


@pytest.mark.parametrize(
    "header",
    [
        "127.0.0.1:80@evil.com",
        "localhost:8000@evil.com",
        "[::1]:80@evil.com",
        "127.0.0.1:99999",
        "127.0.0.1, evil.com",
        "localhost/evil.com",
        "evil.com#127.0.0.1",
    ],
)
def test_authority_tricks_do_not_pass_the_loopback_check(header):
    assert not ServerConfig().host_allowed(header)


def test_allowed_hosts_match_the_parsed_name_only():
    config = ServerConfig(allowed_hosts=("llm.internal",))
    assert config.host_allowed("llm.internal:443") and config.host_allowed("LLM.Internal.")
    assert not config.host_allowed("llm.internal@evil.com")
    assert not config.host_allowed("evil.com@llm.internal:99999")


@pytest.mark.parametrize("host", ["127.0.0.1:80@evil.com", "localhost:1@x", "127.0.0.1:0x50"])
async def test_userinfo_and_bad_ports_get_421(serve, engine, host):
    async with serve(engine) as client:
        r = await client.get("/health", headers={"host": host})
    assert r.status_code == 421 and r.json()["error"]["code"] == "misdirected_request"


async def test_several_host_headers_get_421(serve, engine):
    async with serve(engine) as client:
        app = client.app
        sent = []
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/health",
            "raw_path": b"/health",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1"), (b"host", b"evil.com")],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8000),
        }

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)
    assert sent[0]["status"] == 421
    assert b"2 Host headers" in sent[1]["body"]
