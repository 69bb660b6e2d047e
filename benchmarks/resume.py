"""Never pay twice: a 100-call batch job (`workbench.demo.batch`, one run, `workbench.http_client()`
against the fake provider over HTTP) is SIGKILLed after call 60, once those 60 calls are in the
store, then resumed with `workbench.run("batch", resume=RUN_ID)`. Counts what the provider was
asked for (what was paid) and what the store shows.

    python benchmarks/resume.py [--calls 100] [--kill-at 60] [--no-write]

Appends its results to benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from workbench.demo import batch
from workbench.demo.fake_provider import FakeProvider
from workbench.demo.fake_server import FakeServer
from workbench.money import format_amount

RESULTS = Path(__file__).with_name("RESULTS.md")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--kill-at", type=int, default=60)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    provider = FakeProvider()
    server = FakeServer(provider)
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "wb.duckdb"
        started = time.perf_counter()
        first = batch.kill_when_stored(batch.start(server.url, db, "--pause-after", str(args.kill_at), calls=args.calls),
                                       db, args.kill_at)
        killed_s = time.perf_counter() - started
        paid_before = len(provider.requests)
        started = time.perf_counter()
        job = batch.start(server.url, db, "--resume", first, calls=args.calls)
        if job.wait(600) != 0:
            sys.exit(f"the resumed job failed: {job.stderr.read()}")
        resumed_s = time.perf_counter() - started
        server.close()
        batch.stored_count(db, first)  # ingests the resumed job's spool
        con = duckdb.connect(str(db), read_only=True)
        resumed = con.sql("SELECT run_id, billed_calls, billed_replayed_calls, billed_cost_micros, "
                          "billed_replayed_cost_micros FROM runs WHERE resumed_from_run_id = ?", params=[first]).fetchall()
        run_id, billed_calls, replayed_calls, billed_micros, replayed_micros = resumed[0]
        calls = con.sql("SELECT run_id, replayed, resumed_from_call_id IS NOT NULL, cost_micros, "
                        "epoch_us(ended_at) - epoch_us(started_at) FROM calls ORDER BY started_at").fetchall()
        con.close()
    first_paid = sum(cost for run, replayed, _, cost, _ in calls if run == first)
    live_ms = [us / 1000 for run, replayed, _, _, us in calls if run == run_id and not replayed]
    replay_ms = [us / 1000 for run, replayed, _, _, us in calls if run == run_id and replayed]
    linked = sum(1 for run, _, resumed_call, _, _ in calls if run == run_id and resumed_call)
    lines = [
        f"## Resume a killed batch job from the store — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        f"- machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average {', '.join(f'{load:.1f}' for load in os.getloadavg())} at the end",
        f"- command: `python benchmarks/resume.py --calls {args.calls} --kill-at {args.kill_at}`",
        f"- the job: {args.calls} chat calls in one run through `workbench.http_client()` against the fake provider "
        f"over HTTP, SIGKILLed after call {args.kill_at} (once those calls were in the store: a kill loses at most "
        f"the calls of the last `flush_interval_s`, 0.5 s), then run again with `resume=RUN_ID`",
        f"- **paid: {len(provider.requests)} calls in total** ({paid_before} before the kill, "
        f"{len(provider.requests) - paid_before} after); the resumed run's bill: {billed_calls} live calls, "
        f"{format_amount(billed_micros, 'USD')} ({billed_micros:,} micro-cents), and {replayed_calls} replayed "
        f"({linked} linked to the call that paid), which would have cost {format_amount(replayed_micros, 'USD')} "
        f"({replayed_micros:,} micro-cents; the killed run paid {first_paid:,} for them)",
        f"- wall time: first run to the kill {killed_s:.2f} s, resumed run {resumed_s:.2f} s (process start included); "
        f"median call: replayed {statistics.median(replay_ms):.2f} ms, live {statistics.median(live_ms):.2f} ms",
        "",
    ]
    print("\n".join(lines))
    if not args.no_write:
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
