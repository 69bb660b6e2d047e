"""A team's store on a lake: a local store copied into a lake and back with exact totals on both
sides, the lake kept compact by `workbench store maintain`, the reports read the same figures from
either, and a lake whose extension or catalog is missing reported as a fix, not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from workbench.store import lake
from workbench.store.copy import totals
from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools


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
    from workbench.store import ingest

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
        filled = sum(1 for count in before.values() if count) + 4  # and spool_offsets, schema_version, the rollups
        assert 0 < lake.data_files(con) == steps["data_files_after"] <= filled  # one file a table, not one a commit


def test_an_unreachable_lake_is_an_error_with_its_fix_and_no_password(postgres, tmp_path):
    url = f"ducklake:postgres:dbname=nothere host=127.0.0.1 port={postgres.port} user=postgres password=hunter2"
    done = _workbench("runs", "list", WORKBENCH_DB=url, WORKBENCH_LAKE_DATA_PATH=str(tmp_path))
    assert done.returncode == 2
    assert "WB_LAKE_UNREACHABLE" in done.stderr and "nothere" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout
