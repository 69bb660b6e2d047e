"""Turn rows: a repair turn neither counts toward nor resets tool-loop detection; a `respond` emitted
with other tool calls is superseded; two exhaustions, two codes; `on_turn` gets max_turns, the
running total and repair_of; one run may narrow the tools and lower the limits; a cancelled run is
stored aborted with its bill, its call in flight cut rather than waited for."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pydantic import BaseModel

from runtime_support import CLAUDE
from workbench.capture import billed_of
from workbench.demo.fake_provider import Reply
from workbench.errors import WorkbenchError
from workbench.runtime import Agent, AnthropicProvider, Gateway, Limits


class Weather(BaseModel):
    city: str
    celsius: float


def get_weather(city: str) -> str:
    """The current weather of a city."""
    return f"{city}: 21C"


def get_time(city: str) -> str:
    """The local time of a city."""
    return f"{city}: noon"


WRONG = Reply(tool_calls=[("respond", {"city": "Paris"})])  # celsius missing: a wrong shape
PARIS = Reply(tool_calls=[("get_weather", {"city": "Paris"})])
RIGHT = Reply(tool_calls=[("respond", {"city": "Paris", "celsius": 21})])


def test_a_repair_turn_neither_resets_nor_counts_toward_the_loop(anthropic_gateway, fake, store):
    fake.script(PARIS, WRONG, PARIS, WRONG, PARIS, "never reached")
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Weather?", [get_weather], Weather, max_turns=10).run()
    assert caught.value.code == "WB_AGENT_TOOL_LOOP"  # three identical tool turns, repairs between them
    assert len(fake.requests) == 5
    fake.clear_script()
    fake.script(WRONG, WRONG, WRONG, WRONG, RIGHT)  # four repairs in a row are not a loop either
    assert Agent(anthropic_gateway, "Weather?", [get_weather], Weather).run().output.celsius == 21


def test_a_respond_alongside_other_calls_is_superseded_and_the_loop_goes_on(anthropic_gateway, fake):
    fake.script(Reply(tool_calls=[("get_weather", {"city": "Paris"}), ("respond", {"city": "Paris", "celsius": 5})]),
                RIGHT)
    turns = []
    result = Agent(anthropic_gateway, "Weather?", [get_weather], Weather, on_turn=turns.append).run()
    assert result.output == Weather(city="Paris", celsius=21) and result.turns == 2  # the answer written WITH the result
    results = fake.requests[1].json["messages"][2]["content"]
    assert results[0]["content"] == "Paris: 21C" and not results[0].get("is_error")
    assert results[1]["is_error"] and results[1]["content"].startswith("superseded")
    assert turns[0].tool_names == ["get_weather"]  # respond is not a tool call


def test_two_exhaustions_two_codes(anthropic_gateway, fake, store):
    fake.script(PARIS, WRONG, WRONG)
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Weather?", [get_weather], Weather, max_turns=3).run()
    error = caught.value
    assert error.code == "WB_LLM_OUTPUT_INVALID" and "2 wrong answer(s)" in error.cause and "celsius" in error.cause
    store.assert_bill_exact(store.run(name="agent")["run_id"], billed_of(error))
    fake.clear_script()
    fake.script(WRONG, PARIS, Reply(tool_calls=[("get_weather", {"city": "Lyon"})]))
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Weather?", [get_weather], Weather, max_turns=3).run()
    assert caught.value.code == "WB_AGENT_MAX_TURNS" and "2 tool call(s)" in caught.value.cause


def test_on_turn_gets_max_turns_the_running_total_and_repair_of(anthropic_gateway, fake, store):
    fake.script(PARIS, WRONG, RIGHT)
    turns = []
    result = Agent(anthropic_gateway, "Weather?", [get_weather], Weather, max_turns=5, on_turn=turns.append).run()
    calls = store.calls(result.run_id)
    assert [(info.turn, info.max_turns) for info in turns] == [(1, 5), (2, 5), (3, 5)]
    assert [info.run.calls for info in turns] == [1, 2, 3]
    assert [info.run.cost_micros for info in turns] == [sum(c["cost_micros"] for c in calls[:n]) for n in (1, 2, 3)]
    assert [info.cost_micros for info in turns] == [c["cost_micros"] for c in calls]
    assert [info.usage.output_tokens for info in turns] == [c["output_tokens"] for c in calls]
    assert turns[0].repair_of is None and turns[1].repair_of is None
    assert "celsius" in turns[2].repair_of  # the third turn answers the correction of the second
    events = store.events(result.run_id, "agent.turn")
    assert [event["max_turns"] for event in events] == [5, 5, 5] and "celsius" in events[2]["repair_of"]


def test_one_run_may_offer_fewer_tools_and_lower_its_limits(anthropic_gateway, fake, store):
    agent = Agent(anthropic_gateway, "Go.", [get_weather, get_time], max_turns=6)
    fake.script(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), Reply(tool_calls=[("get_weather", {"city": "Rome"})]))
    with pytest.raises(WorkbenchError) as caught:
        agent.run(offer_tools=["get_time", "get_weather"], limits=Limits(max_turns=2))
    assert caught.value.code == "WB_AGENT_MAX_TURNS" and "all 2 turns" in caught.value.cause
    assert [t["name"] for t in fake.requests[0].json["tools"]] == ["get_weather", "get_time"]  # declaration order
    fake.clear_script()
    fake.script(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]), "done")
    assert agent.run(offer_tools=["get_time"]).output == "done"
    assert [t["name"] for t in fake.requests[2].json["tools"]] == ["get_time"]
    refused = fake.requests[3].json["messages"][2]["content"][0]
    assert refused["is_error"] and "no tool named 'get_weather'" in refused["content"]  # not offered: not run
    sent = len(fake.requests)
    with pytest.raises(WorkbenchError) as caught:
        agent.run(offer_tools=["get_weather", "delete_everything"])
    assert caught.value.code == "WB_AGENT_TOOL_UNDECLARED" and "delete_everything" in caught.value.cause
    with pytest.raises(WorkbenchError) as caught:
        agent.run(limits=Limits(max_turns=9))
    assert caught.value.code == "WB_RUNTIME_OPTION_INVALID" and "max_turns=6" in caught.value.cause
    assert len(fake.requests) == sent  # refused before anything was sent


def test_a_run_may_set_a_deadline_the_declaration_leaves_unset(anthropic_gateway, fake, store):
    release = threading.Event()

    async def slow(city: str) -> str:
        """Slow."""
        await asyncio.to_thread(release.wait, 30)
        return "late"

    fake.script(Reply(tool_calls=[("slow", {"city": "x"})]))
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, "Go.", [slow]).run(limits=Limits(deadline_s=0.2))
    release.set()
    assert caught.value.code == "WB_AGENT_DEADLINE"


def test_a_cancelled_run_cuts_its_call_in_flight_and_is_stored_aborted_with_its_bill(store, fake_provider, fake_url):
    arrived, release = threading.Event(), threading.Event()

    def respond(request):
        if len(fake_provider.requests) == 1:
            return PARIS
        arrived.set()
        release.wait(30)  # the provider takes its time with turn 2
        return Reply(text="too late")

    fake_provider.responder = respond
    gateway = Gateway([AnthropicProvider(fake_url, "k", [CLAUDE])], CLAUDE)
    agent = Agent(gateway, "Weather?", [get_weather])

    async def main() -> bool:
        task = asyncio.create_task(agent.arun())
        await asyncio.to_thread(arrived.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as caught:
            await asyncio.wait_for(task, 30)
        answered_first = release.is_set()
        release.set()
        await gateway.release_loop()
        return answered_first, caught.value

    answered_first, error = asyncio.run(main())
    assert answered_first is False  # the run ended while the provider still held the call: cut, not drained
    row = store.run(name="agent")
    assert (row["status"], row["error_code"], row["billed_calls"], row["billed_unsettled"]) == (
        "failed", "WB_ABORTED", 1, 1)
    assert billed_of(error).calls == 1 and billed_of(error).unsettled == 1
    [cut] = [call for call in store.calls(row["run_id"]) if not call["settled"]]
    assert cut["http_status"] is None and cut["error_type"] == "transport_error"


def test_a_cancelled_tool_batch_stops_the_run_before_another_turn(anthropic_gateway, fake, store):
    started, cancelled = threading.Event(), []

    async def wait_forever(city: str) -> str:
        """Never returns on its own."""
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(city)
            raise
        return "never"

    fake.script(Reply(tool_calls=[("wait_forever", {"city": "x"})]), "never reached")

    async def main():
        task = asyncio.create_task(Agent(anthropic_gateway, "Go.", [wait_forever]).arun())
        await asyncio.to_thread(started.wait, 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert cancelled == ["x"] and len(fake.requests) == 1
    row = store.run(name="agent")
    assert (row["error_code"], row["billed_calls"]) == ("WB_ABORTED", 1)


def test_the_redactor_sees_every_tool_result_before_the_provider(store, fake):
    from workbench.demo.fake_provider import AsyncFakeTransport

    def patient(record_id: str) -> str:
        """A patient record."""
        return f"record {record_id}: Jane Roe, 1970-01-01"

    gateway = Gateway([AnthropicProvider("http://a.test", "k", [CLAUDE], transport=AsyncFakeTransport(fake))],
                      CLAUDE, redact=lambda text: text.replace("Jane Roe", "[patient]"))
    fake.script(Reply(tool_calls=[("patient", {"record_id": "r1"})]), "done")
    result = Agent(gateway, "Summarise record r1 for Jane Roe.", [patient]).run()
    assert "Jane Roe" not in fake.requests[0].body.decode() and "Jane Roe" not in fake.requests[1].body.decode()
    assert fake.requests[1].json["messages"][2]["content"][0]["content"] == "record r1: [patient], 1970-01-01"
    state = store.rows("SELECT state FROM checkpoints WHERE run_id = ?", result.run_id)[0]["state"]
    assert "Jane Roe" not in state  # the checkpoint holds what was sent, already redacted
