"""A store keeps Workbench's working files (spools, replay state, locks) in one folder named after
it, `<store>.workbench/`; nothing lands beside committed cassettes; and all of it works where
`fcntl` does not exist (Windows), through the one lock module."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from workbench.config import load_settings, spool_dir_of, work_dir_of
from workbench.store.ingest import ingest_spools

RECORD_AND_REPLAY = textwrap.dedent("""
    import sys
    if sys.argv[1] == "no-fcntl":
        sys.modules["fcntl"] = None  # `import fcntl` fails, as on Windows
    import warnings
    warnings.simplefilter("ignore")  # filelock's notice that only soft locks exist here
    import workbench
    from workbench.demo.fake_provider import FakeProvider, FakeTransport

    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]}
    recording = workbench.http_client(cassette=sys.argv[2], mode="record", transport=FakeTransport(FakeProvider()))
    with workbench.run("working-folder"):
        assert recording.post("http://fake.test/v1/chat/completions", json=body).status_code == 200
    recording.close()
    replaying = workbench.http_client(cassette=sys.argv[2], mode="replay")
    assert replaying.post("http://fake.test/v1/chat/completions", json=body).status_code == 200
    replaying.close()
    workbench.flush()
    print(sorted(name for name, module in sys.modules.items() if name == "fcntl" and module is not None))
""")


@pytest.mark.parametrize("platform", ["fcntl", "no-fcntl"])
def test_recording_and_replay_keep_their_files_in_the_stores_working_folder(tmp_path, platform):
    data, cassettes = tmp_path / "data", tmp_path / "cassettes"
    db = data / "orders.duckdb"
    env = {key: value for key, value in os.environ.items() if not key.startswith("WORKBENCH_")}
    result = subprocess.run([sys.executable, "-c", RECORD_AND_REPLAY, platform, str(cassettes / "greeting.json")],
                            env={**env, "WORKBENCH_DB": str(db)}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    if platform == "no-fcntl":
        assert result.stdout.strip() == "[]"  # nothing imported fcntl, and everything worked

    assert sorted(os.listdir(cassettes)) == ["greeting.json"]  # no lock file, no temporary
    assert set(os.listdir(data)) <= {"orders.duckdb", "orders.duckdb.wal", "orders.duckdb.workbench"}
    work = work_dir_of(db)
    assert work == data / "orders.duckdb.workbench" and (work / "replay").is_dir()
    assert load_settings(db=db).resolved_spool_dir == spool_dir_of(db) == work / "spool"
    ingest_spools(db, spool_dir_of(db))
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM calls").fetchall() == [(2,)]  # recorded, then replayed


def test_the_spool_dir_setting_still_puts_spools_where_it_says(tmp_path):
    settings = load_settings(db=tmp_path / "wb.duckdb", spool_dir=tmp_path / "elsewhere")
    assert settings.resolved_spool_dir == tmp_path / "elsewhere"
    assert settings.work_dir == tmp_path / "wb.duckdb.workbench"


def test_spools_an_older_workbench_left_beside_the_store_are_still_ingested(tmp_path):
    db, legacy = tmp_path / "wb.duckdb", tmp_path / "spool"
    legacy.mkdir()
    dead = legacy / f"{socket.gethostname()}-999999999-deadbeef.jsonl"  # its writer is gone
    dead.write_text(json.dumps({"kind": "call", "row": {"call_id": "from-0.1", "input_tokens": 3, "settled": True,
                                                        "started_at": "2025-01-01T00:00:00+00:00"}}) + "\n")
    unrelated = legacy / "notes.jsonl"  # not a spool file's name: never read
    unrelated.write_text('{"kind": "call", "row": {"call_id": "not-ours"}}\n')

    assert ingest_spools(db, spool_dir_of(db)) == 1
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT call_id FROM calls").fetchall() == [("from-0.1",)]
    assert not dead.exists() and unrelated.exists()
    # a spool_dir set on purpose is the only folder read
    dead.write_text(json.dumps({"kind": "call", "row": {"call_id": "second"}}) + "\n")
    assert ingest_spools(db, tmp_path / "set-on-purpose") == 0 and dead.exists()
