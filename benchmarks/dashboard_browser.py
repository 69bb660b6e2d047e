"""Time until a dashboard page shows its numbers in headless Chromium, cold (a fresh server process
and a fresh browser context per sample), beside a trivial Streamlit page (a title and one metric)
served the same way in the same browser, alternating, several times each.

    python benchmarks/dashboard_browser.py [--db STORE] [--repeats N] [--pages overview,failures]
        [--against TREE] [--profile] [--no-write]

`--db` defaults to a 1,000,000-call store WITH bodies and spans (a million of each, plus 100,000 run
spans and 200 eval runs of 1,000 cases), built on first use by `dashboard_queries.generate` and kept
at /tmp/wb-browser-1m.duckdb for the next run. `--against TREE` serves another checkout's dashboard
too (e.g. `git -C main archive HEAD | tar -x -C /tmp/main`), alternating with this one.

Per sample: `start` (server process spawned until it answers /_stcore/health: its imports), `cold`
(from `page.goto` until the first `st.metric` value with a digit is visible: each page's headline
figures are metrics), the server's CPU (user+sys, /proc) and every Chromium process's spent between
the two (on a loaded machine the wall clock is noise; the CPU is what a page costs), then `warm` (the same
page reloaded on the same server). `--profile` wraps each script run of the server in cProfile on
the script thread's CPU clock and splits it: the store reads (`queries.read`), imports, the rest
(Streamlit elements, Altair, formatting). Appends its results to benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DB = Path("/tmp/wb-browser-1m.duckdb")
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
TRIVIAL = 'import streamlit as st\nst.title("Trivial")\nst.metric("Calls", "1,234")\n'
STREAMLIT_FLAGS = ["--server.headless", "true", "--browser.gatherUsageStats", "false",
                   "--server.fileWatcherType", "none", "--client.toolbarMode", "viewer",
                   "--global.developmentMode", "false", "--runner.magicEnabled", "false"]
NUMBERS = """() => Array.from(document.querySelectorAll('[data-testid="stMetricValue"]'))
    .some(e => /[0-9]/.test(e.innerText))"""
PAGES = "overview,prompt_cache,compaction,failures,evals,run_explorer"
# how every server is started: with another checkout's `workbench` (BENCH_TREE, ahead of the one
# installed in editable mode) and, with --profile, each script run (on its own thread) under cProfile
# on that thread's CPU clock; and the process's CPU time when a page draws its first figure
# (BENCH_NUMBERS_CPU: a metric whose value has a digit) is written down
LAUNCHER = """import itertools, os, runpy, sys, time
if os.environ.get("BENCH_TREE"):
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not (getattr(f, "__module__", None) or type(f).__module__).startswith("__editable__")]
    sys.path.insert(0, os.environ["BENCH_TREE"])
if os.environ.get("BENCH_PROFILE_DIR"):
    import cProfile
    from streamlit.runtime.scriptrunner import script_runner
    _run, _count = script_runner.ScriptRunner._run_script, itertools.count()
    def _profiled(self, rerun_data):
        profile = cProfile.Profile(time.thread_time)
        profile.enable()
        try:
            return _run(self, rerun_data)
        finally:
            profile.disable()
            profile.dump_stats(os.path.join(os.environ["BENCH_PROFILE_DIR"], f"run-{next(_count)}.prof"))
    script_runner.ScriptRunner._run_script = _profiled
import streamlit
from streamlit.delta_generator import DeltaGenerator
_metric = DeltaGenerator.metric
def _noted(self, label, value, *args, **kwargs):  # the process's CPU when the first figure is drawn
    if any(ch.isdigit() for ch in str(value)) and not os.path.exists(os.environ["BENCH_NUMBERS_CPU"]):
        with open(os.environ["BENCH_NUMBERS_CPU"], "w") as out:
            out.write(str(time.process_time()))
    return _metric(self, label, value, *args, **kwargs)
DeltaGenerator.metric = _noted
streamlit.metric = lambda *args, **kwargs: _noted(streamlit._main, *args, **kwargs)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def build_store(db: Path) -> None:
    """The 1M-call store with bodies and spans, and eval runs (the Evals page needs some to show figures)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from dashboard_queries import START, generate

    from workbench.store.db import open_store

    partial = db.with_name(db.name + ".partial")
    partial.unlink(missing_ok=True)
    generate(partial, 1_000_000, 100_000, with_bodies=True, with_spans=True)
    with open_store(partial) as con:
        con.execute(f"""
            INSERT INTO eval_runs BY NAME
            SELECT 'eval-' || i AS eval_run_id, ['support', 'triage'][i % 2 + 1] AS suite, 'prompt-' || (i % 8) AS prompt_id,
                   (i % 3 + 1)::VARCHAR AS prompt_version, 'hash-' || (i % 3) AS prompt_hash, 'gpt-a' AS model,
                   'replay' AS mode, 'abc123' AS git_commit, TIMESTAMPTZ '{START.isoformat()}' + to_hours(i * 10) AS started_at,
                   TIMESTAMPTZ '{START.isoformat()}' + to_hours(i * 10) + INTERVAL 1 MINUTE AS ended_at,
                   0.8 + (hash(i) % 100) / 1000 AS mean_score, 0.85 AS baseline_mean, 0.02 AS tolerance,
                   CASE WHEN i % 7 = 0 THEN 'regression' ELSE 'pass' END AS verdict, 1000 AS cases,
                   (hash(i, 1) % 50)::INTEGER AS failed_cases, 1000 * (hash(i, 2) % 5000) AS cost_micros, 1 AS epochs
            FROM range(200) t(i)""")
        con.execute("""
            INSERT INTO eval_results BY NAME
            SELECT 'eval-' || (i // 1000) AS eval_run_id, 'case-' || (i % 1000) AS case_id, 'run-' || (i % 100000) AS run_id,
                   (hash(i) % 100) / 100 AS score, 0.85 AS baseline_score, (hash(i) % 100) / 100 - 0.85 AS delta,
                   hash(i) % 100 >= 83 AS passed, hash(i, 3) % 5000 AS cost_micros, 'answer to case ' || (i % 1000) AS output
            FROM range(200000) t(i)""")
        con.execute("CHECKPOINT")
    partial.rename(db)
    shutil.rmtree(partial.with_name(partial.name + ".workbench"), ignore_errors=True)  # its lock folder


def _port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_s(pid: int) -> float:
    """User+sys CPU seconds of a process and its waited-for children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def chromium_cpu_s() -> float:
    """User+sys CPU seconds of every Chromium process below this one (browser, renderers, GPU,
    network): what the browser spent, which a loaded machine's wall clock hides."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents.setdefault(int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1]), []
                                   ).append(int(entry))
            except OSError:
                continue
    total, todo = 0.0, list(parents.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += parents.get(pid, [])
        try:
            if "chrom" in Path(f"/proc/{pid}/comm").read_text():
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    return total


@contextmanager
def server(command: list[str], env: dict, port: int, log: Path):
    """A server started now; yields its url, its pid and the seconds until it answered."""
    with open(log, "ab") as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as answer:
                        if answer.read().strip() == b"ok":
                            break
                except OSError:
                    time.sleep(0.05)
            else:
                raise RuntimeError(f"no answer on port {port}; see {log}")
            yield f"http://127.0.0.1:{port}", process.pid, time.perf_counter() - started
        finally:
            process.terminate()
            process.wait(timeout=30)


def sample(browser, url: str, pid: int) -> dict:
    """Cold: a fresh browser context's first request to a fresh server; then reloaded (warm)."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    try:
        page = context.new_page()
        before, browser_before = cpu_s(pid), chromium_cpu_s()
        started = time.perf_counter()
        page.goto(url)
        page.wait_for_function(NUMBERS, timeout=300_000, polling=10)
        cold, cold_cpu = time.perf_counter() - started, cpu_s(pid) - before
        browser_cpu = chromium_cpu_s() - browser_before
        started = time.perf_counter()
        page.reload()
        page.wait_for_function(NUMBERS, timeout=300_000, polling=10)
        return {"cold": cold, "cold_cpu": cold_cpu, "browser_cpu": browser_cpu, "warm": time.perf_counter() - started}
    finally:
        context.close()


def split_profiles(folder: Path, runs: int) -> dict | None:
    """The cold request's script runs' CPU seconds (its first `runs`), split: store reads, imports, the rest."""
    files = sorted(folder.glob("run-*.prof"), key=lambda path: int(path.stem.split("-")[1]))[:runs]
    if not files:
        return None
    stats = pstats.Stats(*map(str, files))
    total = reads = imports = 0.0
    for (path, _, name), (_, _, _, cumulative, _) in stats.stats.items():
        if name == "_run_script":
            total += cumulative
        elif name == "read" and path.endswith("queries/_base.py"):
            reads += cumulative
        elif name == "_find_and_load" and "importlib" in path:
            imports = max(imports, cumulative)  # nested imports count once: the outermost
    return {"runs": len(files), "script": total, "reads": reads, "imports": imports, "stats": stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help="built here when missing (1M calls, bodies, spans)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pages", default=PAGES)
    parser.add_argument("--against", type=Path, default=None, help="another checkout served alternately (e.g. main)")
    parser.add_argument("--profile", action="store_true", help="cProfile every script run (on its thread's CPU clock)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run stops its servers too
    if not args.db.exists():
        print(f"building {args.db} (1M calls with bodies and spans)…", flush=True)
        build_store(args.db)
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="wb-browser-"))
    trivial = folder / "trivial.py"
    trivial.write_text(TRIVIAL, encoding="utf-8")
    (folder / "launch.py").write_text(LAUNCHER, encoding="utf-8")
    trees = {"this tree": ROOT, **({"against": args.against.resolve()} if args.against else {})}
    variants = {"trivial streamlit page": (None, None)}
    for label, tree in trees.items():
        for name in args.pages.split(","):
            variants[name + ("" if len(trees) == 1 else f" ({label})")] = (tree, name)
    results: dict[str, list[dict]] = {name: [] for name in variants}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for _ in range(args.repeats):
                for name, (tree, path) in variants.items():  # alternating: load changes hit all alike
                    port = _port()
                    env = {**os.environ, "WORKBENCH_SPOOL_DIR": str(folder / "spool")}
                    env.pop("WORKBENCH_DASHBOARD_PASSWORD", None)
                    if tree is None:
                        script = str(Path(__import__("streamlit").__file__).parent / "__main__.py")
                        target, url = ["run", str(trivial)], f"http://127.0.0.1:{port}/"
                    else:  # as `workbench dashboard --db` runs it (its CLI execs into this command)
                        env.update(WORKBENCH_DB=str(args.db.resolve()), BENCH_TREE=str(tree))
                        script, target = str(tree / "dashboards" / "_server.py"), ["run", str(tree / "dashboards" / "app.py")]
                        url = f"http://127.0.0.1:{port}/" + ("" if path == "overview" else path)
                    # named per sample, not per port: a port is handed out again, and a figure's CPU file
                    # left by an earlier sample would be read as this one's
                    sample_no = sum(map(len, results.values()))
                    profiles = folder / f"profile-{sample_no}"
                    if args.profile:
                        profiles.mkdir()
                        env["BENCH_PROFILE_DIR"] = str(profiles)
                    numbers_cpu = folder / f"numbers-{sample_no}"
                    env["BENCH_NUMBERS_CPU"] = str(numbers_cpu)
                    command = [sys.executable, str(folder / "launch.py"), script, *target, "--server.port", str(port),
                               *STREAMLIT_FLAGS]
                    with server(command, env, port, folder / "server.log") as (url_base, pid, start):
                        start_cpu = cpu_s(pid)
                        measured = sample(browser, url, pid)
                    measured.update(start=start, start_cpu=start_cpu, profile=split_profiles(profiles, 2 if path == "run_explorer" else 1),
                                    numbers_cpu=float(numbers_cpu.read_text()) - start_cpu)
                    results[name].append(measured)
                    print(f"{name:32} start {start:.2f} s ({start_cpu:.2f} CPU), cold {measured['cold']:.2f} s "
                          f"({measured['cold_cpu']:.2f} s server CPU; {measured['numbers_cpu']:.2f} s to the first figure; "
                          f"{measured['browser_cpu']:.2f} s Chromium CPU), "
                          f"warm {measured['warm']:.2f} s", flush=True)
        finally:
            browser.close()
    report(args, results)


def report(args, results: dict[str, list[dict]]) -> None:
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    median = statistics.median
    command = f"python benchmarks/dashboard_browser.py --db {args.db} --repeats {args.repeats} --pages {args.pages}"
    command += (f" --against {args.against}" if args.against else "") + (" --profile" if args.profile else "")
    lines = ["", f"## Dashboard in Chromium: time to numbers — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"`{command}` over a {args.db.stat().st_size / 1e6:,.0f} MB store; load average at the end {load}; "
             f"{os.cpu_count()} cores.",
             "Cold: seconds from the request to the first metric with a digit, headless Chromium (Debian), a fresh "
             "server and browser context per sample. Server CPU (user+sys, all its threads) from its answer to the "
             "health check until its script drew the first figure (×: against the trivial page), and until the "
             "browser saw it (the script runs on meanwhile). Chromium CPU: every Chromium process's CPU from the "
             "request until the figure was seen; server + Chromium: both, and over the trivial page's (the excess). "
             "Start: the server's spawn until it answers (its CPU). "
             "Warm: a reload on the same server. Medians of the samples.", "",
             "| page | cold best | cold median | cold / trivial | server CPU to the first figure | server CPU until seen "
             "| Chromium CPU until seen | server + Chromium CPU (excess) | start (CPU) | warm |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    base = median(s["cold"] for s in results["trivial streamlit page"])
    base_cpu = median(s["numbers_cpu"] for s in results["trivial streamlit page"])
    base_both = median(s["cold_cpu"] + s["browser_cpu"] for s in results["trivial streamlit page"])
    for name, samples in results.items():
        cold = [s["cold"] for s in samples]
        figure_cpu = median(s["numbers_cpu"] for s in samples)
        both = median(s["cold_cpu"] + s["browser_cpu"] for s in samples)
        lines.append(f"| {name} | {min(cold):.2f} | {median(cold):.2f} | {median(cold) / base:.2f} | {figure_cpu:.2f} "
                     f"(×{figure_cpu / base_cpu:.1f}) | {median(s['cold_cpu'] for s in samples):.2f} | "
                     f"{median(s['browser_cpu'] for s in samples):.2f} | {both:.2f} ({both - base_both:+.2f}) | "
                     f"{median(s['start'] for s in samples):.2f} ({median(s['start_cpu'] for s in samples):.2f}) | "
                     f"{median(s['warm'] for s in samples):.2f} |")
    if args.profile:
        lines += ["", "The cold request's script run under cProfile (the script thread's CPU, s, medians; the run "
                  "explorer's two: it reruns once it picked a run):", "",
                  "| page | script runs | script CPU | store reads | imports | the rest |", "|---|---|---|---|---|---|"]
        for name, samples in results.items():
            split = [s["profile"] for s in samples if s["profile"]]
            if split:
                parts = {k: median(p[k] for p in split) for k in ("script", "reads", "imports")}
                lines.append(f"| {name} | {split[0]['runs']} | {parts['script']:.3f} | {parts['reads']:.3f} | "
                             f"{parts['imports']:.3f} | {parts['script'] - parts['reads'] - parts['imports']:.3f} |")
                print(f"\n-- {name}: top of the last sample's script profile (cumulative CPU s)")
                split[-1]["stats"].sort_stats("cumulative").print_stats(18)
    print("\n".join(lines))
    if not args.no_write:
        with open(ROOT / "benchmarks" / "RESULTS.md", "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
