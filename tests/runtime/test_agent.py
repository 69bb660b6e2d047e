"""Agent: tools run concurrently and pair by position, tool errors are results, prompt caching
shows in the store, budgets refuse before the call, and every agent error code with its bill."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import BaseModel

from runtime_support import CLAUDE
from workbench.capture import billed_of
from workbench.demo.fake_provider import Reply
from workbench.errors import WorkbenchError
from workbench.runtime import Agent, AnthropicProvider, Budget, Gateway, llm_async, tool


class Weather(BaseModel):
    city: str
    celsius: float


class Query(BaseModel):
    city: str


def get_weather(city: str) -> str:
    """The current weather of a city."""
    return f"{city}: 21C"


class Prompt:
    id, version, hash, model = "weather-agent", "1", "wb1:weather", None
    system = "You are a careful weather assistant. Use the tools; answer briefly. " * 8

    def render(self, vars):
        return f"What is the weather in {vars['city']}?"


def test_multi_turn_run_writes_the_cache_then_reads_it(store, fake_provider, fake_url):
    """Over real HTTP: turn 1 writes the marked prefix, every later turn reads it; a second run
    with another per-run system part still reads the stable system block."""
    gateway = Gateway([AnthropicProvider(fake_url, "sk-ant-test", [CLAUDE])], CLAUDE)
    agent = Agent(gateway, Prompt(), [get_weather])
    fake_provider.script(
        Reply(tool_calls=[("get_weather", {"city": "Paris"})]),
        Reply(tool_calls=[("get_weather", {"city": "Lyon"})]),
        "Paris 21C, Lyon 21C.",
    )
    result = agent.run({"city": "Paris"}, system_dynamic="Today is Monday.")
    assert (result.output, result.turns) == ("Paris 21C, Lyon 21C.", 3)
    calls = store.calls(result.run_id)
    assert [call["cache_read_tokens"] > 0 for call in calls] == [False, True, True]
    assert [call["cache_write_tokens"] > 0 for call in calls] == [True, True, True]  # each new tail
    assert calls[1]["cache_read_tokens"] >= calls[0]["cache_write_tokens"]  # turn 1's whole prefix read back
    row = store.assert_bill_exact(result.run_id, result.billed)
    assert row["billed_cache_read_tokens"] > 0 and row["kind"] == "agent"
    [span] = store.rows("SELECT name FROM spans WHERE span_id = ?", row["span_id"])
    assert span["name"] == "invoke_agent weather-agent"
    turns = store.events(result.run_id, "agent.turn")
    assert [event["turn"] for event in turns] == [1, 2, 3]
    assert turns[0]["tool_names"] == '["get_weather"]' and turns[0]["stop_reason"] == "tool_use"
    assert turns[1]["cache_read_tokens"] == calls[1]["cache_read_tokens"]
    assert turns[1]["cost_micros"] == calls[1]["cost_micros"]

    for body in (request.json for request in fake_provider.requests):
        marked = [block for block in _blocks(body) if "cache_control" in block]
        assert 1 <= len(marked) <= 4 and all(block.get("text", "x") for block in marked)
        assert "cache_control" in body["system"][0] and "cache_control" not in body["system"][1]
        assert body["system"][1]["text"] == "Today is Monday."

    fake_provider.script("Cloudy.")
    again = agent.run({"city": "Rome"}, system_dynamic="Today is Tuesday.")
    [call] = store.calls(again.run_id)
    assert call["cache_read_tokens"] > 0  # the stable system block, the same bytes as last run


def _blocks(body: dict) -> list[dict]:
    blocks = [*body.get("tools", []), *body.get("system", [])]
    for message in body["messages"]:
        blocks += message["content"] if isinstance(message["content"], list) else []
    return blocks


def test_openai_gets_no_marks_and_a_split_system(openai_gateway, fake):
    fake.script(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), "Cold.")
    result = Agent(openai_gateway, Prompt(), [get_weather]).run({"city": "Oslo"}, system_dynamic="Now: 9am")
    assert result.output == "Cold."
    body = fake.requests[1].json
    assert "cache_control" not in fake.requests[1].body.decode()
    assert [m["role"] for m in body["messages"]] == ["system", "system", "user", "assistant", "tool"]
    assert body["messages"][1]["content"] == "Now: 9am"
    assert body["messages"][4] == {"role": "tool", "tool_call_id": body["messages"][3]["tool_calls"][0]["id"],
                                   "content": "Oslo: 21C"}


def test_concurrent_tools_pair_by_position_when_the_slow_one_finishes_last(anthropic_gateway, fake):
    finished: list[str] = []

    async def slow(name: str) -> str:
        """Slow lookup."""
        finished.append(f"start {name}")
        await asyncio.sleep(0.3)
        finished.append("slow")
        return f"slow:{name}"

    async def fast(name: str) -> str:
        """Fast lookup."""
        finished.append("fast")
        return f"fast:{name}"

    fake.script(Reply(tool_calls=[("slow", {"name": "a"}), ("fast", {"name": "b"}), ("slow", {"name": "c"})]),
                "done")
    Agent(anthropic_gateway, "Look things up.", [slow, fast]).run()
    # concurrent: both slow lookups started before either ended, and the fast one ended first
    assert finished == ["start a", "fast", "start c", "slow", "slow"]
    uses = fake.requests[1].json["messages"][1]["content"]  # the assistant turn, as sent back
    results = fake.requests[1].json["messages"][2]["content"]
    assert [(r["tool_use_id"], r["content"]) for r in results] == [
        (uses[0]["id"], "slow:a"), (uses[1]["id"], "fast:b"), (uses[2]["id"], "slow:c")]


def test_tool_errors_and_long_results_are_results_the_model_reads(anthropic_gateway, fake):
    def broken(x: int) -> str:
        """Always fails."""
        raise RuntimeError("database is down")

    def big() -> str:
        """A long document."""
        return "x" * 500

    fake.script(Reply(tool_calls=[("broken", {"x": 1}), ("broken", {"x": "not a number"}), ("big", {}),
                                  ("nope", {})]), "ok")
    result = Agent(anthropic_gateway, "Go.", [broken, big], max_tool_result_chars=100).run()
    assert result.output == "ok"
    results = fake.requests[1].json["messages"][2]["content"]
    assert results[0]["is_error"] and results[0]["content"] == "RuntimeError: database is down"
    assert results[1]["is_error"] and "invalid arguments for broken" in results[1]["content"]
    assert not results[2].get("is_error") and results[2]["content"].startswith("x" * 100 + "\n[truncated")
    assert "500 characters" in results[2]["content"]
    assert results[3]["is_error"] and "no tool named 'nope'" in results[3]["content"]


def test_structured_output_through_respond_with_a_pydantic_tool(anthropic_gateway, fake):
    @tool(name="weather", description="Weather by city.")
    def lookup(query: Query) -> dict:
        return {"city": query.city, "celsius": 12.5}

    fake.script(Reply(tool_calls=[("weather", {"city": "Bergen"})]),
                Reply(tool_calls=[("respond", {"city": "Bergen"})]),  # wrong shape: an error result
                "Bergen is 12.5C",  # text while an output is required: a nudge
                Reply(tool_calls=[("respond", {"city": "Bergen", "celsius": 12.5})]))
    turns = []
    result = Agent(anthropic_gateway, "Weather?", [lookup], Weather, on_turn=turns.append).run()
    assert result.output == Weather(city="Bergen", celsius=12.5) and result.turns == 4
    tools = fake.requests[0].json["tools"]
    assert [t["name"] for t in tools] == ["weather", "respond"]
    assert tools[0]["input_schema"]["properties"] == {"city": {"title": "City", "type": "string"}}
    assert fake.requests[1].json["messages"][2]["content"][0]["content"] == '{"city": "Bergen", "celsius": 12.5}'
    assert fake.requests[3].json["messages"][-1]["content"] == [{"type": "text", "text": "Call the respond tool with your final answer.", "cache_control": {"type": "ephemeral"}}]
    assert [info.tool_errors for info in turns] == [0, 1, 0, 0]


def test_max_turns_with_its_bill(anthropic_gateway, fake, store):
    fake.script(*[Reply(tool_calls=[("get_weather", {"city": f"c{n}"})]) for n in range(3)])
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Go.", [get_weather], max_turns=3).run()
    assert caught.value.code == "WB_AGENT_MAX_TURNS" and "3 turns" in caught.value.cause
    row = store.assert_bill_exact(store.run(name="agent")["run_id"], billed_of(caught.value))
    assert (row["status"], row["error_code"], row["billed_calls"]) == ("failed", "WB_AGENT_MAX_TURNS", 3)


@pytest.mark.parametrize("cycle", [
    [("get_weather", {"city": "Paris"})],
    [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Lyon"})],
])
def test_a_tool_loop_is_stopped(anthropic_gateway, fake, store, cycle):
    fake.script(*[Reply(tool_calls=[call]) for call in cycle * 3], "never reached")
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Go.", [get_weather], max_turns=8).run()
    assert caught.value.code == "WB_AGENT_TOOL_LOOP"
    assert f"cycle of {len(cycle)} turn" in caught.value.cause
    assert len(fake.requests) == 3 * len(cycle)
    row = store.assert_bill_exact(store.run(name="agent")["run_id"], billed_of(caught.value))
    assert row["billed_calls"] == 3 * len(cycle)


def test_the_same_call_with_changing_results_is_not_a_loop(anthropic_gateway, fake):
    ticks = iter(range(100))

    def clock() -> str:
        """The time."""
        return f"tick {next(ticks)}"

    fake.script(*[Reply(tool_calls=[("clock", {})]) for _ in range(4)], "done")
    assert Agent(anthropic_gateway, "Go.", [clock]).run().output == "done"


def test_deadline_with_its_bill(anthropic_gateway, fake, store):
    cancelled = []

    async def slow_search(query: str) -> str:
        """Search, slowly."""
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(query)
            raise
        return "late"

    fake.script(Reply(tool_calls=[("slow_search", {"query": "q"})]), "never reached")
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Go.", [slow_search], deadline_s=0.3).run()
    assert cancelled == ["q"]  # the deadline stopped the tool, not its own end
    assert caught.value.code == "WB_AGENT_DEADLINE" and "slow_search" in caught.value.cause
    row = store.assert_bill_exact(store.run(name="agent")["run_id"], billed_of(caught.value))
    assert (row["error_code"], row["billed_calls"]) == ("WB_AGENT_DEADLINE", 1)


def test_a_deadline_during_a_model_call_counts_it_unsettled(anthropic_gateway, fake, store):
    fake.script(Reply(text="too late", delay_s=1.0))
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Go.", deadline_s=0.2).run()
    assert caught.value.code == "WB_AGENT_DEADLINE"
    row = store.assert_bill_exact(store.run(name="agent")["run_id"], billed_of(caught.value))
    assert (row["billed_calls"], row["billed_unsettled"]) == (0, 1)


def test_a_run_budget_refuses_the_turn_that_could_exceed_it(anthropic_gateway, fake, store):
    fake.script(*[Reply(tool_calls=[("get_weather", {"city": f"c{n}"})]) for n in range(5)])
    # a turn's worst case is its estimated input (under 100 tokens here) + max_tokens=1000; turn 1
    # fits in 1,100, turn 2 cannot once turn 1's actual usage is spent
    agent = Agent(anthropic_gateway, "Go.", [get_weather], max_tokens=1000, budget=Budget(tokens_per_run=1100))
    with pytest.raises(WorkbenchError) as caught:
        agent.run()
    error = caught.value
    assert error.code == "WB_BUDGET_EXCEEDED" and "tokens per run" in error.cause and "left of 1,100" in error.cause
    assert len(fake.requests) == 1  # the second turn was refused before it was sent
    row = store.assert_bill_exact(store.run(name="agent")["run_id"], billed_of(error))
    assert row["billed_calls"] == 1 and row["error_code"] == "WB_BUDGET_EXCEEDED"


def test_a_cost_budget_covers_the_llm_calls_of_its_tools(anthropic_gateway, fake, store):
    async def ask_expert(question: str) -> str:
        """Ask another model."""
        return await llm_async(anthropic_gateway, question, max_tokens=500)

    fake.script(Reply(tool_calls=[("ask_expert", {"question": "a"}), ("ask_expert", {"question": "b"})]),
                Reply(text="expert answer", delay_s=0.1), "done")
    # a nested worst case is ~500 output tokens x 1,500 micros = 750,000 micros: the budget has room
    # for the agent's turns and ONE nested call in flight, not two at once
    agent = Agent(anthropic_gateway, "Go.", [ask_expert], max_tokens=200, budget=Budget(cost_per_run_micros=1_200_000))
    result = agent.run()
    assert result.output == "done"
    nested = fake.requests[1].json["messages"][0]["content"][0]["text"]
    results = fake.requests[2].json["messages"][2]["content"]
    errors = [r for r in results if r.get("is_error")]
    assert len(errors) == 1 and "WB_BUDGET_EXCEEDED" in errors[0]["content"] and nested in ("a", "b")
    assert len(fake.requests) == 3


def test_a_truncated_turn_is_recorded_then_raised_with_its_bill(anthropic_gateway, fake, store):
    fake.script(Reply(tool_calls=[("get_weather", {"city": "Paris"})]), "word " * 100)
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Go.", [get_weather], max_tokens=10).run()
    assert caught.value.code == "WB_LLM_TRUNCATED" and "turn 2" in caught.value.cause
    run_id = store.run(name="agent")["run_id"]
    assert [event["stop_reason"] for event in store.events(run_id, "agent.turn")] == ["tool_use", "max_tokens"]
    assert store.assert_bill_exact(run_id, billed_of(caught.value))["billed_calls"] == 2
