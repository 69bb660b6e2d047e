"""Resume any run from the store: `workbench.run(name, resume=RUN_ID)` and `workbench runs resume
RUN_ID -- COMMAND` answer every call the earlier run answered from the store (replayed, linked to the
call that paid), and send the rest; a killed 100-call batch job resumed pays for exactly 100 calls."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import openai
import pytest

import workbench
from fixtures.dashboard_app import render
from workbench.demo import batch
from workbench.money import format_amount

# the batch job's price row: 15 and 60 cents per million tokens, so a call costs exactly
# input_tokens x 15 + output_tokens x 60 micro-cents
BATCH_PRICES = {"input_tokens": 15, "output_tokens": 60}


def _cost(row: dict) -> int:
    return sum(row[name] * price for name, price in BATCH_PRICES.items())


def _sdk(fake_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{fake_url}/v1", api_key="sk-fake-workbench", http_client=workbench.http_client(),
                         max_retries=0)


def _ask(client: openai.OpenAI, text: str) -> str:
    reply = client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content


def test_a_resumed_run_replays_what_matches_and_goes_live_from_the_first_request_that_differs(fake_url, fake_provider,
                                                                                                 store, monkeypatch):
    client = _sdk(fake_url)
    with workbench.run("job") as first:
        answers = [_ask(client, text) for text in ("a", "b", "c")]
    assert len(fake_provider.requests) == 3

    with workbench.run("job", resume=first.run_id[-10:]) as second:  # a unique end of the id will do
        again = [_ask(client, text) for text in ("a", "x", "b")]

    # "a" came from the store; "x" differs, so it and everything after it ("b" too) went to the provider
    assert len(fake_provider.requests) == 5
    assert [request.json["messages"][0]["content"] for request in fake_provider.requests[3:]] == ["x", "b"]
    assert again[0] == answers[0] and again[2] == answers[1]
    assert [(call.replayed, call.resumed_from_call_id) for call in second.calls] == [
        (True, first.calls[0].call_id), (False, None), (False, None)]
    billed = second.billed
    assert (billed.calls, billed.replayed_calls) == (2, 1)
    assert billed.cost_micros == second.calls[1].cost_micros + second.calls[2].cost_micros
    assert billed.replayed_cost_micros == second.calls[0].cost_micros == first.calls[0].cost_micros

    row = store.one("SELECT * FROM runs WHERE run_id = ?", [second.run_id])
    assert row["resumed_from_run_id"] == first.run_id
    assert (row["billed_calls"], row["billed_replayed_calls"], row["billed_cost_micros"]) == (2, 1, billed.cost_micros)
    stored = store.rows("SELECT replayed, resumed_from_call_id, cassette FROM calls WHERE run_id = ? ORDER BY started_at",
                        [second.run_id])
    assert stored[0] == {"replayed": True, "resumed_from_call_id": first.calls[0].call_id,
                         "cassette": f"run {first.run_id}"}

    # the Run explorer says what the resume saved
    page = render(store.path, monkeypatch, "run_explorer.py", run_id=second.run_id)
    saved = " ".join(info.value for info in page.info)
    assert (f"Resumed from run {first.run_id}: 1 call answered from the store, not paid again; it would have "
            f"cost {format_amount(billed.replayed_cost_micros, 'USD')}.") in saved


def test_a_resume_of_a_resume_answers_from_the_first_run_and_streams_replay_as_streams(fake_url, fake_provider, store):
    client = _sdk(fake_url)

    def ask_streamed(text: str) -> str:
        stream = client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": text}],
                                                stream=True, stream_options={"include_usage": True})
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

    with workbench.run("chain") as first:
        answers = [ask_streamed(text) for text in ("1", "2", "3")]
    with pytest.raises(RuntimeError):  # killed while it was still replaying: it answered nothing itself
        with workbench.run("chain", resume=first.run_id) as second:
            ask_streamed("1")
            ask_streamed("2")
            raise RuntimeError("the worker died")
    with workbench.run("chain", resume=second.run_id) as third:
        again = [ask_streamed(text) for text in ("1", "2", "3", "4")]

    assert len(fake_provider.requests) == 4  # three paid by the first run, "4" by the third
    assert again[:3] == answers
    assert [call.resumed_from_call_id for call in third.calls] == [call.call_id for call in first.calls] + [None]
    assert all(call.settled for call in third.calls)
    assert (third.billed.calls, third.billed.replayed_calls) == (1, 3)
    assert (second.billed.calls, second.billed.replayed_calls) == (0, 2)


def test_async_clients_and_the_sdks_own_instrumented_clients_resume_too(fake_url, fake_provider, store):
    workbench.instrument()
    try:
        plain = openai.OpenAI(base_url=f"{fake_url}/v1", api_key="sk-fake-workbench", max_retries=0)  # its own client
        asynchronous = openai.AsyncOpenAI(base_url=f"{fake_url}/v1", api_key="sk-fake-workbench", max_retries=0,
                                          http_client=workbench.async_http_client())

        async def job():
            _ask(plain, "one")
            reply = await asynchronous.chat.completions.create(model="wbt-gpt",
                                                               messages=[{"role": "user", "content": "two"}])
            return reply.choices[0].message.content

        async def twice():
            async with workbench.run("mixed") as first:
                await job()
            async with workbench.run("mixed", resume=first.run_id) as again:
                answer = await job()
            return first, again, answer

        first, again, answer = asyncio.run(twice())
    finally:
        workbench.uninstrument()
    assert len(fake_provider.requests) == 2 and answer == "echo: two"
    assert [call.resumed_from_call_id for call in again.calls] == [call.call_id for call in first.calls]
    assert (again.billed.calls, again.billed.replayed_calls) == (0, 2)


def test_bad_resume_input_is_refused_before_anything_is_sent(fake_url, fake_provider, store):
    with pytest.raises(workbench.WorkbenchError) as unknown:
        with workbench.run("job", resume="no-such-run"):
            pass
    assert unknown.value.code == "WB_RUN_NOT_FOUND" and "no-such-run" in unknown.value.cause

    runs = []
    for _ in range(17):  # 17 random ids over 16 first hex digits: two share their first character
        with workbench.run("many") as run:
            runs.append(run.run_id)
    shared = next(a[0] for index, a in enumerate(runs) if any(b[0] == a[0] for b in runs[index + 1:]))
    with pytest.raises(workbench.WorkbenchError) as ambiguous:
        with workbench.run("job", resume=shared):
            pass
    assert ambiguous.value.code == "WB_RUN_AMBIGUOUS"

    with workbench.run("outer") as outer:
        with pytest.raises(workbench.WorkbenchError) as running:
            with workbench.run("inner", resume=outer.run_id):
                pass
    assert running.value.code == "WB_RUN_STILL_RUNNING" and outer.run_id in running.value.cause
    assert store.rows("SELECT run_id FROM runs WHERE name IN ('job', 'inner')") == []  # nothing recorded
    assert fake_provider.requests == []


# -- the killed batch job ------------------------------------------------------------------------


def _assert_resumed_pays_for_exactly_100(first: str, store, fake_provider) -> None:
    assert len(fake_provider.requests) == 100  # 60 before the kill, 40 after: nothing paid twice
    asked = [request.json["messages"][0]["content"] for request in fake_provider.requests]
    assert asked == [f"Summarise item {item}" for item in range(100)]

    killed = store.one("SELECT * FROM runs WHERE run_id = ?", [first])
    assert killed["status"] == "running"  # it never ended: SIGKILL
    resumed = store.one("SELECT * FROM runs WHERE resumed_from_run_id = ?", [first])
    assert resumed["status"] == "ok"
    paid_first = store.rows("SELECT call_id, input_tokens, output_tokens, cost_micros FROM calls WHERE run_id = ? "
                            "ORDER BY started_at", [first])
    calls = store.rows("SELECT call_id, replayed, resumed_from_call_id, input_tokens, output_tokens, cost_micros "
                       "FROM calls WHERE run_id = ? ORDER BY started_at", [resumed["run_id"]])
    replayed, live = calls[:60], calls[60:]
    assert len(paid_first) == 60 and len(live) == 40
    assert [(call["replayed"], call["resumed_from_call_id"]) for call in replayed] == [
        (True, call["call_id"]) for call in paid_first]
    assert all(not call["replayed"] and call["resumed_from_call_id"] is None for call in live)
    assert all(call["cost_micros"] == _cost(call) > 0 for call in paid_first + live)

    live_micros, saved_micros = sum(map(_cost, live)), sum(map(_cost, paid_first))
    assert (resumed["billed_calls"], resumed["billed_replayed_calls"]) == (40, 60)
    assert (resumed["billed_cost_micros"], resumed["billed_replayed_cost_micros"]) == (live_micros, saved_micros)
    paid = store.one("SELECT count(*) AS n, sum(cost_micros) AS micros FROM calls WHERE NOT replayed AND run_id IN (?, ?)",
                     [first, resumed["run_id"]])
    assert (paid["n"], paid["micros"]) == (100, live_micros + saved_micros)

    shown = subprocess.run([sys.executable, "-m", "workbench", "runs", "show", resumed["run_id"], "--format", "json",
                            "--db", str(store.path)], capture_output=True, text=True, check=True)
    saved = json.loads(shown.stdout)["resume"]
    assert saved == {"replayed_calls": 60, "saved_cost_micros": saved_micros, "unpriced": 0, "currency": "USD"}
    table = subprocess.run([sys.executable, "-m", "workbench", "runs", "show", resumed["run_id"], "--db", str(store.path)],
                           capture_output=True, text=True, check=True).stdout
    assert (f"resumed from run {first}: 60 calls answered from the store, not paid again; they would have cost "
            f"{format_amount(saved_micros, 'USD')}") in " ".join(table.split())


def test_a_batch_job_killed_at_call_60_and_resumed_pays_for_exactly_100_calls(fake_url, fake_provider, store):
    first = batch.kill_when_stored(batch.start(fake_url, store.path, "--pause-after", "60"), store.path, 60)
    resumed = batch.start(fake_url, store.path, "--resume", first)
    assert resumed.wait(120) == 0, resumed.stderr.read()
    _assert_resumed_pays_for_exactly_100(first, store, fake_provider)


def test_runs_resume_runs_the_command_with_the_killed_run_resumed(fake_url, fake_provider, store):
    first = batch.kill_when_stored(batch.start(fake_url, store.path, "--pause-after", "60"), store.path, 60)
    via = (sys.executable, "-m", "workbench", "runs", "resume", first[-12:], "--db", str(store.path), "--")
    resumed = batch.start(fake_url, store.path, via=via)
    assert resumed.wait(120) == 0, resumed.stderr.read()
    assert f"resuming run {first} (batch)" in resumed.stderr.read()
    _assert_resumed_pays_for_exactly_100(first, store, fake_provider)


def test_runs_resume_refuses_a_run_still_running_before_the_command_starts(fake_url, fake_provider, store, tmp_path):
    job = batch.start(fake_url, store.path, "--pause-after", "2", calls=5)
    try:
        run_id = job.stdout.readline().strip()
        while batch.stored_count(store.path, run_id, "runs") < 1:
            time.sleep(0.05)
        marker = tmp_path / "started"
        refused = subprocess.run(
            [sys.executable, "-m", "workbench", "runs", "resume", run_id, "--db", str(store.path), "--",
             sys.executable, "-c", f"open({str(marker)!r}, 'w')"], capture_output=True, text=True)
        assert refused.returncode == 2
        assert "WB_RUN_STILL_RUNNING" in refused.stdout + refused.stderr
        assert not marker.exists()
    finally:
        job.kill()
        job.wait()
