"""Regenerate the README's dashboard screenshots from a fresh `workbench demo` store:
`python docs/screenshots.py` (needs Debian's chromium at /usr/bin/chromium)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
PAGES = ["", "prompt_cache", "compaction", "failures", "evals", "run_explorer"]


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="wb-shots-"))
    env = {**os.environ, "WORKBENCH_DB": str(folder / "workbench.duckdb")}
    subprocess.run([sys.executable, "-m", "workbench", "demo"], cwd=HERE.parent, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "workbench", "dashboard", "--port", str(port)], cwd=HERE.parent,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                      "--disable-sync"],
            )
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for path in PAGES:
                page.goto(f"http://127.0.0.1:{port}/{path}")
                page.wait_for_load_state("networkidle")
                page.wait_for_timeout(4000)
                page.screenshot(path=str(HERE / "screenshots" / f"{path or 'overview'}.png"))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
