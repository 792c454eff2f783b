"""Opt-in (RIFTCO_BROWSER_TESTS=1): the page in a real headless Chromium.

Needs Debian's chromium and the playwright package (no browser download). The page is
served by the lab's own server; the test screenshots it, checks the canvases are drawn,
and changes the dimension to see the page respond.
"""

import os
import shutil
import threading
import time

import pytest
from lab_helpers import png_ink

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    os.environ.get("RIFTCO_BROWSER_TESTS") != "1" or CHROMIUM is None,
    reason="set RIFTCO_BROWSER_TESTS=1 with chromium and playwright installed",
)


@pytest.fixture
def page_url():
    from labs.superposition.serve import make_server

    server = make_server(0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def wait_ready(page, at_least, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the page's CSP forbids eval: poll attributes
        if int(page.get_attribute("body", "data-ready") or 0) >= at_least:
            return
        time.sleep(0.1)
    raise AssertionError("the page never finished drawing")


def test_page_draws_and_responds_in_chromium(page_url, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    errors = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 1000})
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("requestfailed", lambda req: errors.append(f"failed {req.url}"))
        hosts = []
        page.on("request", lambda req: hosts.append(req.url.split("/")[2]))
        page.goto(page_url)
        wait_ready(page, 1)
        first = page.inner_text("#stats")
        shot = tmp_path / "page.png"
        page.screenshot(path=str(shot), full_page=True)
        page.select_option("#dimension", "3")
        wait_ready(page, 2)
        second = page.inner_text("#stats")
        page.locator("#histogram").screenshot(path=str(tmp_path / "histogram.png"))
        browser.close()
    assert errors == []
    assert set(hosts) == {page_url.split("/")[2]}  # nothing but the local server
    assert "mean" in first and "sd" in first and first != second
    assert png_ink(shot) > 0.05
    assert png_ink(tmp_path / "histogram.png") > 0.05
