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

from playwright.sync_api import expect, sync_playwright

HERE = Path(__file__).resolve().parent
PAGES = ["", "prompt_cache", "compaction", "failures", "evals", "run_explorer"]


def showcase(path: str, db: Path) -> str:
    """The view a page's shot shows: the Run explorer on the support agent's most expensive run
    (tools, cache reads), the Evals page on the gate run that caught a regression."""
    from workbench.store import queries

    def pick(con):
        if path == "run_explorer":
            runs = queries.top_runs(con, queries.Filters(run_names=("support-agent",)), limit=1)
            return f"?run_id={runs['run_id'][0]}"
        if path == "evals":
            history = queries.eval_history(con, queries.Filters())
            caught = history.filter(history["verdict"] == "regression")
            return f"?eval_run_id={caught['eval_run_id'][0]}" if caught.height else ""
        return ""

    return queries.read(db, db.parent / "spool", pick)


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
        for _ in range(480):
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
                page.goto(f"http://127.0.0.1:{port}/{path}{showcase(path, folder / 'workbench.duckdb')}")
                page.wait_for_load_state("networkidle")
                # until the script has finished and every table and chart has drawn
                expect(page.locator('[data-testid="stMetric"]').first).to_be_visible(timeout=180_000)
                expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0, timeout=120_000)
                for placeholder in ('[data-testid="stSkeleton"]', '[data-testid="stSkeletonElement"]'):
                    expect(page.locator(placeholder)).to_have_count(0, timeout=120_000)
                page.wait_for_timeout(1500)
                page.screenshot(path=str(HERE / "screenshots" / f"{path or 'overview'}.png"))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
