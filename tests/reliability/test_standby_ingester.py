"""The exit's ingester started early (`Spool.stand_by`, what `workbench eval` does): it waits for its
parent's word, then ingests the file handed over; a parent killed first, or with nothing recorded,
sends none, and it leaves without touching the store, the spool kept whole for a later ingestion.
A process that records on has its closed files drained by it meanwhile."""

from __future__ import annotations

import pytest

from reliability.faults import assert_spool_whole_after_the_standby_left, count, ingesters_until_none, run_python
from workbench.config import spool_dir_of
from workbench.store.ingest import ingest_spools

STANDING_BY_APP = r"""
import os, signal, sys, time
import workbench
from workbench.capture import recorder
url, calls, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spool = recorder().spool
spool.stand_by()
print(spool._standby.pid, flush=True)
client = workbench.http_client()
for index in range(calls):
    client.post(url + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": f"call {index}"}]})
if how == "kill-9":
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the spool thread writes within flush_interval_s
        lines = sum(path.read_bytes().count(b'"kind":"call"') for path in spool.spool_dir.glob("*.jsonl"))
        if lines >= calls:
            break
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def run_app(tmp_path, fake_url, calls: int, how: str, interval: str = "30"):
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(STANDING_BY_APP, fake_url, str(calls), how, cwd=tmp_path,
                        env={"WORKBENCH_DB": str(db), "WORKBENCH_FLUSH_INTERVAL_S": interval})
    return db, result, int(result.stdout.split()[0])


def test_the_standing_by_ingester_stores_the_exiting_process_records_and_no_other_starts(tmp_path, fake_url):
    db, result, standby = run_app(tmp_path, fake_url, 3, "return")
    assert result.returncode == 0, result.stderr
    assert ingesters_until_none(db) <= {standby}  # the exit started no second ingester
    assert sorted(spool_dir_of(db).glob("*.jsonl")) == []  # the file handed over was read and removed
    assert count(db, "SELECT count(*) FROM calls") == 3  # in the store with no reader's ingestion
    assert count(db, "SELECT count(*) FROM spans WHERE name LIKE 'chat%'") == 3


def test_a_killed_process_leaves_its_spool_whole_and_its_standby_ingests_nothing(tmp_path, fake_url):
    db, result, standby = run_app(tmp_path, fake_url, 3, "kill-9", interval="0.05")
    assert result.returncode == -9, result.stderr
    assert_spool_whole_after_the_standby_left(db, calls=3)


def test_a_process_that_recorded_nothing_dismisses_its_standby(tmp_path, fake_url):
    db, result, standby = run_app(tmp_path, fake_url, 0, "return")
    assert result.returncode == 0, result.stderr
    ingesters_until_none(db)
    assert not db.exists()


# what both apps below do: a client, one call, and a wait for a condition (a minute at most)
_CALL_AND_UNTIL = r"""
client = workbench.http_client()

def call(index):
    client.post(url + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": f"call {index}"}]})

def until(test, what):
    deadline = time.monotonic() + 60
    while not test():
        if time.monotonic() > deadline:
            raise SystemExit(f"never {what}")
        time.sleep(0.02)
"""


# A recording that goes on: the standby drains each closed file while the process records into the
# next (`Spool._drain`), whatever happens to the process, the standby or the store meanwhile.
DRAINING_APP = r"""
import os, signal, sys, time
import workbench
from workbench.capture import recorder
from workbench.locks import hold
from workbench.store import spool as spool_module
from workbench.store.db import open_store
url, calls, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spool_module.DRAIN_AFTER_BYTES = 1  # a drain after every write
spool = recorder().spool
spool.stand_by()
standby = spool._standby
print(standby.pid, flush=True)
""" + _CALL_AND_UNTIL + r"""

held = None
if how == "lock":  # another process ingesting
    held = hold(spool.spool_dir / ".ingest.lock")
elif how == "store":  # another process holding the store
    held = open_store(spool.db_path)
    held.__enter__()
for index in range(calls // 2):
    call(index)
until(lambda: spool._drained, "closed a file for the standby")
first = spool._drained[0]
if how == "kill-standby":  # whether it was mid-batch or not: the files it did not commit stay
    os.kill(standby.pid, signal.SIGKILL)
    standby.wait()
elif how in ("lock", "store"):
    time.sleep(1.5)  # the standby tried: it left the file
    assert first.exists(), "a file drained while another process held the store is gone"
    held.release() if how == "lock" else held.__exit__(None, None, None)
else:
    until(lambda: not first.exists(), "drained the first file")  # read, stored, removed: the process still runs
for index in range(calls // 2, calls):
    call(index)
spool.flush(ingest=False)  # every call written
if how == "kill-9":
    os.kill(os.getpid(), signal.SIGKILL)
print("detached ingester started" if spool._ingester is not None else "no detached ingester", flush=True)
"""


def run_draining_app(tmp_path, fake_url, calls: int, how: str):
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(DRAINING_APP, fake_url, str(calls), how, cwd=tmp_path,
                        env={"WORKBENCH_DB": str(db), "WORKBENCH_FLUSH_INTERVAL_S": "0.05"})
    return db, result


def assert_every_call_stored_once(db, calls: int) -> None:
    assert count(db, "SELECT count(*) FROM calls") == calls
    assert count(db, "SELECT count(DISTINCT call_id) FROM calls") == calls
    assert count(db, "SELECT count(*) FROM call_bodies") == calls


def test_the_standby_drains_closed_files_while_the_process_records_and_is_the_only_ingester(tmp_path, fake_url):
    db, result = run_draining_app(tmp_path, fake_url, 12, "return")
    assert result.returncode == 0, result.stderr
    standby = int(result.stdout.split()[0])
    assert "no detached ingester" in result.stdout  # the spool thread started none
    assert ingesters_until_none(db) <= {standby}
    assert sorted(spool_dir_of(db).glob("*.jsonl")) == []  # every file drained or handed over, then removed
    assert_every_call_stored_once(db, 12)


def test_a_killed_process_keeps_what_its_standby_drained_and_its_spool_the_rest(tmp_path, fake_url):
    db, result = run_draining_app(tmp_path, fake_url, 12, "kill-9")
    assert result.returncode == -9, result.stderr
    ingesters_until_none(db)  # its input ended without the end's word: it left
    stored = count(db, "SELECT count(*) FROM calls")
    spooled = sum(path.read_bytes().count(b'"kind":"call"') for path in spool_dir_of(db).glob("*.jsonl"))
    assert stored > 0 and stored + spooled == 12  # what it drained in the store, the rest in the spool
    ingest_spools(db, spool_dir_of(db), wait=True)
    assert_every_call_stored_once(db, 12)


@pytest.mark.parametrize("how", ["kill-standby", "lock", "store"])
def test_a_drain_that_did_not_happen_leaves_its_file_to_the_end(tmp_path, fake_url, how):
    """The standby killed (before or in the middle of a batch), or the store another process's
    while it drains: the closed files stay in the spool, and the end's ingester (the standby, or
    a detached one when it is gone) is told their names, stores them and removes them."""
    db, result = run_draining_app(tmp_path, fake_url, 12, how)
    assert result.returncode == 0, result.stderr
    ingesters_until_none(db)
    assert sorted(spool_dir_of(db).glob("*.jsonl")) == []
    assert_every_call_stored_once(db, 12)


# A drain before the file fills: once the standby has stored every file it was given, the next is
# handed over at DRAIN_IDLE_AFTER_BYTES (here any write), and never while it still has one.
IDLE_DRAIN_APP = r"""
import sys, time
import workbench
from workbench.capture import recorder
from workbench.locks import hold
from workbench.store import spool as spool_module
url, calls = sys.argv[1], int(sys.argv[2])
spool_module.DRAIN_IDLE_AFTER_BYTES = 1
spool = recorder().spool
spool.stand_by()
print(spool._standby.pid, flush=True)
""" + _CALL_AND_UNTIL + r"""

call(0)
until(lambda: spool._drained and not spool._drained[0].exists(), "drained and stored the first file before it filled")
# the ingest lock, once the standby lets it go (it keeps it a grace time for the next word): the
# standby cannot store the second file, and keeps it
held = []
until(lambda: held.append(hold(spool.spool_dir / ".ingest.lock")) or held[-1] is not None, "took the ingest lock")
call(1)
until(lambda: len(spool._drained) == 2, "drained the second file")
for index in range(2, calls):
    call(index)
until(lambda: spool._file_bytes > 0, "wrote the later calls")
time.sleep(0.5)  # ten more of the spool thread's rounds
print("drains", len(spool._drained), flush=True)
held[-1].release()
"""


def test_an_idle_standby_is_handed_the_file_before_it_fills_and_a_busy_one_no_second(tmp_path, fake_url):
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(IDLE_DRAIN_APP, fake_url, "6", cwd=tmp_path,
                        env={"WORKBENCH_DB": str(db), "WORKBENCH_FLUSH_INTERVAL_S": "0.05"})
    assert result.returncode == 0, result.stderr
    assert "drains 2" in result.stdout  # the second file, still kept, held back every later one
    assert ingesters_until_none(db) <= {int(result.stdout.split()[0])}
    assert sorted(spool_dir_of(db).glob("*.jsonl")) == []  # the end named the kept file: stored, removed
    assert_every_call_stored_once(db, 6)


# A recording that says how far it is (`Spool.progress`, told by `workbench eval` a case at a time):
# near its end, once the file holds as much as is still to come, an idle standby is handed it before
# DRAIN_IDLE_AFTER_BYTES (here never reached), so the exit leaves it only the last part.
PROGRESS_DRAIN_APP = r"""
import sys, time
import workbench
from workbench.capture import recorder
from workbench.store import spool as spool_module
url, calls = sys.argv[1], int(sys.argv[2])
spool_module.DRAIN_IDLE_AFTER_BYTES = 10**12
spool_module.DRAIN_TAIL_BYTES = 1
spool = recorder().spool
spool.stand_by()
print(spool._standby.pid, flush=True)
""" + _CALL_AND_UNTIL + r"""

for index in range(calls - 1):
    call(index)
until(lambda: spool._file_bytes > 0, "wrote the calls")
time.sleep(0.5)  # ten of the spool thread's rounds: far from its end (or not saying), no drain
print("drains unsaid", len(spool._drained), flush=True)
spool.progress(1, 100)
time.sleep(0.5)
print("drains far", len(spool._drained), flush=True)
spool.progress(calls - 1, calls)  # what is still to come: a call's worth, less than the file holds
until(lambda: spool._drained and not spool._drained[0].exists(), "drained and stored the file near the end")
call(calls - 1)
"""


def test_a_recording_near_its_end_hands_its_idle_standby_the_file_before_it_fills(tmp_path, fake_url):
    db = tmp_path / ".workbench" / "wb.duckdb"
    result = run_python(PROGRESS_DRAIN_APP, fake_url, "6", cwd=tmp_path,
                        env={"WORKBENCH_DB": str(db), "WORKBENCH_FLUSH_INTERVAL_S": "0.05"})
    assert result.returncode == 0, result.stderr
    assert "drains unsaid 0" in result.stdout and "drains far 0" in result.stdout
    assert ingesters_until_none(db) <= {int(result.stdout.split()[0])}  # the standby, the only ingester
    assert sorted(spool_dir_of(db).glob("*.jsonl")) == []  # the drained file and the last one: stored, removed
    assert_every_call_stored_once(db, 6)


# `workbench eval` tells its standby how far it is, a case at a time: its last case (run alone, after
# the others) waits for the drain the eval's progress brings about (never, without it: the idle floor
# is out of reach here), so its answer says whether it came.
TOLD_SUITE = '''
import time
from workbench.capture import recorder
from workbench.evaluate import define_eval, define_prompt, exact

def target(vars, ctx):
    if vars["key"] == "c9":
        deadline = time.monotonic() + 30
        while not recorder().spool._drained and time.monotonic() < deadline:
            time.sleep(0.02)
        return {"answer": "ok" if recorder().spool._drained else "never drained"}
    return {"answer": "ok", "text": vars["key"] * 1000}

define_eval("told", define_prompt("told", "v1", template="{{key}}"),
            [{"id": f"c{n}", "vars": {"key": f"c{n}"}, "expected": "ok"} for n in range(10)],
            [exact("answer")], target=target, concurrency=1)
'''
EVAL_CLI = "from workbench.store import spool; spool.DRAIN_IDLE_AFTER_BYTES = 10**12; spool.DRAIN_TAIL_BYTES = 1; " \
           "from workbench.cli import main; main()"


def test_workbench_eval_tells_its_standby_how_far_it_is_and_every_result_is_stored_once(tmp_path):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "told.py").write_text(TOLD_SUITE)
    db = tmp_path / ".workbench" / "wb.duckdb"
    env = {"WORKBENCH_DB": str(db), "WORKBENCH_FLUSH_INTERVAL_S": "0.05"}
    result = run_python(EVAL_CLI, "eval", "--record-baseline", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    ingesters_until_none(db)
    assert sorted(spool_dir_of(db).glob("*.jsonl")) == []
    assert count(db, "SELECT count(*) FROM eval_samples WHERE score = 1.0") == 10  # c9's drain came
    assert count(db, "SELECT count(DISTINCT case_id) FROM eval_results") == 10
