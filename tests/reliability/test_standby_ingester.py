"""The exit's ingester started early (`Spool.stand_by`, what `workbench eval` does): it waits for its
parent's word, then ingests the file handed over; a parent killed first, or with nothing recorded,
sends none, and it leaves without touching the store, the spool kept whole for a later ingestion."""

from __future__ import annotations


from reliability.faults import assert_spool_whole_after_the_standby_left, count, ingesters_until_none, run_python
from workbench.config import spool_dir_of

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
