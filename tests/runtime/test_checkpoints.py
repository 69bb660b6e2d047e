"""Checkpoints: an agent writes its state at every turn boundary into the store, `on_checkpoint`
sees it, and `Agent.resume(run_id)` goes on from the last one — no checkpointed turn is bought again
and no tool whose result it holds runs again, even after the process was killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime_support import CLAUDE
from workbench.capture import billed_of
from workbench.demo.fake_provider import FakeRequest, Reply
from workbench.errors import WorkbenchError
from workbench.runtime import Agent, AnthropicProvider, Budget, Gateway, checkpoint

ROOT = Path(__file__).resolve().parents[2]


def pages_then_done(last_page: int):
    """Turn n fetches page n (counted from the tool results already in the request), then answers."""

    def respond(request: FakeRequest) -> Reply:
        done = sum(1 for message in request.json["messages"] if message["role"] == "assistant")
        if done >= last_page:
            return Reply(text="done")
        return Reply(tool_calls=[("fetch", {"page": done + 1})])

    return respond


class Crash(BaseException):
    """Stands in for the process dying in the middle of a tool (not an error the model reads)."""


def fetcher(log: list[int], crash_at: int | None = None):
    def fetch(page: int) -> str:
        """Fetch one page."""
        log.append(page)
        if page == crash_at:
            raise Crash()
        return f"page {page}: " + "text " * 20

    return fetch


def test_every_turn_boundary_is_a_checkpoint_the_hook_sees(anthropic_gateway, fake, store):
    fake.responder = pages_then_done(3)
    seen = []
    result = Agent(anthropic_gateway, "Read.", [fetcher([])], name="reader", on_checkpoint=seen.append,
                   budget=Budget(tokens_per_run=100_000)).run()
    rows = store.rows("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY turn", result.run_id)
    assert [row["turn"] for row in rows] == [1, 2, 3] == [info.turn for info in seen]  # never after the answer
    assert [row["checkpoint_id"] for row in rows] == [info.checkpoint_id for info in seen]
    assert {row["agent"] for row in rows} == {"reader"} and {row["model"] for row in rows} == {CLAUDE}
    # the first holds the full state, the others the turn each added
    assert [row["full_state"] for row in rows] == [True, False, False]
    assert [len(json.loads(row["state"])["turns"]) for row in rows] == [1, 1, 1]
    last = seen[-1].state.to_json()
    assert checkpoint.load(result.run_id).to_json() == last  # the parts add up to the last state
    assert [pair[1]["results"][0][2] for pair in last["turns"]] == [f"page {n}: " + "text " * 20 for n in (1, 2, 3)]
    calls = store.calls(result.run_id)
    assert last["billed"]["calls"] == 3 and last["billed"]["cost_micros"] == sum(c["cost_micros"] for c in calls[:3])
    assert last["spent"][0] == sum(c["input_tokens"] + c["cache_read_tokens"] + c["cache_write_tokens"]
                                   + c["output_tokens"] for c in calls[:3])  # the budget ledger, as charged
    assert (last["compactions"], last["compaction_wait"]) == (0, False)
    assert [info.run.calls for info in seen] == [1, 2, 3]
    assert [event["turn"] for event in store.events(result.run_id, "agent.checkpoint")] == [1, 2, 3]


def test_a_resumed_runs_spend_keeps_its_currency(anthropic_gateway, fake, store):
    """A checkpoint keeps what the budget ledger spent per currency, and a resumed run's cost budget
    counts it in that currency: with the model priced in dollars since, the euros already spent are
    refused (`WB_BUDGET_CURRENCY`, nothing sent), never counted as dollars (main restored one bare
    figure, named by the next call's currency). Priced in euros again, the spend goes on adding up."""
    import workbench

    def priced_in(currency: str) -> None:
        workbench.register_model(id=CLAUDE, provider="anthropic", context_window=200_000, max_output=8192,
                                 input=300, output=1500, currency=currency, source="test", as_of="2026-01-01")

    def reader(log: list[int], crash_at: int | None = None) -> Agent:
        return Agent(anthropic_gateway, "Read.", [fetcher(log, crash_at)], name="reader", max_turns=5,
                     budget=Budget(cost_per_run_micros=10**9))

    priced_in("EUR")
    fake.responder = pages_then_done(4)
    with pytest.raises(Crash):
        reader([], crash_at=3).run()
    crashed = store.run(name="reader")
    calls = store.calls(crashed["run_id"])
    assert {call["currency"] for call in calls} == {"EUR"}
    assert checkpoint.load(crashed["run_id"]).spent[1] == {"EUR": sum(call["cost_micros"] for call in calls[:2])}

    priced_in("USD")
    with pytest.raises(WorkbenchError) as caught:
        reader([]).resume(crashed["run_id"])
    assert caught.value.code == "WB_BUDGET_CURRENCY" and "EUR" in caught.value.cause and "counts USD" not in caught.value.cause
    assert len(fake.requests) == 3

    priced_in("EUR")
    result = reader([]).resume(crashed["run_id"])
    # the last checkpoint (turn 4): turns 1-2 of the crashed run, turns 3-4 bought by this one
    spent = calls[:2] + store.calls(result.run_id)[:2]
    assert checkpoint.load(result.run_id).spent[1] == {"EUR": sum(call["cost_micros"] for call in spent)}


def test_a_state_written_before_spends_named_a_currency_is_read_in_its_bills(anthropic_gateway, fake, store):
    from workbench.runtime.transcript import RunState

    fake.responder = pages_then_done(1)
    seen = []
    Agent(anthropic_gateway, "Read.", [fetcher([])], on_checkpoint=seen.append).run()
    data = seen[-1].state.to_json()
    assert data["spent"][1] == {"USD": data["billed"]["cost_micros"]}
    old = {**data, "spent": [data["spent"][0], 500], "billed": {**data["billed"], "currency": "EUR"}}
    assert RunState.from_json(old).spent == (data["spent"][0], {"EUR": 500})  # a cost limit counted it in EUR
    assert RunState.from_json({**old, "spent": [0, 0]}).spent == (0, {})


def test_an_on_checkpoint_that_raises_fails_the_run(anthropic_gateway, fake, store):
    fake.responder = pages_then_done(3)

    def broken(info):
        raise RuntimeError("could not save progress")

    with pytest.raises(RuntimeError, match="could not save progress") as caught:
        Agent(anthropic_gateway, "Read.", [fetcher([])], on_checkpoint=broken).run()
    assert billed_of(caught.value).calls == 1 and len(fake.requests) == 1


def test_resume_goes_on_from_the_last_checkpoint_without_paying_twice(anthropic_gateway, fake, store):
    fake.responder = pages_then_done(4)
    log: list[int] = []
    agent = Agent(anthropic_gateway, "Read.", [fetcher(log, crash_at=3)], name="reader", max_turns=5)
    with pytest.raises(Crash):
        agent.run()
    crashed = store.run(name="reader")
    assert crashed["status"] == "failed" and len(fake.requests) == 3 and log == [1, 2, 3]

    resumed_log: list[int] = []
    again = Agent(anthropic_gateway, "Read.", [fetcher(resumed_log)], name="reader", max_turns=5)
    result = again.resume(crashed["run_id"])
    assert result.output == "done" and result.turns == 5  # turns count the whole conversation
    assert resumed_log == [3, 4]  # pages 1 and 2 are in the checkpoint: their tools never run again
    assert len(fake.requests) == 6  # turns 1-2 bought once; turn 3, interrupted mid-batch, bought again
    assert fake.requests[3].body == fake.requests[2].body  # the same request, byte for byte
    row = store.run(result.run_id)
    assert json.loads(row["tags"])["resumed_from"] == crashed["run_id"]
    assert row["billed_calls"] == 3 and result.billed.calls == 3  # this run's bill is what it paid
    store.assert_bill_exact(result.run_id, result.billed)
    turns = [json.loads(r["state"])["turn"] for r in store.rows(
        "SELECT state FROM checkpoints WHERE run_id = ? ORDER BY turn", result.run_id)]
    assert turns == [2, 3, 4]  # at once (resumable again), then each boundary
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Read.", [fetcher([])], name="reader", max_turns=4).resume(result.run_id)
    assert caught.value.code == "WB_AGENT_MAX_TURNS" and len(fake.requests) == 6  # max_turns is cumulative


def test_resume_refuses_another_agent_and_a_run_with_no_checkpoint(anthropic_gateway, fake, store):
    fake.responder = pages_then_done(2)
    result = Agent(anthropic_gateway, "Read.", [fetcher([])], name="reader").run()
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Read.", [fetcher([])], name="writer").resume(result.run_id)
    assert caught.value.code == "WB_AGENT_TRANSCRIPT_INVALID" and "'reader'" in caught.value.cause

    def other(page: int) -> str:
        """Another tool."""
        return ""

    with pytest.raises(WorkbenchError, match="WB_AGENT_TRANSCRIPT_INVALID"):
        Agent(anthropic_gateway, "Read.", [other], name="reader").resume(result.run_id)
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Read.", [fetcher([])], name="reader").resume("no-such-run")
    assert caught.value.code == "WB_AGENT_CHECKPOINT_MISSING"


CHILD = textwrap.dedent('''
    import os, signal, sys
    import workbench
    from workbench.runtime import Agent, AnthropicProvider, Gateway

    url, db, log = sys.argv[1:4]
    workbench.configure(db=db)
    workbench.register_model(id="claude-test", provider="anthropic", context_window=200_000, max_output=8192,
                             input=300, output=1500, source="test", as_of="2026-01-01")

    def fetch(page: int) -> str:
        """Fetch one page."""
        with open(log, "a") as handle:
            handle.write(f"{page}\\n")
        if page == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies in the middle of turn 3's tools
        return f"page {page}"

    def saved(info):
        workbench.flush()  # make sure the boundary reached the store before the kill
        print(info.run_id, flush=True)

    gateway = Gateway([AnthropicProvider(url, "k", ["claude-test"])], "claude-test")
    Agent(gateway, "Read.", [fetch], name="reader", on_checkpoint=saved).run()
''')


def test_a_killed_process_is_resumed_from_the_store(store, fake_provider, fake_url, tmp_path):
    fake_provider.responder = pages_then_done(4)
    log = tmp_path / "tool-calls.txt"
    child = subprocess.run([sys.executable, "-c", CHILD, fake_url, str(store.db), str(log)], capture_output=True,
                           text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.returncode == -signal.SIGKILL, child.stderr
    run_id = child.stdout.split()[-1]
    assert log.read_text().split() == ["1", "2", "3"] and len(fake_provider.requests) == 3

    def fetch(page: int) -> str:
        """Fetch one page."""
        with open(log, "a") as handle:
            handle.write(f"{page}\n")
        return f"page {page}"

    gateway = Gateway([AnthropicProvider(fake_url, "k", [CLAUDE])], CLAUDE)
    result = Agent(gateway, "Read.", [fetch], name="reader").resume(run_id)
    assert result.output == "done"
    assert log.read_text().split() == ["1", "2", "3", "3", "4"]  # only the killed turn's tool ran again
    assert len(fake_provider.requests) == 6
    assert fake_provider.requests[3].body == fake_provider.requests[2].body
    assert result.billed.calls == 3  # turn 3 again, then 4 and the answer: turns 1 and 2 were not bought again
    assert json.loads(store.run(result.run_id)["tags"])["resumed_from"] == run_id


def test_a_compacted_run_checkpoints_in_parts_that_add_up(store):
    from test_compaction import MAX_TOKENS, gateway_for, pages, scripted

    seen = []
    agent = Agent(gateway_for(scripted(final_after=14)), "Read every page.", [pages(400)], max_turns=20,
                  max_tokens=MAX_TOKENS, on_checkpoint=seen.append)
    result = agent.run()
    assert result.compactions
    rows = store.rows("SELECT full_state, turn, state FROM checkpoints WHERE run_id = ? ORDER BY turn", result.run_id)
    full = [row["turn"] for row in rows if row["full_state"]]
    assert full[0] == 1 and len(full) == 1 + len([c for c in result.compactions if c.outcome == "ok"])
    assert checkpoint.load(result.run_id).to_json() == seen[-1].state.to_json()
    # linear: each turn is stored once, again only as one of the (4) kept turns of a full state
    stored = sum(len(json.loads(row["state"])["turns"]) for row in rows)
    assert stored <= result.turns + 4 * len(full)
