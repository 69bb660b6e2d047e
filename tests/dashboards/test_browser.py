"""The dashboard in a real browser: `workbench dashboard` serves the fixture store, headless
Chromium (Debian's, driven by Playwright) loads every page, the key figures are visible, no error
box is shown, and each page's screenshot is saved: to docs/screenshots/ for the README when
WORKBENCH_UPDATE_SCREENSHOTS=1, else beside the test's temporary files (a test run leaves the
checkout as it was).

Chromium comes from Debian (Playwright's own browser download is blocked here): when it is missing
and the tests run as root on Debian, as on a fresh machine of this project, the test installs it with
apt-get; anywhere else it fails with the command to run. Never a skip."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import dashboard_store as fx
from workbench.money import format_amount

CHROMIUM = Path("/usr/bin/chromium")
README_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
CALLS = fx.call_rows()
COST = {c["call_id"]: c["cost_micros"] or 0 for c in CALLS}
# url path, screenshot name, texts that must be visible
PAGES = [
    ("", "overview", ["Overview", format_amount(sum(c["cost_micros"] or 0 for c in CALLS if not c["replayed"])),
                      "+ 1 unpriced calls", "calls are unpriced"]),
    ("prompt_cache", "prompt_cache", ["Prompt cache", "Request hit rate", "40.0%"]),
    ("compaction", "compaction", ["Compaction", format_amount(sum(x[8] for x in fx.COMPACTIONS))]),
    ("failures", "failures", ["Failures", format_amount(sum(COST[i] for i in ("c04", "c05", "c07", "c08")))]),
    ("evals", "evals", ["Evals", "Gate verdicts"]),
    ("run_explorer?run_id=R1", "run_explorer", ["Run explorer", "Hello, Ada Lovelace!", "lookup_person"]),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float = 60) -> None:
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


@pytest.fixture
def server(dashboard_db, tmp_path):
    port = _free_port()
    env = {**os.environ, "WORKBENCH_SPOOL_DIR": str(tmp_path / "spool")}
    log = open(tmp_path / "dashboard.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "workbench", "dashboard", "--db", str(dashboard_db), "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _ensure_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, check=True, capture_output=True,
                       timeout=900)
    assert CHROMIUM.exists(), "Debian's chromium is missing: run `apt-get install chromium` (as root)"


def test_every_page_in_chromium(server, tmp_path):
    _ensure_chromium()
    from playwright.sync_api import expect, sync_playwright

    update = os.environ.get("WORKBENCH_UPDATE_SCREENSHOTS") == "1"
    folder = README_SCREENSHOTS if update else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for path, name, texts in PAGES:
                page.goto(f"{server}/{path}")
                for text in texts:
                    expect(page.get_by_text(text, exact=False).first).to_be_visible(timeout=30_000)
                # let charts and the last elements settle before checking for errors and shooting
                page.wait_for_load_state("networkidle")
                expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0, timeout=30_000)
                # tables and charts render after the script finishes: wait until nothing is a placeholder
                for placeholder in ('[data-testid="stSkeleton"]', '[data-testid="stSkeletonElement"]'):
                    expect(page.locator(placeholder)).to_have_count(0, timeout=30_000)
                page.wait_for_timeout(800)
                assert page.locator('[data-testid="stException"]').count() == 0, f"{name}: an exception is shown"
                assert page.locator('[data-testid="stAlertContentError"]').count() == 0, f"{name}: an error is shown"
                page.screenshot(path=str(folder / f"{name}.png"))
                assert (folder / f"{name}.png").stat().st_size > 10_000
        finally:
            browser.close()
