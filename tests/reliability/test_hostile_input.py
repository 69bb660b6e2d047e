"""Hostile and broken input a user can hand Workbench — cassettes (an alias bomb, an oversize file,
the wrong shapes, a folder), price files, settings, a DuckDB file of something else — is refused
with a `WB_` error, exit 2, no traceback and nothing changed; or, on the application's own path,
recording degrades and the application's call returns as it would without Workbench."""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import threading
import time

import duckdb
import pytest

import workbench
from reliability.faults import run_python, workbench_cli
from workbench.demo.fake_provider import FakeProvider, FakeTransport

BILLION_LAUGHS = "\n".join(
    [f'{chr(97 + level)}: &{chr(97 + level)} [' + ",".join([f"*{chr(96 + level)}"] * 9) + "]" if level else
     'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]' for level in range(9)]
    + ["interactions: [*i]"]) + "\n"
GOOD_INTERACTION = {"request": {"method": "POST", "uri": "http://x/v1/chat/completions", "body": "{}"},
                    "response": {"status": {"code": 200}, "body": {"string": "{}"}}}
HOSTILE_CASSETTES = {
    "alias-bomb.yaml": BILLION_LAUGHS,
    "request-is-a-list.json": json.dumps({"interactions": [{"request": [1, 2], "response": {"status": 200}}]}),
    "status-infinity.json": '{"interactions": [{"request": {"uri": "http://x"}, "response": {"status": Infinity}}]}',
    "status-true.json": json.dumps({"interactions": [{"request": {"uri": "http://x"}, "response": {"status": True}}]}),
    "deep.json": '{"interactions": ' + "[" * 50_000 + "]" * 50_000 + "}",
    "deep.yaml": "interactions:\n" + "- " * 5_000 + "x\n",
    "uri-is-a-number.json": json.dumps({"interactions": [{"request": {"uri": 7}, "response": {"status": 200}}]}),
    "not-a-mapping.json": json.dumps([GOOD_INTERACTION]),
}


def _fingerprint(root) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def _refused(result, code: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert code in output, output
    assert "Traceback" not in output, output


@pytest.mark.parametrize("name", sorted(HOSTILE_CASSETTES))
def test_a_hostile_cassette_is_refused_by_show(tmp_path, name):
    (tmp_path / name).write_text(HOSTILE_CASSETTES[name])
    before = _fingerprint(tmp_path)
    started = time.monotonic()
    result = workbench_cli("cassettes", "show", name, cwd=tmp_path, timeout=60)
    _refused(result, "WB_CASSETTE_INVALID")
    assert _fingerprint(tmp_path) == before
    assert time.monotonic() - started < 60  # bounded by the timeout above: the bomb never expands


def test_check_refuses_every_hostile_cassette_and_a_folder_named_as_one_without_hanging(tmp_path):
    folder = tmp_path / "cassettes"
    folder.mkdir()
    for name, text in HOSTILE_CASSETTES.items():
        (folder / name).write_text(text)
    (folder / "a-folder.json").mkdir()  # a folder with a cassette's name
    (folder / "fine.json").write_text(json.dumps({"interactions": [GOOD_INTERACTION]}))
    before = _fingerprint(tmp_path)
    result = workbench_cli("cassettes", "check", "cassettes", cwd=tmp_path, timeout=60)
    _refused(result, "WB_CASSETTE_INVALID")
    assert result.stdout.count("WB_CASSETTE_INVALID") == len(HOSTILE_CASSETTES), result.stdout
    assert "fine.json: 1 interactions" in result.stdout
    shown = workbench_cli("cassettes", "show", "cassettes/a-folder.json", cwd=tmp_path)
    _refused(shown, "WB_CASSETTE_INVALID")
    assert _fingerprint(tmp_path) == before


def test_an_oversize_cassette_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from workbench.errors import WorkbenchError
    from workbench.replay import cassette

    path = tmp_path / "huge.json"
    with open(path, "wb") as handle:  # sparse: the size without the bytes
        handle.truncate(cassette.MAX_CASSETTE_BYTES + 1)
    with pytest.raises(WorkbenchError) as caught:
        cassette.load_cassette(path)
    assert caught.value.code == "WB_CASSETTE_INVALID" and "over the limit" in caught.value.cause


MODELS_FILES = {
    "model-is-text.toml": 'model = "gpt"',
    "model-is-a-table.toml": '[model]\nid = "gpt"',
    "boolean-price.toml": ('[[model]]\nid = "m"\nprovider = "p"\ncontext_window = 1000\nmax_output = 100\n'
                           'input = true\noutput = 1\nsource = "s"\nas_of = 2025-01-01\n'),
    "not-toml.toml": "root:x:0:0:root:/root:/bin/bash\n",
}


@pytest.mark.parametrize("name", sorted(MODELS_FILES))
def test_a_bad_models_file_is_refused_by_the_cli(tmp_path, name):
    (tmp_path / name).write_text(MODELS_FILES[name])
    (tmp_path / "c.json").write_text(json.dumps({"interactions": [GOOD_INTERACTION]}))
    before = _fingerprint(tmp_path)
    result = workbench_cli("cassettes", "show", "c.json", "--models", name, cwd=tmp_path)
    _refused(result, "WB_MODELS_INVALID")
    assert _fingerprint(tmp_path) == before


def test_an_unrelated_duckdb_file_is_never_given_workbench_tables(tmp_path):
    other = tmp_path / "inventory.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE parts (sku VARCHAR, quantity INTEGER); INSERT INTO parts VALUES ('a-1', 3)")
    con.close()
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    for command in (["report", "cost", "--db", str(other)], ["runs", "list", "--db", str(other)]):
        _refused(workbench_cli(*command, cwd=tmp_path), "WB_STORE_INVALID")
    # and the recorder's own ingestion into it: refused, nothing written
    (tmp_path / "spool").mkdir()
    (tmp_path / "spool" / "x-1-a.jsonl").write_text('{"kind": "call", "row": {"call_id": "c"}}\n')
    result = run_python("import sys; from workbench.store.ingest import ingest_spools; "
                        "ingest_spools(sys.argv[1], sys.argv[2])", str(other), str(tmp_path / "spool"), cwd=tmp_path)
    assert "WB_STORE_INVALID" in result.stderr
    assert (tmp_path / "spool" / "x-1-a.jsonl").read_text()  # the spool keeps the record
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["inventory.duckdb", "spool"]
    con = duckdb.connect(str(other), read_only=True)
    assert [name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()] == ["parts"]
    con.close()


@pytest.mark.parametrize("variable, value", [
    ("WORKBENCH_MODELS", "/etc/passwd"),
    ("WORKBENCH_FLUSH_INTERVAL_S", "soon"),
    ("WORKBENCH_BODY_CAP_BYTES", "-5"),
    ("WORKBENCH_RECORD_MODE", "sideways"),
])
def test_a_bad_setting_never_fails_the_applications_call(tmp_path, monkeypatch, caplog, variable, value):
    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("WORKBENCH_DB", str(tmp_path / "wb.duckdb"))
    caplog.set_level(logging.WARNING, logger="workbench")
    recorder_module = importlib.import_module("workbench.capture.recorder")
    monkeypatch.setattr(recorder_module, "_recorder", None)  # as in a fresh process
    client = workbench.http_client(transport=FakeTransport(FakeProvider()))
    replies = [client.post("http://fake.local/v1/chat/completions",
                           json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}) for _ in range(3)]
    assert [reply.status_code for reply in replies] == [200, 200, 200]
    warnings = [record.getMessage() for record in caplog.records if record.name.startswith("workbench")]
    assert len(warnings) == 1 and value in warnings[0], warnings  # logged once, naming the bad value
    workbench.flush()
    con = duckdb.connect(str(tmp_path / "wb.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM calls").fetchall()[0][0] == 3  # still recorded
    con.close()
    monkeypatch.setattr(recorder_module, "_recorder", None)


def test_a_tiny_flush_interval_does_not_spin(tmp_path):
    from workbench.store.spool import MIN_FLUSH_INTERVAL_S, Spool

    spool = Spool(tmp_path / "wb.duckdb", tmp_path / "spool", flush_interval_s=1e-6)
    assert spool.flush_interval_s == MIN_FLUSH_INTERVAL_S
    wakes = []
    original = spool.flush

    def counted(ingest=True):
        wakes.append(1)
        original(ingest)

    spool.flush = counted
    spool.append("call", {"call_id": "c"})
    threading.Event().wait(0.3)
    spool.stop()
    # at most one wake per interval (a 1e-6 s interval would wake tens of thousands of times)
    assert 1 <= len(wakes) <= 0.3 / MIN_FLUSH_INTERVAL_S + 2
