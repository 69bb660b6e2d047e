"""The OpenAI Agents SDK, as its docs drive it: an `Agent` on the default model provider (the
Responses API, `OpenAIResponsesModel`) over an `AsyncOpenAI` client given Workbench's async httpx
client and made the default (`set_default_openai_client`), run by `Runner.run_sync`, `Runner.run` and `Runner.run_streamed`,
tracing off (its exporter would post to api.openai.com). The store must hold exactly what the fake
provider served, each call once, with exact counters and cost; a recorded cassette replays every
call offline with the same answers."""

from __future__ import annotations

import asyncio

from fixtures.capture_store import check_live, check_replay
from fixtures.client_env import require

import workbench

require("agents")
import openai  # noqa: E402
from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled  # noqa: E402

PROMPT = "Say hello"


def _agent(url: str) -> Agent:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                                http_client=workbench.async_httpx_client())
    set_default_openai_client(client)
    set_tracing_disabled(True)
    return Agent(name="greeter", instructions="Be brief.", model="wbt-gpt")  # the default client, on Responses


def _drive(url: str) -> list[str]:
    """run_sync, run and run_streamed, a client for each event loop (an async client's connections
    belong to the loop that opened them). Returns what the app saw."""
    seen = [Runner.run_sync(_agent(url), PROMPT).final_output]

    async def go():
        agent = _agent(url)
        seen.append((await Runner.run(agent, PROMPT)).final_output)
        result = Runner.run_streamed(agent, PROMPT)
        deltas = [event.data.delta async for event in result.stream_events()
                  if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"]
        assert "".join(deltas) == result.final_output  # streamed, not buffered into one event
        seen.append(result.final_output)

    asyncio.run(go())
    return seen


def test_every_agents_sdk_call_is_recorded_once_with_exact_usage_and_cost(instrumented):
    check_live(_drive, "echo: Say hello")


def test_agents_sdk_replays_offline_from_a_recorded_cassette(instrumented, tmp_path):
    check_replay(_drive, tmp_path / "openai_agents.json")
