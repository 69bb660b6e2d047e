"""The gateway's response cache: exact match on the request bytes, scoped per actor (the narrowest
key by default), the prompt hash in the key, refusals never cached, and every hit recorded as a row
the reports and the dashboard read — never billed, never added to what was paid."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from runtime_support import CLAUDE
from workbench.capture import run
from workbench.demo.fake_provider import AsyncFakeTransport, Reply
from workbench.errors import WorkbenchError
from workbench.runtime import Agent, AnthropicProvider, Gateway, ResponseCache, TextPrompt, acting_for, llm
from workbench.store.queries import Filters, cache_page, response_cache_hits
from workbench.store.db import open_store


class Label(BaseModel):
    label: str


def cached_gateway(fake, **options) -> Gateway:
    provider = AnthropicProvider("http://a.test", "k", [CLAUDE], transport=AsyncFakeTransport(fake))
    return Gateway([provider], CLAUDE, cache=ResponseCache(**options))


class Prompt:
    id, version, hash, model = "classify", "1", "wb1:one", None
    system = "Classify."

    def render(self, vars):
        return f"Ticket: {vars['ticket']}"


def test_an_exact_repeat_by_the_same_actor_is_served_from_the_cache(store, fake):
    gateway = cached_gateway(fake)
    fake.script(Reply(tool_calls=[("respond", {"label": "billing"})]), Reply(tool_calls=[("respond", {"label": "x"})]))
    first = llm(gateway, Prompt(), {"ticket": "refund"}, output=Label, actor="u-1")
    again = llm(gateway, Prompt(), {"ticket": "refund"}, output=Label, actor="u-1")
    assert first == again == Label(label="billing") and len(fake.requests) == 1
    runs = store.rows("SELECT run_id, billed_calls, billed_cost_micros FROM runs WHERE kind = 'llm' ORDER BY started_at")
    paid = store.calls(runs[0]["run_id"])[0]
    assert runs[1]["billed_calls"] is None and store.calls(runs[1]["run_id"]) == []  # nothing sent, nothing billed
    [hit] = store.rows("SELECT * FROM response_cache_hits")
    assert (hit["run_id"], hit["call_id"], hit["saved_cost_micros"], hit["prompt_id"]) == (
        runs[1]["run_id"], paid["call_id"], paid["cost_micros"], "classify")
    with open_store(store.db, read_only=True) as con:
        summary = response_cache_hits(con, Filters())
        page = cache_page(con, Filters())["response_cache"]  # what the dashboard's Prompt cache page shows
    assert summary.select("model", "hits", "saved_cost_micros").rows() == [(CLAUDE, 1, paid["cost_micros"])]
    assert page.equals(summary)
    assert gateway.cache.hits == 1


def test_the_scope_is_the_actor_and_by_default_the_outermost_run(store, fake):
    gateway = cached_gateway(fake)
    fake.script("for u-1", "for u-2", "run one", "run two")
    assert llm(gateway, "Hello", actor="u-1") == "for u-1"
    assert llm(gateway, "Hello", actor="u-2") == "for u-2"  # another actor never reads u-1's answer
    with run("request-1"):
        assert llm(gateway, "Hello") == "run one"
        assert llm(gateway, "Hello") == "run one"  # the same run: a hit
    with run("request-2"):
        assert llm(gateway, "Hello") == "run two"  # no actor: scoped to the run, never shared
    with acting_for("u-1"):
        assert llm(gateway, "Hello") == "for u-1"
    assert len(fake.requests) == 4
    shared = cached_gateway(fake, shared=True)
    fake.script("one answer for everyone")
    assert [llm(shared, "Hi", actor=actor) for actor in ("a", "b")] == ["one answer for everyone"] * 2


def test_the_prompt_hash_is_in_the_key(store, fake):
    gateway = cached_gateway(fake)
    bumped = type("Bumped", (Prompt,), {"hash": "wb1:two"})
    fake.script("v1 answer", "v2 answer")
    assert llm(gateway, Prompt(), {"ticket": "t"}, actor="u") == "v1 answer"
    assert llm(gateway, bumped(), {"ticket": "t"}, actor="u") == "v2 answer"  # same bytes, another version
    assert len(fake.requests) == 2


def test_refusals_and_truncations_are_never_cached(store, fake):
    gateway = cached_gateway(fake)
    fake.script(Reply(text="No.", stop_reason="refusal"), "fixed", "word " * 50, "word " * 50)
    with pytest.raises(WorkbenchError, match="WB_LLM_REFUSED"):
        llm(gateway, TextPrompt("Classify {{t}}"), {"t": "x"}, actor="u")
    assert llm(gateway, TextPrompt("Classify {{t}}"), {"t": "x"}, actor="u") == "fixed"
    for _ in range(2):
        with pytest.raises(WorkbenchError, match="WB_LLM_TRUNCATED"):
            llm(gateway, "Talk", max_tokens=5, actor="u")
    assert len(fake.requests) == 4 and store.rows("SELECT * FROM response_cache_hits") == []


def test_an_agent_turn_can_be_served_from_the_cache(store, fake):
    gateway = cached_gateway(fake)
    fake.script("the answer")
    agent = Agent(gateway, "Same question.")
    assert agent.run(actor="u").output == agent.run(actor="u").output == "the answer"
    assert len(fake.requests) == 1
    second = store.rows("SELECT run_id FROM runs WHERE kind = 'agent' ORDER BY started_at")[1]["run_id"]
    [event] = store.events(second, "agent.turn")
    assert event["cached"] is True and event["cost_micros"] == 0
