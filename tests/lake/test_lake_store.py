"""A team's store on a lake: a local store copied into a lake and back with exact totals on both
sides, the lake kept compact by `workbench store maintain`, the reports read the same figures from
either, and a lake whose extension or catalog is missing reported as a fix, not a traceback.

`maintain` also folds the rollups: the machines' ingests append a rollup row per group per commit (a
lake cannot merge them in place while others commit), and maintenance folds them into one row per
group. Whatever the calls and however many commits brought them, every figure is the same after
the fold as before it, and the same as the calls' own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.store import ingest, lake
from workbench.store.copy import totals
from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools
from workbench.store.rollup import ROLLUPS


def _workbench(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def _local_store(tmp_path: Path, spooled) -> Path:
    """A local file store with 2,000 calls and their bodies (ingested from spool files)."""
    db = tmp_path / "local.duckdb"
    spool = tmp_path / "spool"
    spooled(spool, "laptop", 2000)
    ingest_spools(db, spool)
    return db


def test_a_local_store_copied_into_a_lake_and_back_keeps_every_row_and_every_micro(lake_db, tmp_path, spooled):
    local = _local_store(tmp_path, spooled)
    with open_store(local, read_only=True) as con:
        expected = totals(con)
    assert expected["calls"] == 2000 and expected["call_bodies"] == 2000

    done = _workbench("store", "copy", "--db", str(local), "--to", lake_db, "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = {row["table"]: (row["source"], row["target"]) for row in json.loads(done.stdout)}
    assert rows == {name: (count, count) for name, count in expected.items()}

    again = _workbench("store", "copy", "--db", str(local), "--to", lake_db, "--format", "json")
    assert again.returncode == 0, again.stderr  # run twice: nothing doubled
    assert {row["table"]: row["target"] for row in json.loads(again.stdout)} == expected

    back = tmp_path / "back.duckdb"
    done = _workbench("store", "copy", "--db", lake_db, "--to", str(back), "--format", "json")
    assert done.returncode == 0, done.stderr
    with open_store(back, read_only=True) as con:
        assert totals(con) == expected
        assert con.execute("SELECT sum(cost_micros) FROM calls").fetchall()[0][0] == sum(1000 + n for n in range(1000)) * 2

    # the reports read the same exact figures from the lake and from the file
    from_lake = _workbench("report", "cost", "--format", "json")
    from_file = _workbench("report", "cost", "--format", "json", "--db", str(back))
    assert from_lake.returncode == 0 and from_file.returncode == 0, from_lake.stderr + from_file.stderr
    assert json.loads(from_lake.stdout) == json.loads(from_file.stdout)
    assert json.loads(from_lake.stdout)[0]["cost_micros"] == expected["calls.cost_micros"]


def test_small_commits_stay_inline_until_maintain_writes_them_into_few_files_keeping_every_row(
        lake_db, tmp_path, spooled):
    spool = tmp_path / "spool"
    spooled(spool, "runner", 3000)
    batch, ingest.BATCH_BYTES = ingest.BATCH_BYTES, 96 * 1024  # many small commits, as a busy fleet makes
    try:
        ingest_spools(lake_db, spool)
    finally:
        ingest.BATCH_BYTES = batch
    with open_store(lake_db, read_only=True) as con:
        before = totals(con)
        assert lake.data_files(con) == 0  # dozens of commits, no swamp: their rows wait in the catalog
    assert before["calls"] == 3000

    done = _workbench("store", "maintain", "--keep-days", "0", "--format", "json")
    assert done.returncode == 0, done.stderr
    steps = {row["step"]: row["count"] for row in json.loads(done.stdout)}
    assert steps["data_files_before"] == 0 and steps["flushed_tables"] > 0
    with open_store(lake_db, read_only=True) as con:
        assert totals(con) == before
        # and spool_offsets, schema_version, every rollup
        filled = sum(1 for count in before.values() if count) + 2 + len(ROLLUPS)
        assert 0 < lake.data_files(con) == steps["data_files_after"] <= filled  # one file a table, not one a commit


def test_an_unreachable_lake_is_an_error_with_its_fix_and_no_password(postgres, tmp_path):
    url = f"ducklake:postgres:dbname=nothere host=127.0.0.1 port={postgres.port} user=postgres password=hunter2"
    done = _workbench("runs", "list", WORKBENCH_DB=url, WORKBENCH_LAKE_DATA_PATH=str(tmp_path))
    assert done.returncode == 2
    assert "WB_LAKE_UNREACHABLE" in done.stderr and "nothere" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout


_TOKENS = st.one_of(st.none(), st.integers(0, 5000))
_CALL = st.fixed_dictionaries({
    "run": st.sampled_from([None, "r1", "r2", "r3"]),
    "day": st.integers(0, 2),
    "second": st.integers(0, 86399),
    "model": st.sampled_from(["gpt-4o-mini", "gpt-4o", "claude-3-5-haiku"]),
    "prompt": st.sampled_from([None, "triage"]),
    "settled": st.booleans(),
    "replayed": st.booleans(),
    "status": st.sampled_from([200, 200, 429, 500]),
    "input": _TOKENS, "output": _TOKENS, "read": _TOKENS, "write": _TOKENS,
    "cost": st.one_of(st.none(), st.integers(0, 10**12)),
})


def _row(call: dict, call_id: str) -> dict:
    started = f"2026-11-{28 + call['day']:02d}T{call['second'] // 3600:02d}:{call['second'] // 60 % 60:02d}:" \
              f"{call['second'] % 60:02d}+00:00"
    return {"call_id": call_id, "run_id": call["run"], "provider": "openai", "wire": "openai.chat",
            "model_requested": call["model"], "model_served": call["model"], "prompt_id": call["prompt"],
            "prompt_version": "v1" if call["prompt"] else None, "http_status": call["status"],
            "settled": call["settled"], "replayed": call["replayed"], "input_tokens": call["input"],
            "output_tokens": call["output"], "cache_read_tokens": call["read"], "cache_write_tokens": call["write"],
            "cost_micros": call["cost"], "currency": "USD", "started_at": started, "ended_at": started}


def _ingest_in_commits(db: str, folder: Path, calls: list[dict], batch_bytes: int) -> None:
    """The calls spooled as a recorder writes them, then ingested in commits of about `batch_bytes`."""
    folder.mkdir(parents=True)
    tag = uuid.uuid4().hex[:8]
    with open(folder / f"fleet{tag}-100-00000000.jsonl", "w") as spool:
        for n, call in enumerate(calls):
            spool.write(json.dumps({"kind": "call", "row": _row(call, f"{tag}-{n}")}) + "\n")
    kept, ingest.BATCH_BYTES = ingest.BATCH_BYTES, batch_bytes
    try:
        ingest_spools(db, folder)
    finally:
        ingest.BATCH_BYTES = kept


def _figures(con) -> dict[str, list[tuple]]:
    """Each rollup as its readers see it: its rows merged per group, in a stable order."""
    return {spec.table: sorted(con.execute(spec.merged(f"SELECT * FROM {spec.table}")).fetchall(), key=repr)
            for spec in ROLLUPS}


def _of_the_calls(con) -> dict[str, list[tuple]]:
    """Each rollup made afresh from every stored call: what its figures must be."""
    return {spec.table: sorted(con.execute(spec.merged(spec.aggregate(spec.source))).fetchall(), key=repr)
            for spec in ROLLUPS}


def _rows_per_group(con) -> dict[str, int]:
    """The most rows any group of each rollup has (of those that hold any: no cache read, no compaction
    leaves theirs empty)."""
    most = {spec.table: con.execute(
        f"SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM {spec.table} "
        f"GROUP BY {', '.join(name for name, _, _ in spec.keys)})").fetchall()[0][0] for spec in ROLLUPS}
    return {table: rows for table, rows in most.items() if rows}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(calls=st.lists(_CALL, min_size=1, max_size=60), batch_bytes=st.sampled_from([600, 2000, 10**6]))
def test_folding_the_rollups_keeps_every_figure_exact_and_leaves_one_row_a_group(lake_db, tmp_path, calls,
                                                                                 batch_bytes):
    _ingest_in_commits(lake_db, tmp_path / uuid.uuid4().hex / "spool", calls, batch_bytes)
    with open_store(lake_db, read_only=True) as con:
        before = _figures(con)
        assert before == _of_the_calls(con)  # appended rows, merged by the reader: already exact

    with open_store(lake_db) as con:
        lake.fold_rollups(con)

    with open_store(lake_db, read_only=True) as con:
        assert set(_rows_per_group(con).values()) == {1}
        after = {spec.table: sorted(con.execute(f"SELECT {', '.join(name for name, _, _ in spec.keys + spec.measures)} "
                                                f"FROM {spec.table}").fetchall(), key=repr) for spec in ROLLUPS}
        assert after == before == _of_the_calls(con)


def test_maintain_folds_a_fleets_appended_rollup_rows_and_the_reports_read_the_same_figures(lake_db, tmp_path):
    calls = [{"run": f"r{n % 7}", "day": n % 3, "second": n * 37 % 86400, "model": "gpt-4o-mini",
              "prompt": None, "settled": n % 11 != 0, "replayed": n % 5 == 0, "status": 200, "input": 10 + n,
              "output": 5, "read": n % 4, "write": n % 3, "cost": None if n % 13 == 0 else 1000 + n}
             for n in range(1500)]
    _ingest_in_commits(lake_db, tmp_path / "spool", calls, 8 * 1024)  # dozens of commits, as a fleet makes
    report = _workbench("report", "cost", "--format", "json")
    assert report.returncode == 0, report.stderr
    with open_store(lake_db, read_only=True) as con:
        before, stacked = _figures(con), _rows_per_group(con)
    assert min(stacked.values()) > 1  # the commits appended rows to the same groups

    done = _workbench("store", "maintain", "--keep-days", "0", "--format", "json")
    assert done.returncode == 0, done.stderr
    steps = {row["step"]: row["count"] for row in json.loads(done.stdout)}
    with open_store(lake_db, read_only=True) as con:
        assert set(_rows_per_group(con).values()) == {1}
        assert _figures(con) == before == _of_the_calls(con)
        groups = sum(len(rows) for rows in before.values())
        stored = sum(con.execute(f"SELECT count(*) FROM {spec.table}").fetchall()[0][0] for spec in ROLLUPS)
    assert stored == groups and steps["folded_rollup_rows"] > 0
    again = _workbench("report", "cost", "--format", "json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(report.stdout)

    done = _workbench("store", "maintain", "--keep-days", "0", "--format", "json")  # run again: nothing to fold
    assert {row["step"]: row["count"] for row in json.loads(done.stdout)}["folded_rollup_rows"] == 0
