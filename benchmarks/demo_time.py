"""`workbench demo` end to end, as a newcomer runs it: each run in a fresh process with a fresh store,
timed from start to exit (wall and CPU, the ingester processes included), then what the store holds.

    python benchmarks/demo_time.py [--runs 3] [--append]

Target: well under a minute on the project's 2-core machine. The best of the runs is the figure
(the machine is shared); the load average beside it says how shared it was."""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMAND = "workbench demo"


def one_run(folder: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the demo and every process it started) of one `workbench demo`."""
    db = folder / "workbench.duckdb"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "workbench", "demo", "--db", str(db)], cwd=REPO, check=True,
                   capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def store_figures(db: Path) -> dict:
    from workbench.store import queries

    def read(con):
        everything = queries.Filters()
        calls = queries.call_totals(con, everything).row(0, named=True)
        runs = queries.run_totals(con, everything).row(0, named=True)
        options = queries.filter_options(con)
        return calls, runs, options

    calls, runs, options = queries.read(db, db.parent / "spool", read)
    users = [tag for tag in options["tags"] if tag.startswith("user=")]
    return {
        "calls": calls["calls"], "top-level runs": runs["runs"], "nested runs": runs["nested_runs"],
        "days": (options["last_day"] - options["first_day"]).days + 1,
        "first day": options["first_day"], "last day": options["last_day"],
        "run names": len(options["run_names"]), "users": len(users), "models": len(options["models"]),
        "cache read tokens": calls["cache_read_tokens"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--append", action="store_true", help="append the section to benchmarks/RESULTS.md")
    args = parser.parse_args()
    timings = []
    with tempfile.TemporaryDirectory(prefix="wb-demo-time-") as scratch:
        for index in range(args.runs):
            folder = Path(scratch) / f"run{index}"
            folder.mkdir()
            load = os.getloadavg()
            wall, cpu = one_run(folder)
            timings.append((wall, cpu, load))
            print(f"run {index + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU (load average {load[0]:.1f})", flush=True)
        figures = store_figures(Path(scratch) / "run0" / "workbench.duckdb")
    best = min(timings)
    lines = [
        f"## Demo time — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
        f"- machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        f"- command: `{COMMAND}` (fresh store each run), timed by `python benchmarks/demo_time.py --runs {args.runs}`",
        f"- **best of {args.runs}: {best[0]:.1f} s** wall ({best[1]:.1f} s CPU, the ingester processes included; "
        f"load average {best[2][0]:.1f} when it started); all runs: "
        + ", ".join(f"{wall:.1f} s" for wall, _, _ in timings) + " (target: well under a minute)",
        "- the store it leaves: " + ", ".join(f"{value:,} {name}" if isinstance(value, int) else f"{name} {value}"
                                              for name, value in figures.items()),
        "",
    ]
    print("\n".join(lines))
    if args.append:
        with (REPO / "benchmarks" / "RESULTS.md").open("a", encoding="utf-8") as handle:
            handle.write("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
