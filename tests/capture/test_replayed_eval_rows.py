"""A replayed eval stores the same rows whether the recorder's shortcuts are used or not: the
masking of span attributes remembers the short texts it found clean, and the recorder reads a
provider's credential values once for its repeated headers. Both must change nothing stored, and
never let a secret through."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx2
import pytest

import workbench
from workbench.capture import flush, tracing
from workbench.capture.recorder import Recorder
from workbench.evaluate.gate import evaluate
from workbench.evaluate.runner import Network
from workbench.evaluate.suite import load_suites
from workbench.store.db import open_store
from workbench.wire.redact import REDACTED, credential_values, mask_secrets

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-proj-" + "Q" * 40  # a key-shaped value, as an attribute an application set


def _refuse() -> Network:
    def refuse(request):
        raise AssertionError(f"network call in replay: {request.method} {request.url}")

    return Network(sync=lambda: httpx2.MockTransport(refuse), async_=lambda: httpx2.MockTransport(refuse))


def _rows(db: Path, sql: str) -> list[dict]:
    with open_store(db, read_only=True) as con:
        cursor = con.execute(sql)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def _varying(name: str) -> bool:
    """Columns and attributes that differ between two identical runs: ids, times, durations."""
    return (name.endswith(("_id", ".id", "_at", "_time", "_ms", "_lock")) or name in ("time", "process_lock")
            or "duration" in name or "ttfb" in name)


def _stable(row: dict) -> dict:
    out = {}
    for name, value in row.items():
        if _varying(name):
            continue
        if name == "attributes" and value:
            value = [(key, item) for key, item in json.loads(value).items() if not _varying(key)]  # in stored order
        out[name] = value
    return out


def _stored(db: Path) -> dict[str, list[dict]]:
    tables = {"calls": "SELECT * FROM calls", "call_bodies": "SELECT * FROM call_bodies",
              "spans": "SELECT * FROM spans", "eval_samples": "SELECT * FROM eval_samples",
              "span_events": "SELECT * FROM span_events", "runs": "SELECT * FROM runs"}
    return {table: sorted((_stable(row) for row in _rows(db, sql)), key=lambda row: json.dumps(row, sort_keys=True, default=str))
            for table, sql in tables.items()}


def _replay(root: Path, db: Path) -> dict[str, list[dict]]:
    workbench.configure(db=db)
    suite = load_suites([root / "evals" / "classifier.py"])["classifier"]
    with workbench.run("outer") as run:  # an event attribute holding a key: masked in its span event
        workbench.event("note", text=f"key {KEY} and model gpt-4o-mini", model="gpt-4o-mini")
    assert run.status == "ok"
    assert evaluate(suite, network=_refuse()).exit_code == 0
    flush()
    return _stored(db)


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copytree(REPO / "evals", root / "evals", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "cassettes", root / "cassettes")
    shutil.copy(REPO / "models.toml", root / "models.toml")
    yield root
    workbench.configure()


def test_a_replayed_eval_stores_the_same_rows_without_the_recorders_shortcuts(examples, tmp_path, monkeypatch):
    with monkeypatch.context() as plain:  # every text masked anew, every key classified anew, credentials read per call
        plain.setattr(tracing, "_CLEAN_LONGEST", -1)
        plain.setattr(tracing, "_KEYS_MOST", 0)
        plain.setattr(tracing, "_KIND_OF_KEY", {})
        plain.setattr(tracing, "_CLEAN_TEXTS", set())
        plain.setattr(Recorder, "_credentials", lambda self, pending: tuple(credential_values(
            pending.request_headers.multi_items() if pending.request_headers is not None else (), pending.url)))
        without = _replay(examples, tmp_path / "plain.duckdb")
    tracing._CLEAN_TEXTS.clear()
    tracing._KIND_OF_KEY.clear()
    with_shortcuts = _replay(examples, tmp_path / "fast.duckdb")

    assert with_shortcuts["calls"] and with_shortcuts["spans"] and with_shortcuts["eval_samples"]
    for table in without:
        assert with_shortcuts[table] == without[table], table
    text = json.dumps(with_shortcuts, default=str)
    assert KEY not in text and REDACTED in text


def test_a_text_found_clean_is_remembered_and_a_secret_never_is():
    tracing._CLEAN_TEXTS.clear()
    clean, secret = "gpt-4o-mini", f"Bearer {KEY}"
    for _ in range(3):  # the second and third time from what the first found
        assert tracing.scrubbed({"gen_ai.request.model": clean, "note": secret}) == {
            "gen_ai.request.model": clean, "note": mask_secrets(secret)}
    assert clean in tracing._CLEAN_TEXTS
    assert not any(KEY in text for text in tracing._CLEAN_TEXTS)
    assert KEY not in mask_secrets(secret)


def test_the_clean_texts_stay_bounded_and_long_texts_are_not_kept():
    tracing._CLEAN_TEXTS.clear()
    for number in range(tracing._CLEAN_MOST + 10):
        tracing.scrubbed({"name": f"case {number}"})
    assert len(tracing._CLEAN_TEXTS) <= tracing._CLEAN_MOST
    long = "x" * (tracing._CLEAN_LONGEST + 1)
    assert tracing.scrubbed({"name": long}) == {"name": long}
    assert long not in tracing._CLEAN_TEXTS


def test_a_key_that_changes_between_calls_is_masked_in_each_echo(store, fake_provider, fake_url):
    """The recorder reuses the credential values of the last request's headers only for the same
    headers: a client whose key changes between calls has each key masked where the provider
    echoes it (a 401 body quoting the key)."""
    import openai

    from workbench.demo.fake_provider import Reply

    keys = [f"sk-first-{'1' * 12}", f"sk-other-{'2' * 12}", "sk-first-" + "1" * 12]  # short: no secret shape
    fake_provider.script(*[Reply(status=401, error_message=f"Incorrect API key provided: {key}") for key in keys])
    with workbench.run("keys"):
        for key in keys:
            client = openai.OpenAI(base_url=fake_url + "/v1", api_key=key, max_retries=0,
                                   http_client=workbench.http_client())
            with pytest.raises(openai.AuthenticationError):
                client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "hi"}])
    calls = store.calls()
    assert len(calls) == 3
    stored = json.dumps([_rows(store.path, sql) for sql in ("SELECT * FROM calls", "SELECT * FROM call_bodies",
                                                             "SELECT * FROM spans")], default=str)
    assert not any(key in stored for key in keys)
    assert stored.count("Incorrect API key provided: [redacted]") >= 3
