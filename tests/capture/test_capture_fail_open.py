"""Recording is fail-open: a store that cannot be written is logged and counted, and the provider
call goes on; records that reached the spool wait there and are ingested once the store is back."""

from __future__ import annotations

import shutil

import openai

import workbench
from fixtures.capture_store import Store, register_test_models
from workbench.capture.recorder import recorder

MESSAGES = [{"role": "user", "content": "hello"}]


def _call(url: str) -> str:
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, http_client=workbench.http_client())
    return client.chat.completions.create(model="wbt-gpt", messages=MESSAGES).choices[0].message.content


def test_unwritable_spool_the_call_goes_on(tmp_path, fake_url, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    workbench.configure(db=blocker / "wb.duckdb")  # the store and its spool would live inside a file
    with workbench.run("doomed-store") as run:
        assert _call(fake_url) == "echo: hello"
    assert run.billed.calls == 1  # the bill is kept in memory regardless
    spool = recorder().spool
    spool.flush(ingest=True)
    workbench.flush()  # neither raises
    assert spool.stats["write_errors"] >= 1
    assert "could not write recorded data" in caplog.text


def test_unopenable_store_records_wait_in_the_spool(tmp_path, fake_url, caplog):
    register_test_models()
    db = tmp_path / "store" / "wb.duckdb"
    db.mkdir(parents=True)  # a directory where the DuckDB file should be
    workbench.configure(db=db, spool_dir=tmp_path / "spool")
    assert _call(fake_url) == "echo: hello"
    spool = recorder().spool
    spool.flush(ingest=True)  # what the background thread does
    assert spool.stats["ingest_errors"] >= 1
    assert "could not ingest recorded data" in caplog.text
    assert any((tmp_path / "spool").glob("*.jsonl"))
    # the store comes back: what waited in the spool is ingested, once
    shutil.rmtree(db)
    store = Store(db)
    store.spool_dir = tmp_path / "spool"
    calls = store.calls()
    assert len(calls) == 1 and calls[0]["settled"] is True and calls[0]["cost_micros"] > 0
    workbench.flush()
    assert len(store.rows("SELECT call_id FROM calls")) == 1
