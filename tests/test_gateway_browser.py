"""The gateway's page in a real browser: Debian's headless Chromium driven by Playwright.

The page mirrors its progress into data-* attributes of #status; the test reads those to see that
chunks arrived, AudioBuffers were scheduled and the AudioContext clock moved past the first one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import create_app
from tests.gateway_server import BackgroundServer
from tests.conftest import Farm

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--autoplay-policy=no-user-gesture-required",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--disable-features=MediaRouter,OptimizationHints,Translate",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists() and not shutil.which("chromium"):
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
                              headless=True, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(farm: Farm) -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(farm.settings)) as s:
        yield s


@pytest.fixture
def page(browser: Any, server: BackgroundServer) -> Iterator[Any]:
    context = browser.new_context()
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # JavaScript errors fail the test; a logged 4xx is the browser's note on an answer the page handles
    pg.on("console", lambda msg: errors.append(msg.text)
          if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    pg.goto(server.url + "/")
    pg.wait_for_function("document.getElementById('status').dataset.voices > 0", timeout=10_000)
    yield pg
    context.close()
    assert not errors, errors


def _status(page: Any) -> dict[str, str]:
    return page.eval_on_selector("#status", "el => ({...el.dataset})")


def test_page_speaks_while_the_job_streams(page: Any) -> None:
    voices = page.eval_on_selector_all("#voice option", "opts => opts.map(o => o.value)")
    assert {"joe", "kumo", "default"} <= set(voices)
    assert page.input_value("#voice") == "default"
    page.fill("#text", "今天天气很好。Hello from the browser: these chunks play while the farm is still making the rest.")
    page.click("#speak")
    page.wait_for_function("document.getElementById('status').dataset.chunks > 0", timeout=30_000)
    first = _status(page)
    assert first["state"] in ("streaming", "done") and int(first["scheduled"]) >= 1
    assert 0 < int(first["firstChunkMs"]) < 30_000
    page.wait_for_function("document.getElementById('status').dataset.state === 'done'", timeout=60_000)
    # playback started: the AudioContext clock moved past the first scheduled buffer
    page.wait_for_function("document.getElementById('status').dataset.playedSeconds > 0.3", timeout=10_000)
    st = _status(page)
    assert st["contextState"] == "running" and st["playing"] == "true"
    assert int(st["total"]) >= 2 and st["segments"] == st["total"]
    assert int(st["scheduled"]) == int(st["chunks"]) >= int(st["total"])
    assert int(st["lastSeq"]) == int(st["chunks"]) - 1
    assert float(st["scheduledSeconds"]) > 3.0 and float(st["contextTime"]) > 0.3
    assert page.eval_on_selector("#progress", "p => p.value === p.max")
    assert "first audio after" in page.inner_text("#detail")


def test_stop_cancels_the_job(page: Any, server: BackgroundServer) -> None:
    page.select_option("#voice", "joe")
    page.fill("#text", "This text is long, so the job is still running when Stop is pressed. " * 30)
    page.click("#speak")
    page.wait_for_function("document.getElementById('status').dataset.chunks > 0", timeout=30_000)
    job_id = _status(page)["job"]
    page.click("#stop")
    assert _status(page)["state"] == "stopped"
    state = ""
    for _ in range(100):
        state = httpx.get(f"{server.url}/v1/jobs/{job_id}").json()["state"]
        if state == "cancelled":
            break
        page.wait_for_timeout(100)
    assert state == "cancelled"


def test_page_shows_a_farm_error_code(page: Any) -> None:
    page.fill("#text", "\x01\x02")
    page.click("#speak")
    page.wait_for_function("document.getElementById('status').dataset.state === 'error'", timeout=10_000)
    st = _status(page)
    assert st["error"] == "CONTROL_CHARACTERS" and "Error CONTROL_CHARACTERS" in page.inner_text("#summary")


def test_page_highlights_the_word_being_spoken(page: Any) -> None:
    text = "One two three four five six seven eight nine ten."
    # the page records every change of the highlight itself, so a slow test process cannot miss a short word
    page.evaluate("""() => {
      window.spoken = []; window.mostAtOnce = 0;
      new MutationObserver(() => {
        const now = [...document.querySelectorAll('#words .speaking')].map((e) => e.textContent);
        window.mostAtOnce = Math.max(window.mostAtOnce, now.length);
        if (now.length && now[0] !== window.spoken[window.spoken.length - 1]) window.spoken.push(now[0]);
      }).observe(document.getElementById('words'),
                 { subtree: true, childList: true, attributes: true, attributeFilter: ['class'] });
    }""")
    page.select_option("#voice", "joe")
    page.fill("#text", text)
    page.click("#speak")
    page.wait_for_function("document.getElementById('status').dataset.state === 'done'", timeout=60_000)
    assert int(_status(page)["words"]) == 10
    page.wait_for_function("(() => { const d = document.getElementById('status').dataset;"
                           " return Number(d.playedSeconds) >= Number(d.scheduledSeconds) - 0.05; })()",
                           timeout=30_000)
    seen = page.evaluate("window.spoken")
    words = text.rstrip(".").split()
    # the highlight walks the words in order, one at a time, and reaches the end
    assert seen == [w for w in words if w in seen] and len(seen) >= 6 and seen[-1] == "ten", seen
    assert page.evaluate("window.mostAtOnce") == 1
    assert page.inner_text("#words") == text
