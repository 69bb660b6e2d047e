"""Runs: attribution (nested, threads, asyncio tasks), the bill of a run that failed (in Python and in
the `runs` table), and the application's own span events (`agent.compact` -> `compactions`)."""

from __future__ import annotations

import asyncio
import json
import threading

import anthropic
import httpx2
import openai
import pytest
from fixtures.capture_store import COUNTERS, expected_cost

import workbench
from workbench.demo.fake_provider import Reply
from workbench.errors import WorkbenchError

MESSAGES = [{"role": "user", "content": "hello"}]
U1 = {"input_tokens": 1000, "cache_read_tokens": 200, "cache_write_tokens": 0, "output_tokens": 50, "reasoning_tokens": 7}
U2 = {"input_tokens": 333, "cache_read_tokens": 40, "cache_write_tokens": 60, "output_tokens": 21, "reasoning_tokens": 0}
# OpenAI reports no cache writes (its prompt_tokens would count them as plain input)
U3 = {"input_tokens": 777, "cache_read_tokens": 128, "cache_write_tokens": 0, "output_tokens": 11, "reasoning_tokens": 3}


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, http_client=workbench.http_client())


def _anthropic(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0, http_client=workbench.http_client())


@pytest.mark.parametrize("error", [ValueError("boom"), WorkbenchError("WB_BUDGET_EXCEEDED", "over", "raise it")],
                         ids=["ValueError", "WorkbenchError"])
def test_failing_run_bill_in_python_and_in_the_store(store, fake_provider, fake_url, error):
    fake_provider.script(Reply(text="one", usage=U1), Reply(text="two", usage=U2),
                         Reply(text="a stream that will be cut before its usage", cut_after_events=3))
    oai, ant = _openai(fake_url), _anthropic(fake_url)
    with pytest.raises(type(error)) as raised:
        with workbench.run("doomed", user="u1") as run:
            oai.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
            ant.messages.create(model="wbt-claude", max_tokens=100, messages=MESSAGES)
            with pytest.raises((httpx2.HTTPError, openai.APIConnectionError)):
                for _event in oai.chat.completions.create(model="wbt-gpt", messages=MESSAGES, stream=True,
                                                          stream_options={"include_usage": True}):
                    pass
            raise error

    cost = expected_cost("wbt-gpt", U1) + expected_cost("wbt-claude", U2)
    billed = workbench.billed_of(raised.value)
    assert billed is not None
    assert (billed.calls, billed.unsettled, billed.cost_micros, billed.unpriced_calls) == (2, 1, cost, 0)
    assert billed.cost == -(-cost // 1_000_000)  # rounded up once, to the cent
    for name in COUNTERS:
        assert getattr(billed, name) == U1[name] + U2[name], name

    row = store.one("SELECT * FROM runs WHERE run_id = ?", [run.run_id])
    assert row["status"] == "failed" and row["name"] == "doomed"
    assert row["error_type"] == type(error).__name__
    assert row["error_code"] == getattr(error, "code", None)
    assert row["error_message"] == str(error)
    assert (row["billed_calls"], row["billed_unsettled"], row["billed_cost_micros"]) == (2, 1, cost)
    for name in COUNTERS:
        assert row[f"billed_{name}"] == U1[name] + U2[name], name
    assert json.loads(row["tags"]) == {"user": "u1"}
    assert store.rows("SELECT key, value FROM run_tags WHERE run_id = ?", [run.run_id]) == [{"key": "user", "value": "u1"}]
    calls = store.calls()
    assert [(c["settled"], c["error_type"]) for c in calls] == [(True, None), (True, None), (False, "stream_cut")]
    assert {c["run_id"] for c in calls} == {run.run_id}
    run_span = store.span(row["span_id"])
    assert run_span["status_code"] == "ERROR"
    assert json.loads(run_span["attributes"])["workbench.cost_micros"] == cost


def test_a_span_names_the_currency_of_its_cost(store, fake_provider, fake_url):
    """`workbench.cost_micros` on a call's span and on its run's has its currency beside it
    (`workbench.currency`): a figure in euros never reads as dollars to a collector."""
    workbench.register_model(id="wbt-euro", provider="openai", currency="EUR", input=100, output=500,
                             context_window=200_000, max_output=64_000, source="a test's negotiated price",
                             as_of="2025-01-01")
    fake_provider.script(Reply(text="one", usage=U1))
    with workbench.run("in euros") as run:
        _openai(fake_url).chat.completions.create(model="wbt-euro", messages=MESSAGES)
    [call] = store.calls()
    assert call["currency"] == "EUR" and call["cost_micros"] > 0
    attributes = json.loads(store.span(call["span_id"])["attributes"])
    assert (attributes["workbench.cost_micros"], attributes["workbench.currency"]) == (call["cost_micros"], "EUR")
    row = store.one("SELECT span_id FROM runs WHERE run_id = ?", [run.run_id])
    attributes = json.loads(store.span(row["span_id"])["attributes"])
    assert (attributes["workbench.cost_micros"], attributes["workbench.currency"]) == (call["cost_micros"], "EUR")


def test_a_run_span_keeps_every_currency_and_its_unpriced_calls(store, fake_provider, fake_url):
    """A run that spent dollars and euros, with a call nothing priced: its span keeps the main
    currency's figure beside its currency, every currency's money (`workbench.costs`) and the unpriced
    calls (`workbench.unpriced_calls`); main's span had the dollars alone, the euros nowhere."""
    workbench.register_model(id="wbt-euro", provider="openai", currency="EUR", input=100, output=500,
                             context_window=200_000, max_output=64_000, source="a test's negotiated price",
                             as_of="2025-01-01")
    fake_provider.script(Reply(text="one", usage=U1), Reply(text="two", usage=U3), Reply(text="three", usage=U3))
    client = _openai(fake_url)
    with workbench.run("two currencies") as run:
        for model in ("wbt-gpt", "wbt-euro", "wbt-nobody-prices"):
            client.chat.completions.create(model=model, messages=MESSAGES)
    costs = {call["model_requested"]: (call["cost_micros"], call["currency"]) for call in store.calls()}
    assert costs["wbt-nobody-prices"] == (None, None)
    (dollars, usd), (euros, eur) = costs["wbt-gpt"], costs["wbt-euro"]
    assert (usd, eur) == ("USD", "EUR") and dollars > 0 and euros > 0
    row = store.one("SELECT span_id FROM runs WHERE run_id = ?", [run.run_id])
    attributes = json.loads(store.span(row["span_id"])["attributes"])
    assert (attributes["workbench.cost_micros"], attributes["workbench.currency"]) == (dollars, "USD")
    assert json.loads(attributes["workbench.costs"]) == {"USD": dollars, "EUR": euros}
    assert attributes["workbench.unpriced_calls"] == 1


def test_a_run_span_with_nothing_priced_shows_no_figure(store, fake_provider, fake_url):
    fake_provider.script(Reply(text="one", usage=U1))
    with workbench.run("unpriced") as run:
        _openai(fake_url).chat.completions.create(model="wbt-nobody-prices", messages=MESSAGES)
    row = store.one("SELECT span_id FROM runs WHERE run_id = ?", [run.run_id])
    attributes = json.loads(store.span(row["span_id"])["attributes"])
    assert attributes["workbench.unpriced_calls"] == 1
    assert "workbench.cost_micros" not in attributes and "workbench.currency" not in attributes  # never 0 USD


def test_run_without_calls_has_no_bill(store):
    with pytest.raises(KeyError) as raised, workbench.run("empty"):
        raise KeyError("x")
    assert workbench.billed_of(raised.value) is None
    row = store.one("SELECT status, billed_calls, billed_cost_micros FROM runs")
    assert row == {"status": "failed", "billed_calls": None, "billed_cost_micros": None}


def test_nested_runs_parent_bill_includes_child(store, fake_provider, fake_url):
    fake_provider.script(Reply(text="outer", usage=U1), Reply(text="inner", usage=U3))
    client = _openai(fake_url)
    with workbench.run("outer") as outer:
        client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
        with workbench.run("inner", kind="agent") as inner:
            client.chat.completions.create(model="wbt-mini", messages=MESSAGES)
    inner_cost, outer_cost = expected_cost("wbt-mini", U3), expected_cost("wbt-gpt", U1)
    assert (inner.billed.calls, inner.billed.cost_micros) == (1, inner_cost)
    assert (outer.billed.calls, outer.billed.cost_micros) == (2, outer_cost + inner_cost)
    runs = {row["name"]: row for row in store.rows("SELECT * FROM runs")}
    assert runs["inner"]["parent_run_id"] == outer.run_id and runs["outer"]["parent_run_id"] is None
    assert runs["inner"]["kind"] == "agent"
    assert (runs["outer"]["billed_calls"], runs["outer"]["billed_cost_micros"]) == (2, outer_cost + inner_cost)
    assert (runs["inner"]["billed_calls"], runs["inner"]["billed_cost_micros"]) == (1, inner_cost)
    calls = store.calls()
    assert [c["run_id"] for c in calls] == [outer.run_id, inner.run_id]  # the innermost run
    inner_span = store.span(runs["inner"]["span_id"])
    assert inner_span["name"] == "invoke_agent inner" and inner_span["parent_span_id"] == runs["outer"]["span_id"]
    assert store.span(calls[1]["span_id"])["parent_span_id"] == runs["inner"]["span_id"]


def test_failure_in_nested_run_billed_of_is_the_outermost(store, fake_provider, fake_url):
    fake_provider.script(Reply(text="outer", usage=U1), Reply(text="inner", usage=U2))
    client = _openai(fake_url)
    with pytest.raises(RuntimeError) as raised, workbench.run("outer") as outer:
        client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
        with workbench.run("inner"):
            client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
            raise RuntimeError("deep")
    assert workbench.billed_of(raised.value).calls == 2
    assert workbench.billed_of(raised.value) == outer.billed
    statuses = {row["name"]: row["status"] for row in store.rows("SELECT name, status FROM runs")}
    assert statuses == {"outer": "failed", "inner": "failed"}


def test_threads_do_not_cross_attribute(store, fake_provider, fake_url):
    barrier = threading.Barrier(2)
    runs: dict[str, workbench.Run] = {}
    errors: list[BaseException] = []

    def worker(name: str, model: str) -> None:
        try:
            client = _openai(fake_url)
            with workbench.run(name) as run:
                runs[name] = run
                for _ in range(4):
                    barrier.wait(timeout=10)  # both threads call at once, inside their own runs
                    client.chat.completions.create(model=model, messages=MESSAGES)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=("t-gpt", "wbt-gpt")),
               threading.Thread(target=worker, args=("t-mini", "wbt-mini"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    by_run = {}
    for call in store.calls():
        by_run.setdefault(call["run_id"], set()).add(call["model_requested"])
    assert by_run == {runs["t-gpt"].run_id: {"wbt-gpt"}, runs["t-mini"].run_id: {"wbt-mini"}}
    assert runs["t-gpt"].billed.calls == runs["t-mini"].billed.calls == 4


def test_asyncio_tasks_do_not_cross_attribute(store, fake_provider, fake_url):
    # each reply is delayed, so the two tasks' calls interleave on the event loop
    fake_provider.script(*[Reply(text="x", delay_s=0.02) for _ in range(6)])

    @workbench.run("decorated")
    async def job(model: str) -> str:
        client = openai.AsyncOpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0,
                                    http_client=workbench.async_http_client())
        for _ in range(3):
            await client.chat.completions.create(model=model, messages=MESSAGES)
        return workbench.capture.current_run().run_id

    async def main():
        return await asyncio.gather(job("wbt-gpt"), job("wbt-mini"))

    gpt_run, mini_run = asyncio.run(main())
    assert gpt_run != mini_run
    calls = store.calls()
    assert len(calls) == 6
    assert {c["run_id"] for c in calls if c["model_requested"] == "wbt-gpt"} == {gpt_run}
    assert {c["run_id"] for c in calls if c["model_requested"] == "wbt-mini"} == {mini_run}
    # the calls really overlapped in time: otherwise this test proves little
    spans = sorted((c["started_at"], c["ended_at"], c["run_id"]) for c in calls)
    assert any(a[2] != b[2] and b[0] < a[1] for a, b in zip(spans, spans[1:]))
    runs = store.rows("SELECT name, billed_calls FROM runs")
    assert runs == [{"name": "decorated", "billed_calls": 3}, {"name": "decorated", "billed_calls": 3}]


def test_event_agent_compact_becomes_span_event_and_compaction(store):
    with workbench.run("agent-loop", kind="agent") as run:
        workbench.event("agent.turn", turn=1, tools=["search"], cost_micros=10)
        workbench.event("agent.compact", turn=3, outcome="summarised", tokens_before=9000, tokens_after=1200,
                        limit=8000, summarised_turns=2, kept_turns=1, model="wbt-claude", cost_micros=4321)
    run_row = store.one("SELECT * FROM runs WHERE run_id = ?", [run.run_id])
    events = store.rows("SELECT * FROM span_events ORDER BY seq")
    assert [e["name"] for e in events] == ["agent.turn", "agent.compact"]
    for e in events:
        assert e["span_id"] == run_row["span_id"] and e["run_id"] == run.run_id
    assert json.loads(events[0]["attributes"]) == {"turn": 1, "tools": '["search"]', "cost_micros": 10}
    assert json.loads(events[1]["attributes"])["tokens_before"] == 9000
    compaction = store.one("SELECT * FROM compactions")
    assert compaction["run_id"] == run.run_id and compaction["span_id"] == run_row["span_id"]
    assert {k: compaction[k] for k in ("turn", "outcome", "tokens_before", "tokens_after", "limit_tokens",
                                       "summarised_turns", "kept_turns", "model", "cost_micros")} == {
        "turn": 3, "outcome": "summarised", "tokens_before": 9000, "tokens_after": 1200, "limit_tokens": 8000,
        "summarised_turns": 2, "kept_turns": 1, "model": "wbt-claude", "cost_micros": 4321}


def test_two_bills_of_two_currencies_add_per_currency():
    """An earlier run of a conversation and this one (`Billed + Billed`, the agent's running total):
    counts summed, money summed per currency, the first bill's main currency kept."""
    from workbench.capture.runs import Billed, CurrencyPart

    earlier = Billed(calls=2, unpriced_calls=1, cost_micros=300, replayed_calls=1, replayed_cost_micros=40)
    now = Billed(currency="EUR", calls=2, cost_micros=70, input_tokens=9,
                 other_currencies={"USD": CurrencyPart(cost_micros=5, calls=1)})
    both = earlier + now
    assert (both.currency, both.cost_micros, both.replayed_cost_micros, both.calls, both.unpriced_calls,
            both.input_tokens) == ("USD", 305, 40, 4, 1, 9)
    assert both.other_currencies == {"EUR": CurrencyPart(cost_micros=70, calls=1)}
    # a first bill with nothing priced takes the second's main currency
    assert (Billed(calls=1, unpriced_calls=1) + now).currency == "EUR"
