"""A pytest session's ingester stands by (`Spool.stand_by`, started at its first cassette): the
session's end hands it the spool, and no other ingester starts while the tests run. pytest killed
first sends it nothing: it leaves without opening the store, and the spool keeps every record for a
later ingestion. Interrupted (Ctrl-C) and xdist sessions hand theirs over too; none is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from reliability.faults import REPO, assert_spool_whole_after_the_standby_left, count, ingesters_until_none
from workbench.config import spool_dir_of

SUITE = textwrap.dedent(r'''
    import os, signal, time
    from pathlib import Path

    import pytest

    from workbench.store.spool import ingesters_of

    HOW = os.environ["HOW"]


    @pytest.mark.parametrize("index", range(int(os.environ["CALLS"])))
    def test_call(workbench_cassette, index):
        if HOW != "no-call":
            response = workbench_cassette.http_client().post(
                os.environ["FAKE_URL"] + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": f"call {index}"}]})
            assert response.status_code == 200
        with open("seen.txt", "a") as seen:  # the ingesters running while the tests run
            seen.write(" ".join(map(str, ingesters_of(os.environ["WORKBENCH_DB"]))) + "\n")


    def test_last():
        if HOW == "interrupt":
            raise KeyboardInterrupt
        if HOW == "kill-9":
            calls, deadline = int(os.environ["CALLS"]), time.monotonic() + 20
            spool = Path(os.environ["WORKBENCH_DB"] + ".workbench") / "spool"
            while time.monotonic() < deadline:  # the spool thread writes within flush_interval_s
                if sum(path.read_bytes().count(b'"kind":"call"') for path in spool.glob("*.jsonl")) >= calls:
                    break
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
''')  # indented: its tests are the child's, not this module's


def run_session(tmp_path, fake_url, how: str, calls: int = 3, *options: str) -> tuple:
    """pytest in a child process, as a user runs it, over SUITE; its store, its result and the pids
    of the ingesters its tests saw running."""
    db = tmp_path / "wb.duckdb"
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]), "WORKBENCH_DB": str(db),
           "FAKE_URL": fake_url, "HOW": how, "CALLS": str(calls), "WORKBENCH_FLUSH_INTERVAL_S": "0.05"}
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                             "--workbench-record-mode=record", *options, "test_suite.py"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    seen_file = tmp_path / "seen.txt"
    seen = {int(pid) for pid in seen_file.read_text().split()} if seen_file.exists() else set()
    return db, result, seen


@pytest.mark.parametrize("how", ["pass", "interrupt"])
def test_a_session_hands_its_calls_to_the_one_ingester_that_stood_by(tmp_path, fake_url, how):
    db, result, seen = run_session(tmp_path, fake_url, how)
    assert result.returncode == (0 if how == "pass" else 2), result.stdout + result.stderr
    assert len(seen) == 1  # one stood by from the first test on, and none started on the clock
    assert ingesters_until_none(db) <= seen  # the end started no second one
    assert sorted(spool_dir_of(db).glob("*.jsonl")) == []  # the file handed over was read and removed
    assert count(db, "SELECT count(*) FROM calls") == 3  # in the store with no reader's ingestion


def test_a_killed_session_leaves_its_spool_whole_and_its_standby_ingests_nothing(tmp_path, fake_url):
    db, result, seen = run_session(tmp_path, fake_url, "kill-9")
    assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
    assert len(seen) == 1
    assert_spool_whole_after_the_standby_left(db, calls=3)


def test_each_xdist_worker_hands_its_calls_to_its_own_standby(tmp_path, fake_url):
    db, result, seen = run_session(tmp_path, fake_url, "pass", 8, "-n", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert 1 <= len(seen) <= 2  # at most one per worker (a worker that got no call test starts none)
    assert ingesters_until_none(db) <= seen
    assert sorted(spool_dir_of(db).glob("*.jsonl")) == []
    assert count(db, "SELECT count(*) FROM calls") == 8


def test_a_session_that_recorded_nothing_dismisses_its_standby(tmp_path, fake_url):
    db, result, seen = run_session(tmp_path, fake_url, "no-call")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(seen) == 1  # its first cassette started one
    ingesters_until_none(db)  # dismissed at the end: it left
    assert not db.exists()
