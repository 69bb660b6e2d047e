"""The DuckLake store beside the local file: the ingest rate of spooled calls into each (the same
spool files, the same batches), then the dashboard's pages on a lake holding the big store of
`dashboard_queries.py` (copied in with `workbench store copy`'s code, then maintained).

Needs a PostgreSQL database for the catalog and the `lake` extra:

    python benchmarks/lake.py --catalog 'dbname=bench host=127.0.0.1 port=5432 user=postgres' \
        --pages-catalog 'dbname=bench_pages host=127.0.0.1 port=5432 user=postgres' --data-path /tmp/bench-lake/ [--spooled 20000] [--calls 1000000] [--runs 100000] [--repeats 3] [--scenarios 4]

Appends its results to benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dashboard_queries as dq  # noqa: E402 - the big store and the page timings, shared

from workbench.config import settings  # noqa: E402
from workbench.store import lake  # noqa: E402
from workbench.store.copy import copy_store  # noqa: E402
from workbench.store.db import open_store  # noqa: E402
from workbench.store.ingest import ingest_spools  # noqa: E402


def write_spool(folder: Path, calls: int) -> int:
    """Spool files of `calls` calls with their bodies, as one recorder writes them; their bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"bench-host-{os.getpid()}-0000beef.jsonl", "w") as spool:
        for n in range(calls):
            row = {"call_id": f"c{n:09d}", "run_id": f"r{n // 10:08d}", "provider": "openai", "wire": "openai.chat",
                   "model_requested": "gpt-a", "model_served": "gpt-a", "http_status": 200, "settled": True,
                   "replayed": False, "input_tokens": 100 + n % 50, "output_tokens": 20, "cost_micros": 1000 + n % 7,
                   "currency": "USD", "started_at": "2026-11-30T10:00:00+00:00", "ended_at": "2026-11-30T10:00:01+00:00"}
            spool.write(json.dumps({"kind": "call", "row": row}) + "\n")
            spool.write(json.dumps({"kind": "call_body", "row": {"call_id": row["call_id"], "output_text": "ok " * 20}}) + "\n")
    return sum(path.stat().st_size for path in folder.glob("*.jsonl"))


def ingest_rate(store: str | Path, spool: Path, calls: int) -> dict:
    with open_store(store):
        pass  # created and migrated before the clock starts
    started = time.perf_counter()
    ingested = ingest_spools(store, spool)
    seconds = time.perf_counter() - started
    with open_store(store, read_only=True) as con:
        count, cost = con.execute("SELECT count(*), sum(cost_micros) FROM calls").fetchall()[0]
    assert count == calls, (count, calls)
    return {"seconds": seconds, "records": ingested, "calls_per_s": calls / seconds, "cost_micros": cost}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--catalog", required=True, help="a PostgreSQL connection string for an empty database")
    parser.add_argument("--pages-catalog", required=True, help="another empty database, for the dashboard's lake")
    parser.add_argument("--data-path", required=True, help="the lake's data folder")
    parser.add_argument("--spooled", type=int, default=20_000, help="calls spooled for the ingest rate")
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scenarios", type=int, default=len(dq.SCENARIOS), help="time only the first N filter sets")
    parser.add_argument("--no-write", action="store_true", help="do not append to benchmarks/RESULTS.md")
    args = parser.parse_args()
    os.environ["WORKBENCH_LAKE_DATA_PATH"] = args.data_path
    settings.cache_clear()
    url = "ducklake:postgres:" + args.catalog
    folder = Path(tempfile.mkdtemp(prefix="wb-lake-bench-"))
    try:
        spool_bytes = write_spool(folder / "spool-file", args.spooled)
        shutil.copytree(folder / "spool-file", folder / "spool-lake")
        file_rate = ingest_rate(folder / "ingest.duckdb", folder / "spool-file", args.spooled)
        lake_rate = ingest_rate(url, folder / "spool-lake", args.spooled)
        assert file_rate["cost_micros"] == lake_rate["cost_micros"]
        print(f"ingest: file {file_rate['calls_per_s']:,.0f} calls/s, lake {lake_rate['calls_per_s']:,.0f} calls/s",
              flush=True)

        big = folder / "big.duckdb"
        timings = dq.generate(big, args.calls, args.runs)
        started = time.perf_counter()
        pages_url = "ducklake:postgres:" + args.pages_catalog
        os.environ["WORKBENCH_LAKE_DATA_PATH"] = str(Path(args.data_path) / "pages") + "/"
        settings.cache_clear()
        before, after = copy_store(big, pages_url)
        assert before == after, (before, after)
        copy_s = time.perf_counter() - started
        started = time.perf_counter()
        with open_store(pages_url) as con:
            maintained = lake.maintain(con, 0)
            files = lake.data_files(con)
        maintain_s = time.perf_counter() - started
        print(f"copied {args.calls:,} calls into the lake in {copy_s:.1f}s, maintained in {maintain_s:.1f}s", flush=True)
        dq.SCENARIOS = dict(list(dq.SCENARIOS.items())[:args.scenarios])
        results = dq.time_pages(Path(pages_url), args.repeats)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if not args.no_write:
        write_results(args, spool_bytes, file_rate, lake_rate, timings, copy_s, maintain_s, maintained, files, results)


def write_results(args, spool_bytes, file_rate, lake_rate, timings, copy_s, maintain_s, maintained, files, results):
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    lines = [
        "", f"## DuckLake store beside the file — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
        f"`python benchmarks/lake.py`: a DuckLake with its catalog in PostgreSQL 15 on this machine and its data "
        f"in a local folder. {os.cpu_count()} cores, Python {platform.python_version()}, DuckDB {duckdb.__version__}; "
        f"load average during the run: {load} (other work shared the machine).", "",
        f"Ingest, the same spool ({args.spooled:,} calls with bodies, {spool_bytes / 1e6:.1f} MB, batches of "
        "8 MB, each committed with its offsets):", "",
        "| store | seconds | calls/s |", "|---|---:|---:|",
        f"| local file | {file_rate['seconds']:.2f} | {file_rate['calls_per_s']:,.0f} |",
        f"| lake | {lake_rate['seconds']:.2f} | {lake_rate['calls_per_s']:,.0f} |", "",
        f"Dashboard pages on a lake of {args.calls:,} calls and {args.runs:,} runs (the store of "
        f"`dashboard_queries.py`, generated in {timings['generate_s']:.0f} s; `store copy` into the lake "
        f"{copy_s:.0f} s; `store maintain` {maintain_s:.1f} s, {files} data files after it: {maintained}). "
        "Median ms per page: queries on an open connection / the full read path (attach the lake, query, "
        "detach) / CPU of the queries. Compare with the file's rows in the Dashboard queries sections above.", "",
        "| filters | " + " | ".join(dq.q.PAGES) + " |", "|---|" + "---|" * len(dq.q.PAGES),
    ]
    for scenario in dq.SCENARIOS:
        row = {r["page"]: r for r in results if r["scenario"] == scenario}
        lines.append(f"| {scenario} | " + " | ".join(
            f"{row[p]['queries_ms']:.0f} / {row[p]['read_path_ms']:.0f} / {row[p]['cpu_ms']:.0f}" for p in dq.q.PAGES)
            + " |")
    with open(Path(__file__).resolve().parent / "RESULTS.md", "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
