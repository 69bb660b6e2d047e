"""A run captured live becomes a cassette and a case: replayed offline, the same code gets the
same answers (a failure seen in the dashboard becomes a regression test)."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import pytest

import workbench
from workbench.demo.fake_server import serve
from workbench.demo.fake_provider import FakeProvider, Reply
from workbench.errors import WorkbenchError
from workbench.ids import new_id
from workbench.replay.export import export_run
from workbench.store.db import open_store
from workbench.store.ingest import write_rows


def ask(client, question: str) -> str:
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": question}]).choices[0].message.content


def test_an_exported_run_replays_offline_with_the_same_answers(store, tmp_path):
    provider = FakeProvider()
    provider.script("Paris.", "Berlin.")
    with serve(provider) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk-live-secret", max_retries=0,
                               http_client=workbench.http_client())
        with workbench.run("geography", user="u1") as run:
            answers = [ask(client, "Capital of France?"), ask(client, "Capital of Germany?")]
    workbench.flush()
    out = tmp_path / "exported" / "geography.json"
    result = subprocess.run(
        [sys.executable, "-m", "workbench", "cassettes", "export", str(out), "--run", run.run_id,
         "--db", str(store.path)], capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "sk-live-secret" not in out.read_text()
    case = json.loads(out.with_name("geography.case.jsonl").read_text())
    assert (case["run_id"], case["name"], case["input"]) == (run.run_id, "geography", "Capital of Germany?")
    # the provider is gone; the exported cassette answers
    offline = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-other", max_retries=0,
                            http_client=workbench.http_client(cassette=out, mode="replay"))
    assert [ask(offline, "Capital of France?"), ask(offline, "Capital of Germany?")] == answers


def test_exporting_an_unknown_run_is_a_clear_error(store, tmp_path):
    with serve(FakeProvider()) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, http_client=workbench.http_client())
        ask(client, "hello")
    workbench.flush()
    with pytest.raises(WorkbenchError) as caught:
        export_run("no-such-run", tmp_path / "x.json", store.path)
    assert caught.value.code == "WB_RUN_NOT_FOUND"


def test_a_streamed_call_exports_as_a_stream(store, tmp_path):
    provider = FakeProvider()
    provider.script(Reply(text="streamed answer"))
    with serve(provider) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, http_client=workbench.http_client())
        with workbench.run("streaming") as run:
            chunks = client.chat.completions.create(model="gpt-4o-mini", stream=True,
                                                    messages=[{"role": "user", "content": "go"}])
            live = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    workbench.flush()
    out, _ = export_run(run.run_id, tmp_path / "s.json", store.path)
    offline = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0,
                            http_client=workbench.http_client(cassette=out, mode="replay"))
    chunks = offline.chat.completions.create(model="gpt-4o-mini", stream=True, messages=[{"role": "user", "content": "go"}])
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == live == "streamed answer"



def test_runs_made_in_one_millisecond_export_as_cases_of_their_own_ids(tmp_path):
    """A run id starts with the millisecond it was made in (workbench/ids.py): two runs of one
    millisecond still export as two cases."""
    clock = new_id()[:12]
    ids = [clock + new_id()[12:] for _ in range(2)]
    with open_store(tmp_path / "wb.duckdb") as con:
        write_rows(con, "run", [{"run_id": run_id, "name": "job", "kind": "app", "status": "ok"} for run_id in ids])
    cases = [json.loads(export_run(run_id, tmp_path / f"{run_id}.json", tmp_path / "wb.duckdb")[1].read_text())
             for run_id in ids]
    assert cases[0]["id"] != cases[1]["id"]
