"""A lock file that is not a regular file of the user's (a symbolic link, a dangling one, a folder, a
FIFO, another user's file) is refused with `WB_LOCK_UNSAFE`, never followed or shared, and said
where a user sees it: a command that ingests fails with the code, its cause and its fix; a
recording application and a pytest session say it once and go on, their records kept in the spool
(or in memory, for a cassette) until the file is removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from reliability.faults import REPO, count, ingesters_until_none, run_python, workbench_cli
from workbench.config import spool_dir_of, work_dir_of
from workbench.errors import WorkbenchError
from workbench.locks import _problem, check, exclusive, held, hold
from workbench.store.queries import ingest_pending

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock and O_NOFOLLOW are POSIX's")

KINDS = ["symlink", "dangling-symlink", "folder", "fifo"]


def make_unsafe(path, kind: str, tmp_path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        (tmp_path / "elsewhere.txt").write_text("not a lock")
        path.symlink_to(tmp_path / "elsewhere.txt")
    elif kind == "dangling-symlink":
        path.symlink_to(tmp_path / "made-through-the-link")
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)


@pytest.mark.parametrize("kind", KINDS)
def test_an_unsafe_lock_file_is_refused_with_its_cause_and_fix(tmp_path, kind):
    path = tmp_path / "spool" / ".ingest.lock"
    make_unsafe(path, kind, tmp_path)
    for take in (lambda: exclusive(path).__enter__(), lambda: exclusive(path, wait=False).__enter__(),
                 lambda: hold(path), lambda: held(path), lambda: check(path)):
        with pytest.raises(WorkbenchError) as raised:
            take()
        assert raised.value.code == "WB_LOCK_UNSAFE" and str(path) in raised.value.cause
        assert f"rm {path}" in raised.value.fix
    # nothing was made or written through a link
    assert not (tmp_path / "made-through-the-link").exists()
    if kind == "symlink":
        assert (tmp_path / "elsewhere.txt").read_text() == "not a lock"


def test_another_users_lock_file_is_refused_except_to_root(tmp_path):
    """A user's process refuses another user's lock file (it could be held forever to stop ingestion);
    root takes it: a container running as root on a folder its user made finds their lock files."""
    path = tmp_path / ".ingest.lock"
    path.touch(mode=0o600)
    owner = os.lstat(path).st_uid
    assert "belongs to another user" in _problem(os.lstat(path), uid=owner + 4242)
    assert _problem(os.lstat(path), uid=owner) is None and _problem(os.lstat(path), uid=0) is None
    if os.getuid() != 0:
        pytest.skip("giving a file to another user takes root")
    os.chown(path, owner + 4242, os.getgid() + 4242)
    with exclusive(path) as acquired:  # root, on another user's file
        assert acquired
    check(path)

def test_a_regular_lock_file_of_the_users_passes_and_an_absent_one_is_made(tmp_path):
    path = tmp_path / "x.lock"
    check(path)  # absent: made at its first use
    with exclusive(path) as acquired:
        assert acquired
    check(path)


APP = textwrap.dedent("""
    import sys
    import workbench
    from workbench.demo.fake_provider import FakeProvider, FakeTransport

    client = workbench.http_client(transport=FakeTransport(FakeProvider()))
    for n in range(3):
        with workbench.run(f"run-{n}"):
            reply = client.post("https://api.openai.com/v1/chat/completions", json={
                "model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"hello {n}"}]})
            assert reply.status_code == 200
    print("app ok")  # its exit hands the spool to a detached ingester, which refuses the lock unseen
""")


def _spooled_calls(db) -> int:
    return sum(path.read_bytes().count(b'"kind":"call"') for path in spool_dir_of(db).glob("*.jsonl"))


def test_an_unsafe_ingest_lock_never_breaks_recording_and_commands_say_why_the_store_stops(tmp_path):
    db = tmp_path / "wb.duckdb"
    lock = spool_dir_of(db) / ".ingest.lock"
    make_unsafe(lock, "symlink", tmp_path)
    env = {"WORKBENCH_DB": str(db), "WORKBENCH_MODELS": "none.toml"}
    app = run_python(APP, cwd=tmp_path, env=env)
    assert app.returncode == 0 and "app ok" in app.stdout, app.stdout + app.stderr
    assert "Traceback" not in app.stderr, app.stderr
    assert app.stderr.count("WB_LOCK_UNSAFE") == 1 and f"rm {lock}" in app.stderr, app.stderr  # said once
    ingesters_until_none(db)  # the ingester started at exit refused the lock too
    assert _spooled_calls(db) == 3 and not db.exists()  # kept, none lost

    # a command that ingests before it reads says why, instead of a store that silently stopped growing
    listed = workbench_cli("runs", "list", "--db", str(db), cwd=tmp_path, env=env)
    assert listed.returncode == 2, listed.stdout + listed.stderr
    said = listed.stdout + listed.stderr
    assert "WB_LOCK_UNSAFE" in said and "symbolic link" in said and "Traceback" not in said, said
    assert _spooled_calls(db) == 3

    lock.unlink()  # the fix the error names
    listed = workbench_cli("runs", "list", "--db", str(db), "--format", "json", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert sorted(row["name"] for row in json.loads(listed.stdout)) == ["run-0", "run-1", "run-2"]
    assert count(db, "SELECT count(*) FROM calls") == 3
    assert lock.is_file() and not lock.is_symlink()


def test_a_reader_that_does_not_wait_on_ingestion_logs_the_refused_lock_and_reads_on(tmp_path, caplog):
    db = tmp_path / "wb.duckdb"
    spool = spool_dir_of(db)
    make_unsafe(spool / ".ingest.lock", "folder", tmp_path)
    (spool / "host-1-0000abcd.jsonl").write_text("")
    assert ingest_pending(db, spool, wait=False) == 0  # the dashboard's: fail-open
    assert "WB_LOCK_UNSAFE" in caplog.text
    with pytest.raises(WorkbenchError) as raised:  # a command's: it waits on ingestion, so it says
        ingest_pending(db, spool, wait=True)
    assert raised.value.code == "WB_LOCK_UNSAFE"


SUITE = textwrap.dedent(r'''
    import os

    def test_call(workbench_cassette):
        response = workbench_cassette.http_client().post(
            os.environ["FAKE_URL"] + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 200
''')


def test_a_pytest_session_says_in_its_summary_that_its_calls_stay_in_the_spool(tmp_path, fake_url):
    db = tmp_path / "wb.duckdb"
    make_unsafe(spool_dir_of(db) / ".ingest.lock", "dangling-symlink", tmp_path)
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]), "WORKBENCH_DB": str(db),
           "FAKE_URL": fake_url, "WORKBENCH_FLUSH_INTERVAL_S": "0.05"}
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                             "--workbench-record-mode=record", "test_suite.py"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the calls this session recorded stay in the spool" in result.stdout, result.stdout
    assert "WB_LOCK_UNSAFE" in result.stdout and "symbolic link" in result.stdout, result.stdout
    ingesters_until_none(db)
    assert _spooled_calls(db) == 1 and not (tmp_path / "made-through-the-link").exists()


CASSETTE_APP = textwrap.dedent("""
    import os, sys
    import workbench
    from workbench.demo.fake_provider import FakeProvider, FakeTransport

    lock = sys.argv[1]
    client = workbench.http_client(transport=FakeTransport(FakeProvider()), cassette="chat.json", mode="record")
    def ask(n):
        reply = client.post("https://api.openai.com/v1/chat/completions", json={
            "model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"call {n}"}]})
        assert reply.status_code == 200
    for n in range(3):
        ask(n)                  # the cassette's lock is refused: each call still returns, its recording waits
    os.remove(lock)             # the fix
    ask(3)
    client.close()
    print("app ok")
""")


def test_a_cassette_whose_lock_is_refused_keeps_its_recordings_for_the_next_save(tmp_path):
    db = tmp_path / "wb.duckdb"
    from workbench.replay.session import _working_of

    lock = _working_of((tmp_path / "chat.json").resolve(), "locks", ".cassette.lock", work_dir_of(db))
    make_unsafe(lock, "symlink", tmp_path)
    app = run_python(CASSETTE_APP, str(lock), cwd=tmp_path, env={"WORKBENCH_DB": str(db)})
    assert app.returncode == 0 and "app ok" in app.stdout, app.stdout + app.stderr
    assert "WB_LOCK_UNSAFE" in app.stderr and "Traceback" not in app.stderr, app.stderr
    interactions = json.loads((tmp_path / "chat.json").read_text())["interactions"]
    prompts = [json.loads(item["request"]["body"])["messages"][0]["content"] for item in interactions]
    assert prompts == [f"call {n}" for n in range(4)]
