"""The cost report on a big store: `workbench report cost --by tenant` over 1,000,000 calls in
100,000 runs tagged with 50 tenants (the store of `dashboard_queries.py`), grouped by the tag through
the run tree, with the latency percentiles beside the cost. Times the report's queries on an open
connection (median of several), the whole command as a user runs it (a new process: start-up, spool
check, open read-only, query, print), and the other breakdowns for comparison.

    python benchmarks/cost_report.py [--calls N] [--runs N] [--db PATH] [--no-write]

Appends its results to benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import polars as pl

from dashboard_queries import generate
from workbench.store import queries as q
from workbench.store.db import open_store

BREAKDOWNS = ("tenant", "model", "prompt", "day", "run")


def report_queries(con: duckdb.DuckDBPyConnection, by: str) -> pl.DataFrame:
    """What `workbench report cost --by BY` reads (see `workbench/cli/reports.py`)."""
    f = q.Filters()
    with q.scope(con, f):
        frame = q.spend_by(con, f, by)
        q.currency_totals(q.spend_cube(con, f))
        q.unpriced_models(con, f)
    return frame


def time_queries(db: Path, repeats: int) -> dict[str, tuple[float, float]]:
    out = {}
    with open_store(db, read_only=True) as con:
        for by in BREAKDOWNS:
            report_queries(con, by)  # first touch loads the columns
            wall, cpu = [], []
            for _ in range(repeats):
                started, started_cpu = time.perf_counter(), time.process_time()
                frame = report_queries(con, by)
                wall.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - started_cpu) * 1000)
            out[by] = (statistics.median(wall), statistics.median(cpu), frame.height)
            print(f"--by {by:8} {out[by][0]:7.1f} ms (cpu {out[by][1]:7.1f} ms), {frame.height} rows", flush=True)
    return out


def time_command(db: Path, repeats: int) -> float:
    command = [sys.executable, "-m", "workbench", "report", "cost", "--by", "tenant", "--db", str(db),
               "--format", "csv"]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        times.append((time.perf_counter() - started) * 1000)
        assert result.returncode == 0, result.stderr
    print(f"`workbench report cost --by tenant`: {statistics.median(times):.0f} ms", flush=True)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--db", type=Path, default=None, help="reuse or create the store here")
    parser.add_argument("--no-write", action="store_true", help="do not append to benchmarks/RESULTS.md")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="wb-cost-"))
    db = args.db or folder / "bench.duckdb"
    if not db.exists():
        timings = generate(db, args.calls, args.runs)
        print(f"generated in {timings['generate_s']:.1f}s, inserted in {timings['insert_s']:.1f}s", flush=True)
    queries = time_queries(db, args.repeats)
    command = time_command(db, max(1, args.repeats // 2))
    if not args.no_write:
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        lines = [
            "", f"## Cost report by a tag ({datetime.now(timezone.utc):%Y-%m-%d})", "",
            f"`python benchmarks/cost_report.py`: {args.calls:,} calls in {args.runs:,} runs (one in ten nested), "
            f"tagged with 50 tenants, the store of `dashboard_queries.py`. {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, DuckDB {duckdb.__version__}, polars {pl.__version__}; load average "
            f"during the run: {load}.", "",
            f"`workbench report cost --by tenant` as a user runs it (a new process: start-up, spool check, "
            f"open read-only, the report's queries, the CSV printed): **{command:.0f} ms** (median).", "",
            "The report's queries on an open connection (spend and latency percentiles per group, the totals per "
            "currency, the unpriced models), median of " f"{args.repeats}:", "",
            "| --by | wall ms | CPU ms | rows |", "|---|---|---|---|",
            *(f"| {by} | {wall:.0f} | {cpu:.0f} | {rows} |" for by, (wall, cpu, rows) in queries.items()),
        ]
        path = Path(__file__).resolve().parent / "RESULTS.md"
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    if args.db is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
