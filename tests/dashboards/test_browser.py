"""The dashboard in a real browser: `workbench dashboard` serves a store and headless Chromium
(Debian's, driven by Playwright) loads the pages.

- Each page is loaded cold (a fresh server, a fresh browser): its first paint already shows the
  page's title, the page never goes blank after it, the key figures are visible and whole (no
  headline cut off), and no error box is shown. Each page's screenshot is saved beside the test's
  temporary files (the README's come from `python docs/screenshots.py`).
- Over a store whose recorded text is hostile Markdown and HTML, no page makes the browser fetch
  anything, and the text shows as itself.

Chromium comes from Debian (Playwright's own browser download is blocked here): when it is missing
and the tests run as root on Debian, as on a fresh machine of this project, the test installs it with
apt-get; anywhere else it fails with the command to run. Never a skip."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import dashboard_store as fx
import hostile_store
from processes import free_port, stop
from workbench.money import format_amount

CHROMIUM = Path("/usr/bin/chromium")
CALLS = fx.call_rows()
COST = {c["call_id"]: c["cost_micros"] or 0 for c in CALLS}
# url path, title, screenshot name, texts that must be visible
PAGES = [
    ("", "Overview", "overview", [format_amount(sum(c["cost_micros"] or 0 for c in CALLS if not c["replayed"])),
                                  "+ 1 unpriced calls", "calls are unpriced"]),
    ("prompt_cache", "Prompt cache", "prompt_cache", ["Request hit rate", "40.0%"]),
    ("compaction", "Compaction", "compaction", [format_amount(sum(x[8] for x in fx.COMPACTIONS))]),
    ("failures", "Failures", "failures", [format_amount(sum(COST[i] for i in ("c04", "c05", "c07", "c08")))]),
    ("evals", "Evals", "evals", ["Gate verdicts"]),
    ("run_explorer?run_id=R1", "Run explorer", "run_explorer", ["Hello, Ada Lovelace!", "Tool call: lookup_person"]),
]
# records, from the first byte on, each change of what the page's main area shows
PAINTS = """
window.__paints = [];
new MutationObserver(() => {
  const main = document.querySelector('[data-testid="stMain"]');
  if (!main) return;
  const h1 = main.querySelector('h1');
  const state = {title: h1 ? h1.innerText.trim() : null, blank: main.innerText.trim() === ''};
  const last = window.__paints[window.__paints.length - 1];
  if (!last || last.title !== state.title || last.blank !== state.blank) window.__paints.push(state);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"`workbench dashboard` exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the dashboard did not answer at {url} within {timeout}s")


@contextmanager
def serve(db: Path, folder: Path) -> Iterator[str]:
    """`workbench dashboard` over `db`, started now (cold), stopped after."""
    port = free_port()
    env = {**os.environ, "WORKBENCH_SPOOL_DIR": str(folder / "spool")}
    env.pop("WORKBENCH_DASHBOARD_PASSWORD", None)
    with open(folder / f"dashboard-{port}.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "workbench", "dashboard", "--db", str(db), "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder,
        )
        try:
            _wait_healthy(f"http://127.0.0.1:{port}", process)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(process)


def _ensure_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, check=True, capture_output=True,
                       timeout=900)
    assert CHROMIUM.exists(), "Debian's chromium is missing: run `apt-get install chromium` (as root)"


@pytest.fixture
def browser():
    _ensure_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def settle(page) -> None:
    """Until the script has finished and tables and charts have drawn."""
    from playwright.sync_api import expect

    page.wait_for_load_state("networkidle")
    expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0, timeout=180_000)
    for placeholder in ('[data-testid="stSkeleton"]', '[data-testid="stSkeletonElement"]'):
        expect(page.locator(placeholder)).to_have_count(0, timeout=180_000)
    page.wait_for_timeout(800)


@pytest.mark.parametrize(("path", "title", "name", "texts"), PAGES, ids=[p[2] for p in PAGES])
def test_every_page_cold_in_chromium(dashboard_db, tmp_path, browser, path, title, name, texts):
    from playwright.sync_api import expect

    with serve(dashboard_db, tmp_path) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.add_init_script(PAINTS)
        page.goto(f"{url}/{path}")
        for text in texts:
            expect(page.get_by_text(text, exact=False).first).to_be_visible(timeout=180_000)
        settle(page)
        paints = page.evaluate("window.__paints")
        shown = [paint for paint in paints if not paint["blank"]]
        assert shown and shown[0]["title"] == title, f"{name}: the first paint was {shown[:1]}, not the title"
        assert all(not paint["blank"] for paint in paints[paints.index(shown[0]):]), f"{name} went blank: {paints}"
        assert page.locator('[data-testid="stException"]').count() == 0, f"{name}: an exception is shown"
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0, f"{name}: an error is shown"
        cut = page.evaluate("""Array.from(document.querySelectorAll('[data-testid="stMetricValue"] p'))
            .filter(p => p.scrollWidth > p.clientWidth + 1).map(p => p.innerText)""")
        assert cut == [], f"{name}: headline figures cut off: {cut}"
        page.screenshot(path=str(tmp_path / f"{name}.png"))
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


@contextmanager
def canary() -> Iterator[tuple[str, list[str]]]:
    """A server that notes every request it gets: the URL hostile text points at."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            hits.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_recorded_text_is_shown_as_text_and_fetches_nothing(tmp_path, browser):
    from playwright.sync_api import expect

    with canary() as (url_of_canary, hits):
        db = hostile_store.build(tmp_path / "hostile.duckdb", url_of_canary)
        name = hostile_store.hostile("chat-app", "name", url_of_canary)
        tag = "=".join(hostile_store.hostile(v, f"tag-{k}", url_of_canary) for k, v in (("key", "env"), ("value", "prod")))
        chosen = urllib.parse.urlencode({"run": name, "tag": tag})  # the filters show them as chips
        views = ["", "prompt_cache", "compaction", "failures", "evals?eval_run_id=E2", "run_explorer?run_id=R1",
                 f"run_explorer?run_id=R2&{chosen}", "run_explorer?run_id=R2a"]
        with serve(db, tmp_path) as url:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            for view in views:
                page.goto(f"{url}/{view}")
                settle(page)
                for box in page.locator('[data-testid="stMultiSelect"]').all()[:6]:  # options drawn
                    box.click()
                    page.keyboard.press("Escape")
                settle(page)
            for view, shown in (("R2", "Hi Grace. ![x]("), ("R1", "**bold-prompt** :red[prompt] $x^2$")):
                page.goto(f"{url}/run_explorer?run_id={view}")
                settle(page)
                expect(page.get_by_text(shown, exact=False).first).to_be_visible(timeout=180_000)
            page.wait_for_timeout(2000)  # any image a page asked for has been requested by now
        assert hits == [], f"the browser fetched what recorded text pointed at: {sorted(set(hits))}"
