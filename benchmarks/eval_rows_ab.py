"""The rows a `workbench eval` stores, under two source trees: every table of two fresh stores,
compared row for row with ids, times and the project's own path put aside. For a change that must
leave what is recorded as it was (a faster replay path).

    git -C /work/main archive HEAD | tar -x -C /tmp/main-copy
    python benchmarks/eval_rows_ab.py PROJECT /tmp/main-copy .

PROJECT holds a recorded suite (`evals/bench.py`, its cases, baseline and `cassettes/bench.json`, as
`eval_replay.py` writes them, and `models.toml`); it is copied once for each tree (PROJECT-a,
PROJECT-b), each eval runs offline into the copy's fresh store, and the spool is ingested before the
stores are read. Exit 1 when a table differs."""

from __future__ import annotations

import collections
import datetime
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).parent))
import eval_replay as er  # noqa: E402 - the benchmark's own helpers

_HEX = re.compile(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{16}\b")  # record, trace and span ids
_ISO = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?")
# columns that differ between two runs of the same eval: times, durations, clocks, day numbers
_VARYING = {"started_at", "ended_at", "first_byte_at", "start_time", "end_time", "time", "clock_at", "last_clock",
            "last_started", "first_at", "first_write_at", "last_read_at", "latency_ms", "applied_at", "first_seen",
            "cache_expires_at", "occurred_at", "quarantined_at", "created_at", "first_read_at", "day_n", "month"}


def _stable(value, project: str):
    if isinstance(value, (datetime.datetime, datetime.date)):
        return "<time>"
    if isinstance(value, str):
        return _HEX.sub(lambda m: f"<id{len(m.group())}>", _ISO.sub("<time>", value.replace(project, "<project>")))
    if isinstance(value, list):
        return [_stable(item, project) for item in value]
    return value


def tables(db: Path, project: Path) -> dict[str, tuple[list[str], collections.Counter, dict[str, int]]]:
    """Per table: its columns, its rows made stable (a multiset), and how many distinct values each
    column holds (so that ids put aside still link the same number of rows)."""
    out = {}
    with duckdb.connect(str(db), read_only=True) as con:
        names = [row[0] for row in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1").fetchall()]
        for name in names:
            if name == "schema_version":
                continue
            cursor = con.execute(f'SELECT * FROM "{name}"')
            columns = [column[0] for column in cursor.description]
            rows = cursor.fetchall()
            kept = [index for index, column in enumerate(columns) if column not in _VARYING]
            stable = collections.Counter(repr([_stable(row[index], str(project)) for index in kept]) for row in rows)
            distinct = {columns[index]: len({repr(row[index]) for row in rows}) for index in kept}
            out[name] = (columns, stable, distinct)
    return out


def eval_into(tree: str, source: Path, project: Path) -> None:
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    for part in ("evals", "cassettes", "models.toml"):
        (shutil.copytree if (source / part).is_dir() else shutil.copy)(source / part, project / part)
    # one base URL for both (it is in every call's row); port 9 (discard): nothing answers there
    env = {**er.offline_env(project, "http://127.0.0.1:9/v1"), "PYTHONPATH": tree}
    subprocess.run([sys.executable, "-m", "workbench", "eval", "bench", "--evals", str(project / "evals")],
                   cwd=project, env=env, check=True, stdout=subprocess.DEVNULL)
    while er._ingesters(project):
        time.sleep(0.1)
    er.settle(project, env)


def main() -> None:
    source, trees = Path(sys.argv[1]).resolve(), sys.argv[2:4]
    stores = []
    for label, tree in zip("ab", trees):
        project = source.with_name(f"{source.name}-{label}")
        eval_into(str(Path(tree).resolve()), source, project)
        stores.append(tables(project / "store" / "wb.duckdb", project))
    a, b = stores
    same = set(a) == set(b)
    for name in sorted(set(a) | set(b)):
        equal = name in a and name in b and a[name] == b[name]
        same &= equal
        rows = [sum(side[name][1].values()) if name in side else "-" for side in (a, b)]
        print(f"{name:24} {rows[0]:>8} {rows[1]:>8}  {'same' if equal else 'DIFFERENT'}")
    print("every table the same" if same else "tables differ")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    main()
