"""An ingester killed halfway through a backlog keeps every batch it committed: the next one goes on
from there, and the store ends with every record exactly once. The kill comes once the ingester has
read more than half the backlog (SIGKILL from inside, at a read, so the point is the same on every
machine); ingestion that commits only at the end would never get anywhere."""

from __future__ import annotations

import json
import socket

from reliability.faults import count, run_python

CALLS = 3000

KILLED_INGESTER = r"""
import os, signal, sys
from workbench.store import ingest
db, spool, batch, backlog = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ingest.BATCH_BYTES = batch
read = 0
real_read = ingest._read_lines

def read_then_die(path, offset, *limit):
    global read
    data, end = real_read(path, offset, *limit)
    read += len(data)
    if read > backlog / 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return data, end

ingest._read_lines = read_then_die
print(ingest.ingest_spools(db, spool))
"""


def _backlog(spool) -> int:
    spool.mkdir()
    path = spool / f"{socket.gethostname()}-999999997-feedf00d.jsonl"  # a writer long gone
    with open(path, "w") as handle:
        for index in range(CALLS):
            handle.write(json.dumps({"kind": "call", "row": {"call_id": f"c{index:05d}", "input_tokens": index}}) + "\n")
            handle.write(json.dumps({"kind": "call_body", "row": {"call_id": f"c{index:05d}",
                                                                  "request_json": "x" * 300}}) + "\n")
    return path.stat().st_size


def test_a_killed_ingester_makes_progress_and_nothing_is_counted_twice(tmp_path):
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    size = _backlog(spool)
    batch = size // 10
    ingested = [0]
    for attempt in range(6):
        result = run_python(KILLED_INGESTER, str(db), str(spool), str(batch), str(size), cwd=tmp_path)
        now = count(db, "SELECT count(*) FROM calls") if db.exists() else 0
        if result.returncode == 0:
            break
        assert result.returncode == -9, result.stderr
        assert now > ingested[-1], f"attempt {attempt}: no progress ({now} calls)"  # each kill kept its batches
        ingested.append(now)
    assert count(db, "SELECT count(*) FROM calls") == CALLS
    assert count(db, "SELECT count(DISTINCT call_id) FROM calls") == CALLS
    assert count(db, "SELECT count(*) FROM call_bodies") == CALLS
    assert count(db, "SELECT sum(input_tokens) FROM calls") == sum(range(CALLS))
    assert len(ingested) >= 2  # it was killed at least once
    assert not any(spool.glob("*.jsonl"))
