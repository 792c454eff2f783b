"""The real server process on a free loopback port, driven by the official
``openai`` client: chat (streamed and not), models, auth, and a drain on SIGTERM."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai")

KEY = "e2e-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, tiny_model):
    from riftco.interchange import save_bundle

    path = tmp_path_factory.mktemp("bundle") / "tiny.rift"
    model, tokenizer = tiny_model
    save_bundle(path, model, tokenizer)
    return path


@pytest.fixture(scope="module")
def server(bundle):
    port = free_port()
    code = "import sys; from riftco.serve.cli import main; sys.exit(main(sys.argv[1:]))"
    args = [str(bundle), "--port", str(port), "--api-key", KEY, "--threads", "1"]
    args += ["--log-level", "warning", "--drain-timeout", "20"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except (urllib.error.URLError, ConnectionError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the server did not come up (exit status {proc.poll()})")
        time.sleep(0.1)
    yield proc, base
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def client(base, key=KEY):
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=30)


MESSAGES = [{"role": "user", "content": "the quick brown fox"}]


def test_models_and_chat(server):
    _, base = server
    c = client(base)
    assert [m.id for m in c.models.list()] == ["tiny"]
    reply = c.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12, temperature=0)
    assert reply.object == "chat.completion" and reply.model == "tiny"
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens <= 12 and reply.usage.prompt_tokens > 0

    stream = c.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == choice.message.content
    finish = [
        ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason
    ]
    assert finish == [choice.finish_reason]
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_client_errors(server):
    _, base = server
    with pytest.raises(openai.AuthenticationError):
        client(base, key="wrong").models.list()
    with pytest.raises(openai.NotFoundError):
        client(base).chat.completions.create(model="gpt-9", messages=MESSAGES)
    with pytest.raises(openai.BadRequestError, match="best_of"):
        client(base).completions.create(model="tiny", prompt="a", best_of=3)
    request = urllib.request.Request(f"{base}/health", headers={"Host": "evil.example"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 421


def test_sigterm_drains_in_flight_requests(server):
    proc, base = server
    body = {
        "model": "tiny",
        "messages": MESSAGES,
        "max_tokens": 60,
        "temperature": 0,
        "stream": True,
    }
    request = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        first = response.readline()
        assert first.startswith(b"data: ")
        proc.send_signal(signal.SIGTERM)
        rest = response.read().decode()
    assert rest.rstrip().endswith("data: [DONE]")
    assert '"finish_reason":"' in rest
    # uvicorn re-raises the signal once drained, as a process killed by it would exit.
    assert proc.wait(30) in (0, -signal.SIGTERM)
