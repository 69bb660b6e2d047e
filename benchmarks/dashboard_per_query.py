"""The cost of each costly dashboard query on one store, read from the rollups and from the calls
themselves side by side, in one process: CPU time (all threads) and wall time of each, per filter
scenario of `dashboard_queries.py`, after a warm-up. Prints a Markdown table; nothing is appended.

    python benchmarks/dashboard_per_query.py --db STORE [--repeats N] [--scenarios "no filter,..."]

Build the store with `dashboard_queries.py --generate-only` (e.g. 10,000,000 calls)."""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_queries import SCENARIOS  # noqa: E402

from workbench.store import queries as q  # noqa: E402
from workbench.store import rollup  # noqa: E402
from workbench.store.db import open_store  # noqa: E402
from workbench.store.queries._base import _frame_exec, _Sql  # noqa: E402


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    fn()
    cpu, wall = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), _cpu()
        fn()
        cpu.append((_cpu() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    print("| filters | query | CPU ms | wall ms |\n|---|---|---|---|")
    with open_store(args.db, read_only=True) as con:
        def hit_runs(f: q.Filters, rolled: bool) -> Callable[[], None]:
            built = _Sql(f)
            return lambda: _frame_exec(con, f"CREATE OR REPLACE TEMP TABLE _bench_hits AS WITH RECURSIVE "
                                       f"{built._hit_runs(rolled)} SELECT run_id FROM hit_runs", built.params)

        for name in args.scenarios.split(","):
            f = SCENARIOS[name]
            queries = {
                "unstable_prefix_runs from the calls": lambda: q.unstable_prefix_runs(con, f, raw=True),
                "unstable_prefix_runs from call_run_rollup": lambda: q.unstable_prefix_runs(con, f),
                "spend outside runs from the calls": lambda: q.outside_runs_spend(con, f, raw=True),
                "spend outside runs from call_run_rollup": lambda: q.outside_runs_spend(con, f),
                "spend_cube from call_rollup": lambda: q.spend_cube(con, f),
                "spend_by model (quantile_cont)": lambda: q.spend_by(con, f, "model"),
                "compaction_sources": lambda: q.compaction_sources(con, f),
                "write_waste": lambda: q.write_waste(con, f),
                "changing_regions": lambda: q.changing_regions(con, f),
                "run_totals": lambda: q.run_totals(con, f),
                "both rollups count every call": lambda: (rollup.whole(con), rollup.whole(con, rollup.RUNS)),
            }
            if f.call_level:
                queries["runs a call-level filter keeps, from the calls"] = hit_runs(f, rolled=False)
                queries["runs a call-level filter keeps, from call_run_rollup"] = hit_runs(f, rolled=True)
            for label, fn in queries.items():
                cpu, wall = _timed(fn, args.repeats)
                print(f"| {name} | {label} | {cpu:.0f} | {wall:.0f} |", flush=True)


if __name__ == "__main__":
    main()
