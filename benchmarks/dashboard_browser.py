"""Time until a dashboard page shows its numbers in headless Chromium, cold (the first request after
the server started), beside a trivial Streamlit page (a title and one metric) served the same way
in the same browser, alternating, several times each.

    python benchmarks/dashboard_browser.py --db STORE [--repeats N] [--pages overview,failures]

`time to numbers`: from `page.goto` until the first `st.metric` value with a digit is visible
(each page's headline figures are metrics). `warm`: the same page reloaded on the same server
(Streamlit's cache then holds the page's data for TTL_S seconds, so a reload within it reads nothing).
Build a store with `python benchmarks/dashboard_queries.py --calls 1000000 --with-bodies --spans
--db /tmp/x.duckdb --generate-only`. Appends its results to benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
TRIVIAL = 'import streamlit as st\nst.title("Trivial")\nst.metric("Calls", "1,234")\n'
STREAMLIT_FLAGS = ["--server.headless", "true", "--browser.gatherUsageStats", "false",
                   "--server.fileWatcherType", "none", "--client.toolbarMode", "viewer",
                   "--global.developmentMode", "false"]
NUMBERS = """() => Array.from(document.querySelectorAll('[data-testid="stMetricValue"]'))
    .some(e => /[0-9]/.test(e.innerText))"""


def _port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def server(command: list[str], env: dict, port: int, log: Path):
    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as answer:
                        if answer.read().strip() == b"ok":
                            break
                except OSError:
                    time.sleep(0.1)
            else:
                raise RuntimeError(f"no answer on port {port}; see {log}")
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


def time_to_numbers(browser, url: str) -> tuple[float, float]:
    """Seconds from the request to the first metric with a digit: cold, then reloaded."""
    out = []
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    try:
        for _ in range(2):
            started = time.perf_counter()
            page.goto(url)
            page.wait_for_function(NUMBERS, timeout=180_000, polling=10)
            out.append(time.perf_counter() - started)
    finally:
        page.close()
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pages", default="overview,failures,prompt_cache,compaction")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="wb-browser-"))
    trivial = folder / "trivial.py"
    trivial.write_text(TRIVIAL, encoding="utf-8")
    env = {**os.environ, "WORKBENCH_SPOOL_DIR": str(folder / "spool")}
    env.pop("WORKBENCH_DASHBOARD_PASSWORD", None)
    pages = {"trivial streamlit page": None, **{name: name for name in args.pages.split(",")}}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in pages}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for _ in range(args.repeats):
                for name, path in pages.items():  # alternating: load changes hit both alike
                    port = _port()
                    if path is None:
                        command = [sys.executable, "-m", "streamlit", "run", str(trivial), "--server.port", str(port),
                                   *STREAMLIT_FLAGS]
                        url = f"http://127.0.0.1:{port}/"
                    else:
                        command = [sys.executable, "-m", "workbench", "dashboard", "--db", str(args.db),
                                   "--port", str(port)]
                        url = f"http://127.0.0.1:{port}/" + ("" if path == "overview" else path)
                    with server(command, env, port, folder / "server.log") as _:
                        results[name].append(time_to_numbers(browser, url))
                    print(f"{name:24} cold {results[name][-1][0]:.2f} s, warm {results[name][-1][1]:.2f} s", flush=True)
        finally:
            browser.close()
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    lines = ["", f"## Dashboard in Chromium: time to numbers — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"`python benchmarks/dashboard_browser.py --db {args.db.name} --repeats {args.repeats}` over "
             f"{args.db.stat().st_size / 1e6:,.0f} MB store; load average at the end {load}; {os.cpu_count()} cores.",
             "Seconds from the request to the first metric with a digit, headless Chromium (Debian), a fresh server "
             "per sample (cold), then a reload on it (warm); best and median of the samples.", "",
             "| page | cold best | cold median | warm median | ratio to trivial (cold median) |", "|---|---|---|---|---|"]
    base = statistics.median(cold for cold, _ in results["trivial streamlit page"])
    for name, samples in results.items():
        cold = [c for c, _ in samples]
        lines.append(f"| {name} | {min(cold):.2f} | {statistics.median(cold):.2f} | "
                     f"{statistics.median(w for _, w in samples):.2f} | {statistics.median(cold) / base:.2f} |")
    print("\n".join(lines))
    if not args.no_write:
        with open(Path(__file__).resolve().parent / "RESULTS.md", "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
