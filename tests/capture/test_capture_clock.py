"""Backdated recording: traffic recorded inside `clock.backdated(at)` goes through the real
transports, runs and spool, and every time it carries (calls, runs, spans, span events,
compactions) reads from `at`, with the durations it really took."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import openai
import pytest

import workbench
from workbench.capture import clock

AT = datetime(2025, 3, 3, 9, 30, tzinfo=timezone.utc)
MESSAGES = [{"role": "user", "content": "hello"}]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, http_client=workbench.http_client())


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def near(value: datetime, expected: datetime, slack_s: float = 30) -> bool:
    return abs((_utc(value) - expected).total_seconds()) < slack_s


def test_a_backdated_run_is_stored_at_its_time_with_its_calls_spans_and_events(store, fake_url):
    client = _client(fake_url)
    with clock.backdated(AT), workbench.run("nightly", user="u1") as run:
        client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
        clock.skip(300)  # five minutes later
        client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
        workbench.event("agent.compact", turn=2, outcome="ok", tokens_before=900, tokens_after=200)
    client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)  # after the block: now
    now = datetime.now(timezone.utc)

    row = store.one("SELECT * FROM runs WHERE run_id = ?", [run.run_id])
    assert near(row["started_at"], AT) and near(row["ended_at"], AT + timedelta(seconds=300))
    first, second, live = store.calls()
    assert near(first["started_at"], AT) and near(second["started_at"], AT + timedelta(seconds=300))
    assert near(live["started_at"], now) and live["run_id"] is None
    for call in (first, second):  # what the call took is what it really took
        assert timedelta(0) <= _utc(call["ended_at"]) - _utc(call["started_at"]) < timedelta(seconds=30)
    spans = store.rows("SELECT name, start_time, end_time FROM spans WHERE trace_id = "
                       "(SELECT trace_id FROM spans WHERE span_id = ?) ORDER BY start_time", [row["span_id"]])
    assert [span["name"] for span in spans] == ["run nightly", "chat wbt-gpt", "chat wbt-gpt"]
    assert all(near(span["start_time"], AT, 330) and span["end_time"] >= span["start_time"] for span in spans)
    events = store.rows("SELECT name, time FROM span_events WHERE run_id = ?", [run.run_id])
    assert [event["name"] for event in events] == ["agent.compact"]
    assert near(events[0]["time"], AT + timedelta(seconds=300))
    compaction = store.one("SELECT occurred_at FROM compactions WHERE run_id = ?", [run.run_id])
    assert near(compaction["occurred_at"], AT + timedelta(seconds=300))


def test_each_asyncio_task_keeps_its_own_clock(store, fake_url):
    async def one(at: datetime) -> str:
        client = openai.AsyncOpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0,
                                    http_client=workbench.async_http_client())
        with clock.backdated(at):
            async with workbench.run("task") as run:
                await asyncio.sleep(0.01)  # the other task moves its clock meanwhile
                await client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
        return run.run_id

    async def both():
        return await asyncio.gather(one(AT), one(AT + timedelta(days=10)))

    early, late = asyncio.run(both())
    starts = {row["run_id"]: row["started_at"] for row in store.rows("SELECT run_id, started_at FROM calls")}
    assert near(starts[early], AT) and near(starts[late], AT + timedelta(days=10))


def test_the_wall_clock_cannot_be_skipped():
    with pytest.raises(RuntimeError, match="outside clock.backdated"):
        clock.skip(60)
    with pytest.raises(ValueError, match="aware"):
        with clock.backdated(datetime(2025, 1, 1)):
            pass
    assert clock.shift_ns() == 0
