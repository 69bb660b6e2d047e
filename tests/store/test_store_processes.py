"""Several processes recording into one store while a reader keeps opening it; processes killed with
SIGKILL at random points. Nothing lost, nothing doubled, the store always opens."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from workbench.config import spool_dir_of
from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools

REPO = Path(__file__).resolve().parents[2]

# a recording process: `n` chat calls through the real recording transport (over the in-process
# fake provider, to keep it fast), then exit (the exit handler writes the last batch)
WRITER = r"""
import sys
import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport

db, n = sys.argv[1], int(sys.argv[2])
workbench.configure(db=db, flush_interval_s=0.05)
client = workbench.http_client(transport=FakeTransport(FakeProvider()))
body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
with workbench.run("writer") as run:
    for _ in range(n):
        assert client.post("http://fake.local/v1/chat/completions", json=body).status_code == 200
print(len(run.calls), flush=True)
"""

# a reader: opens the store read-only, counts, closes, again, until told to stop
READER = r"""
import json, os, sys, time
import duckdb

db, stop = sys.argv[1], sys.argv[2]
counts, refused = [], 0
while not os.path.exists(stop):
    try:
        con = duckdb.connect(db, read_only=True)
    except duckdb.Error:
        refused += 1  # a writer is ingesting: try again
        time.sleep(0.005)
        continue
    try:
        counts.append(con.execute("SELECT count(*) FROM calls").fetchall()[0][0])
    finally:
        con.close()
    time.sleep(0.01)
print(json.dumps({"counts": counts, "refused": refused}))
"""


def _run_python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _started(db: Path) -> subprocess.Popen:
    child = _run_python(KILLED, str(db), stdin=subprocess.PIPE)
    return child


def test_four_processes_one_store_with_a_reader_open(tmp_path):
    db = tmp_path / "wb.duckdb"
    with open_store(db):
        pass  # the reader needs a store to open
    stop = tmp_path / "stop"
    reader = _run_python(READER, str(db), str(stop))
    writers = [_run_python(WRITER, str(db), "500") for _ in range(4)]
    outputs = [writer.communicate(timeout=120) for writer in writers]
    for writer, (out, err) in zip(writers, outputs):
        assert writer.returncode == 0, err
        assert out.strip() == "500"
    stop.touch()
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    seen = json.loads(out)
    assert seen["counts"], "the reader never got the store open"
    assert seen["counts"] == sorted(seen["counts"]) and max(seen["counts"]) <= 2000

    ingest_spools(db, spool_dir_of(db), wait=True)  # whatever the exit handlers left (e.g. locked out)
    con = duckdb.connect(str(db), read_only=True)
    try:
        total, distinct = con.execute("SELECT count(*), count(DISTINCT call_id) FROM calls").fetchall()[0]
        runs = con.execute("SELECT status, billed_calls FROM runs").fetchall()
        spans = con.execute("SELECT count(*) FROM spans WHERE kind = 'CLIENT'").fetchall()[0][0]
    finally:
        con.close()
    assert (total, distinct) == (2000, 2000)
    assert runs == [("ok", 500)] * 4
    assert spans == 2000
    assert not list(spool_dir_of(db).glob("*.jsonl"))  # finished files of exited processes are removed


# a recording process that reports, after each workbench.flush() returns, the ids it flushed
KILLED = r"""
import sys
import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport

workbench.configure(db=sys.argv[1], flush_interval_s=0.05)
client = workbench.http_client(transport=FakeTransport(FakeProvider()))
body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
print("READY", flush=True)
sys.stdin.readline()  # GO: the parent starts the next child's imports while this one records
reported = 0
with workbench.run("killed") as run:
    while True:
        client.post("http://fake.local/v1/chat/completions", json=body)
        if len(run.calls) % 5 == 0:
            ids = [call.call_id for call in run.calls[reported:]]
            workbench.flush()
            reported += len(ids)
            print("FLUSHED " + " ".join(ids), flush=True)
"""


def test_sigkill_at_random_points_loses_no_flushed_call_and_doubles_none(tmp_path):
    db = tmp_path / "wb.duckdb"
    spool = spool_dir_of(db)
    rng = random.Random(int(os.environ.get("WB_SIGKILL_SEED", time.time_ns())))
    flushed: set[str] = set()
    with open_store(db):
        pass  # a store exists from the start (a kill may come before the first flush creates it)
    upcoming = _started(db)
    for attempt in range(10):
        child = upcoming
        assert child.stdout.readline().strip() == "READY", child.stderr.read()
        child.stdin.write("GO\n")
        child.stdin.flush()
        if attempt < 9:
            upcoming = _started(db)  # imports while this one records; it records nothing until GO
        early = ""
        if attempt % 2:  # every other kill comes after at least one flush has been reported
            early = child.stdout.readline()
            assert early.startswith("FLUSHED "), child.stderr.read()
        time.sleep(rng.uniform(0.0, 0.5))
        child.send_signal(signal.SIGKILL)
        out, _err = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        for line in (early + out).splitlines(keepends=True):
            if line.startswith("FLUSHED ") and line.endswith("\n"):  # a line cut by the kill does not count
                flushed.update(line.split()[1:])
        # the store opens and ingesting what the dead process left completes
        ingest_spools(db, spool, wait=True)
        con = duckdb.connect(str(db), read_only=True)
        try:
            ids = [row[0] for row in con.execute("SELECT call_id FROM calls").fetchall()]
        finally:
            con.close()
        assert len(ids) == len(set(ids))
        assert flushed <= set(ids), f"{len(flushed - set(ids))} flushed calls lost"
        # the dead process's spool file (torn last line or not) was ingested and removed
        assert not list(spool.glob("*.jsonl"))
    assert len(flushed) > 0


FORKER = r"""
import os, signal, sys, time
import workbench

workbench.configure(db=sys.argv[1], flush_interval_s=0.05)
with workbench.run("parent"):
    pass
time.sleep(0.3)
pid = os.fork()
if pid == 0:
    with workbench.run("child"):
        pass
    time.sleep(0.5)  # the child's own spool thread writes its run ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... before it dies with no exit hook run
os.waitpid(pid, 0)
"""


def test_a_forked_child_records_through_a_spool_thread_of_its_own(tmp_path):
    db = tmp_path / "wb.duckdb"
    result = subprocess.run([sys.executable, "-c", FORKER, str(db)], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    ingest_spools(db, spool_dir_of(db))
    with open_store(db, read_only=True) as con:
        runs = dict(con.execute("SELECT name, count(*) FROM runs GROUP BY name").fetchall())
    assert runs == {"parent": 1, "child": 1}
