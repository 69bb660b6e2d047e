"""Many machines into one lake: recording processes with spool folders of their own (no shared file
lock) commit into one DuckLake (a real PostgreSQL catalog, a shared data folder); an ingester killed
midway loses nothing and doubles nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from workbench.store import lake
from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools
from workbench.store.queries import Filters, spend_cube
from workbench.store.queries._base import rolled_up

REPO = Path(__file__).resolve().parents[2]

# a recording process on its own "machine": `n` priced chat calls through the real recording
# transport (over the in-process fake provider), its spool in a folder of its own; its exit handler
# ingests that spool into the lake
RECORDER = r"""
import sys
import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport

spool, n = sys.argv[1], int(sys.argv[2])
workbench.configure(spool_dir=spool, flush_interval_s=0.05)
client = workbench.http_client(transport=FakeTransport(FakeProvider()))
body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
with workbench.run("machine") as run:
    for _ in range(n):
        assert client.post("http://127.0.0.1/v1/chat/completions", json=body).status_code == 200
print(len(run.calls), flush=True)
"""

# an ingester: drains one spool folder into the lake in small batches (many commits)
INGESTER = r"""
import sys
from pathlib import Path
from workbench.store import ingest

ingest.BATCH_BYTES = int(sys.argv[2])
print(ingest.ingest_spools(Path(sys.argv[3]), Path(sys.argv[1])), flush=True)
"""


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ.copy())


def _totals(db: str) -> tuple[int, int, int]:
    with open_store(db, read_only=True) as con:
        return con.execute("SELECT count(*), count(DISTINCT call_id), coalesce(sum(cost_micros), 0) FROM calls"
                           ).fetchall()[0]


def test_three_recording_machines_commit_into_one_lake_and_the_report_reads_exact_totals(lake_db, tmp_path):
    machines = [_python(RECORDER, str(tmp_path / f"machine-{n}" / "spool"), "100") for n in range(3)]
    for machine in machines:
        out, err = machine.communicate(timeout=300)
        assert machine.returncode == 0, err
        assert out.strip() == "100"
    for n in range(3):  # whatever an exit handler left behind (another machine was committing)
        ingest_spools(lake_db, tmp_path / f"machine-{n}" / "spool")

    count, distinct, cost = _totals(lake_db)
    assert (count, distinct) == (300, 300)
    with open_store(lake_db, read_only=True) as con:
        per_call = con.execute("SELECT DISTINCT cost_micros FROM calls").fetchall()
        runs = con.execute("SELECT name, status, billed_calls, billed_cost_micros FROM runs").fetchall()
    assert len(per_call) == 1 and per_call[0][0] > 0  # the same call, priced by Workbench the same way
    assert cost == 300 * per_call[0][0]
    assert sorted(runs) == [("machine", "ok", 100, 100 * per_call[0][0])] * 3
    with open_store(lake_db, read_only=True) as con:  # the machines' commits all summed in the daily rollup
        assert rolled_up(con, Filters())
        assert spend_cube(con, Filters()).equals(spend_cube(con, Filters(), raw=True))

    report = subprocess.run([sys.executable, "-m", "workbench", "report", "cost", "--format", "json"],
                            capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert report.returncode == 0, report.stderr
    rows = json.loads(report.stdout)
    assert [(row["model"], row["calls"], row["cost_micros"]) for row in rows] == [("gpt-4o-mini", 300, cost)]


def test_two_ingesting_machines_one_killed_midway_lose_nothing_and_double_nothing(lake_db, tmp_path, spooled):
    spools = {name: tmp_path / name / "spool" for name in ("alpha", "beta")}
    costs = {name: spooled(folder, name, 1000) for name, folder in spools.items()}
    with open_store(lake_db):
        pass  # the lake exists (migrated) before both start

    batch = str(32 * 1024)  # about 80 lines a commit: many commits to be killed between
    # the watcher attaches the lake before alpha starts: on a loaded machine, attaching after it could
    # take longer than alpha's whole ingest, and there would be nothing left to kill midway
    watcher = lake.connect(lake_db, None)
    try:
        alpha = _python(INGESTER, str(spools["alpha"]), batch, lake_db)
        beta = _python(INGESTER, str(spools["beta"]), batch, lake_db)
        deadline = time.monotonic() + 120
        while True:  # alpha is killed once some of its batches, not all, are in
            done = watcher.execute("SELECT count(*) FROM calls WHERE call_id LIKE 'alpha-%'").fetchall()[0][0]
            if done >= 100 or alpha.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        alpha.send_signal(signal.SIGKILL)
        alpha.wait(timeout=30)
        partial = watcher.execute("SELECT count(*) FROM calls WHERE call_id LIKE 'alpha-%'").fetchall()[0][0]
    finally:
        lake.release(watcher)
    assert alpha.returncode == -signal.SIGKILL
    assert 0 < partial < 1000, f"alpha was to be killed midway, with {partial} of its 1000 calls in"

    again = _python(INGESTER, str(spools["alpha"]), batch, lake_db)  # the machine comes back
    for process in (beta, again):
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err

    with open_store(lake_db, read_only=True) as con:
        stored = dict(con.execute("SELECT call_id, cost_micros FROM calls").fetchall())
        rows, bodies = con.execute("SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM call_bodies)").fetchall()[0]
        offsets = dict(con.execute('SELECT file, "offset" FROM spool_offsets').fetchall())
    expected = {**costs["alpha"], **costs["beta"]}
    assert rows == bodies == len(expected) == 2000  # nothing doubled
    assert stored == expected  # nothing lost, every cost exact
    assert offsets == {path.name: path.stat().st_size for folder in spools.values() for path in folder.glob("*.jsonl")}
