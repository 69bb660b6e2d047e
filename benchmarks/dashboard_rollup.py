"""The dashboard's queries before and after a change, in one run: every page (and the sidebar's
filter options, and the Overview's headline apart) under each filter scenario of
`dashboard_queries.py`, timed in a fresh process per page and side, the two sides one after the
other. "Before" runs the code of another source tree (e.g. `git archive main`) on its own copy of
the store (an older schema cannot open a migrated store); "after" runs this tree.

    python benchmarks/dashboard_rollup.py --before-src DIR --before-db STORE --db STORE [--repeats N]
        [--label TEXT] [--no-write] [--scenarios NAME ...] [--pages NAME ...]

Build the stores with `dashboard_queries.py --generate-only` (an older tree's generator makes the
"before" store; a copy of it opened once by this tree is migrated, and the migration fills the rollup).
Besides `dashboard_queries.py`'s scenarios, a run name alone and a tag alone; besides the pages, the
Overview as the dashboard reads it (`overview (2 reads)`: its headline and its tables, each on a
connection of its own, sharing their run sets where the tree can, `queries.run_sets`, and what their
scopes computed, `queries.scope`'s `kept`, as the dashboard does).
Reports, per page, the median CPU time (all threads) and wall time of its queries on an open
connection, after one warm-up; appends them to benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_queries import SCENARIOS as QUERY_SCENARIOS  # noqa: E402
from workbench.store.queries import Filters  # noqa: E402

SCENARIOS = {**QUERY_SCENARIOS, "run name": Filters(run_names=("support-bot",)), "tag": Filters(tags=("env=prod",))}

ROOT = Path(__file__).resolve().parent.parent
# the page's queries in the tree on sys.path: same code for both sides (both trees name them alike)
WORKER = r"""
import inspect, json, statistics, sys, time
from datetime import date
from workbench.store import queries as q
from workbench.store.db import open_store
args = json.loads(sys.argv[1])
f = q.Filters(**{k: date.fromisoformat(v) if k.startswith("date") and v else tuple(v) if isinstance(v, list) else v
                 for k, v in args["filters"].items()})
page = args["page"]
with open_store(args["db"], read_only=True) as con:
    con.execute("SET enable_progress_bar = false")  # a long query's bar would end on stdout, before the result
    run_id = q.run_choices(con, q.Filters(), limit=1)["run_id"][0]
    def overview_reads(con, f):  # as the dashboard reads it: two reads, the run sets (and the values
        # their scopes computed) shared when the tree can
        out, sets, kept = {}, None, {}
        for part in (q.overview_headline, q.overview_tables):
            with open_store(args["db"], read_only=True) as part_con:
                part_con.execute("SET enable_progress_bar = false")
                if not hasattr(q, "run_sets") or not (f.run_level or f.call_level):
                    out.update(part(part_con, f))
                    continue
                sets = q.run_sets(part_con, f) if sets is None else sets
                shared = {"kept": kept} if "kept" in inspect.signature(q.scope).parameters else {}
                with q.scope(part_con, f, sets, **shared):
                    out.update(part(part_con, f))
        return out
    fn = {"(sidebar options)": lambda con, f: (q.filter_options(con), q.store_counts(con)),
          "overview headline": q.overview_headline, "overview (2 reads)": overview_reads, **q.PAGES}[page]
    kwargs = {"run_id": run_id} if page == "run_explorer" else {}
    fn(con, f, **kwargs)
    wall, cpu = [], []
    for _ in range(args["repeats"]):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn(con, f, **kwargs)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
print(json.dumps({"wall_ms": statistics.median(wall), "cpu_ms": statistics.median(cpu)}))
"""
PAGES = ("(sidebar options)", "overview headline", "overview", "overview (2 reads)", "prompt_cache", "compaction",
         "failures", "run_explorer")


def _time(src: Path, db: Path, page: str, filters: dict, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", WORKER, json.dumps(
        {"db": str(db), "page": page, "filters": filters, "repeats": repeats})],
        env=env, capture_output=True, text=True, check=True, cwd=src)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before-src", type=Path, required=True)
    parser.add_argument("--before-db", type=Path, required=True)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", default="")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--scenarios", nargs="*", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--pages", nargs="*", choices=PAGES, default=list(PAGES))
    args = parser.parse_args()
    rows, loads = [], []
    for scenario, f in ((name, SCENARIOS[name]) for name in args.scenarios):
        filters = {k: (v.isoformat() if hasattr(v, "isoformat") else list(v) if isinstance(v, tuple) else v)
                   for k, v in asdict(f).items()}
        for page in args.pages:
            if page == "(sidebar options)" and scenario != "no filter":
                continue
            before = _time(args.before_src, args.before_db, page, filters, args.repeats)
            after = _time(ROOT, args.db, page, filters, args.repeats)
            loads.append(os.getloadavg()[0])
            rows.append((scenario, page, before, after))
            print(f"{scenario:28} {page:18} before cpu {before['cpu_ms']:8.1f} wall {before['wall_ms']:8.1f} | "
                  f"after cpu {after['cpu_ms']:8.1f} wall {after['wall_ms']:8.1f} | "
                  f"cpu ratio {after['cpu_ms'] / max(before['cpu_ms'], 0.01):.3f}", flush=True)
    if args.no_write:
        return
    lines = ["", f"## Dashboard queries before and after the daily rollup{' — ' + args.label if args.label else ''} "
             f"({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"`python benchmarks/dashboard_rollup.py --before-src {args.before_src} --before-db {args.before_db} "
             f"--db {args.db} --repeats {args.repeats} --scenarios {' '.join(map(repr, args.scenarios))} "
             f"--pages {' '.join(map(repr, args.pages))}`: per page, a fresh process per side, one warm-up, the "
             f"median of {args.repeats}. Load average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f} on "
             f"{os.cpu_count()} cores: compare CPU times and the same-run ratio, not wall times.", "",
             "| filters | page | before CPU ms | after CPU ms | after / before | before wall ms | after wall ms |",
             "|---|---|---|---|---|---|---|"]
    for scenario, page, before, after in rows:
        lines.append(f"| {scenario} | {page} | {before['cpu_ms']:.0f} | {after['cpu_ms']:.0f} | "
                     f"{after['cpu_ms'] / max(before['cpu_ms'], 0.01):.2f} | {before['wall_ms']:.0f} | {after['wall_ms']:.0f} |")
    with open(ROOT / "benchmarks" / "RESULTS.md", "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
