"""The chat page in a real browser: a five-turn chat with the demo's model.

Opt-in (tox env ``browser``, or ``RIFTCO_BROWSER_TESTS=1``): headless Chromium (Debian's ``chromium``) driven by
Playwright's Python package. The model is ``RIFTCO_CHAT_BUNDLE`` (a ``chat.rift``
from ``riftco demo``), else a quick demo run made here. The page's
Content-Security-Policy forbids eval, so the test polls the page from Python.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

if os.environ.get("RIFTCO_BROWSER_TESTS") != "1":
    pytest.skip("opt-in: RIFTCO_BROWSER_TESTS=1 (tox -e browser)", allow_module_level=True)
playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("RIFTCO_CHROMIUM", "/usr/bin/chromium")
if not shutil.which(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)

CONTEXT = " I am reading the Python language reference, the chapter on compound statements."
QUESTIONS = [
    q + CONTEXT
    for q in [
        "Explain the while statement.",
        "And the for statement?",
        "What does break do?",
        "How is continue different?",
        "Give an example with else.",
    ]
]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    named = os.environ.get("RIFTCO_CHAT_BUNDLE")
    if named:
        return Path(named)
    out = tmp_path_factory.mktemp("demo")
    command = [sys.executable, "-m", "riftco.cli", "demo", "--quick", "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True)
    return out / "chat.rift"


@pytest.fixture(scope="module")
def server(bundle):
    import uvicorn

    from riftco.serve import ServerConfig, create_app
    from riftco.serve.loading import engine_from_bundle

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(
        lambda: engine_from_bundle(bundle, model_id="demo"), ServerConfig(model_id="demo")
    )
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    host = uvicorn.Server(config)
    thread = threading.Thread(target=host.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not host.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    host.should_exit = True
    thread.join(timeout=30)


def _wait(page, check, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {page.content()[-600:]}"
        time.sleep(0.1)


def test_a_five_turn_chat_keeps_going(server):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(server + "/")
            model = page.locator("#model")
            _wait(page, lambda: model.text_content() == "demo", "the model to load")
            page.locator("details summary").click()
            page.locator("#temperature").fill("0")
            page.locator("#max-tokens").fill("80")
            statuses = []
            for turn, question in enumerate(QUESTIONS, start=1):
                page.locator("#prompt").fill(question)
                page.locator("#send").click()

                def replied(turn=turn):
                    started = page.locator(".message.assistant").count() == turn
                    return started and page.locator("#send").is_enabled()

                _wait(page, replied, f"reply {turn}")
                status = page.locator("#status").text_content() or ""
                statuses.append(status)
                assert not status.startswith("Error"), (turn, status)
                assert page.locator(".message.error").count() == 0, (turn, status)
                assert page.locator(".message.user").count() == turn
                assert page.locator(".message.assistant").count() == turn
            replies = page.locator(".message.assistant").all_text_contents()
            assert all(r.removeprefix("assistant").strip() for r in replies), replies
            # Five turns outgrow the 256-token context: the oldest go, and the page says so.
            assert any("left out to fit the model's context" in s for s in statuses), statuses
        finally:
            browser.close()
