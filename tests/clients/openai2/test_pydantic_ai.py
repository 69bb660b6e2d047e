"""pydantic-ai, as its docs drive it: an `Agent` on `OpenAIChatModel` with an `OpenAIProvider`
given a base URL and Workbench's async httpx client (`run_sync`, `run`, `run_stream`). The store
must hold exactly what the fake provider served, each call once, with exact counters and cost; a
recorded cassette replays every call offline with the same answers."""

from __future__ import annotations

import asyncio

from fixtures.client_env import require
from fixtures.capture_store import check_live, check_replay

import workbench

require("pydantic_ai")
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

PROMPT = "Say hello"


def _agent(url: str) -> Agent:
    provider = OpenAIProvider(base_url=url + "/v1", api_key="sk-test", http_client=workbench.async_httpx_client())
    return Agent(OpenAIChatModel("wbt-gpt", provider=provider))


def _drive(url: str) -> list[str]:
    """run_sync, run and run_stream, a client for each event loop (an async client's connections
    belong to the loop that opened them). Returns what the app saw."""
    seen = [_agent(url).run_sync(PROMPT).output]

    async def go():
        agent = _agent(url)
        seen.append((await agent.run(PROMPT)).output)
        async with agent.run_stream(PROMPT) as result:
            seen.append("".join([delta async for delta in result.stream_text(delta=True)]))

    asyncio.run(go())
    return seen


def test_every_pydantic_ai_call_is_recorded_once_with_exact_usage_and_cost(instrumented):
    check_live(_drive, "echo: Say hello")


def test_pydantic_ai_replays_offline_from_a_recorded_cassette(instrumented, tmp_path):
    check_replay(_drive, tmp_path / "pydantic_ai.json")
