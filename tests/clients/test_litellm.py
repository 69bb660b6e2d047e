"""LiteLLM, as its docs drive it (`litellm.completion` / `acompletion`, streaming or not, the OpenAI
and Anthropic routes), recorded by `workbench.instrument()` alone: its sync client (httpx) and its
async one (httpx over LiteLLM's aiohttp transport) alike. The store must hold exactly what the fake
provider served, each call once, with exact counters and cost; a recorded cassette replays every
call offline with the same answers."""

from __future__ import annotations

import asyncio

import litellm
import pytest
from fixtures.capture_store import assert_matches_served
from workbench.demo.fake_server import serve

import workbench
from workbench.demo.fake_provider import FakeProvider

litellm.suppress_debug_info = True
MESSAGES = [{"role": "user", "content": "Say hello"}]


def _routes(url: str) -> list[dict]:
    return [dict(model="anthropic/wbt-claude", api_base=url, api_key="sk-ant-test"),
            dict(model="openai/wbt-gpt", api_base=url + "/v1", api_key="sk-test")]


def _text(response) -> str:
    return response.choices[0].message.content


def _streamed(chunks) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def _drive(url: str) -> list[str]:
    """Every way in: sync and async, JSON and streamed, both routes. Returns what the app saw."""
    seen = []
    for route in _routes(url):
        seen.append(_text(litellm.completion(messages=MESSAGES, **route)))
        seen.append(_streamed(litellm.completion(messages=MESSAGES, stream=True,
                                                 stream_options={"include_usage": True}, **route)))

    async def go():
        for route in _routes(url):
            seen.append(_text(await litellm.acompletion(messages=MESSAGES, **route)))
            stream = await litellm.acompletion(messages=MESSAGES, stream=True,
                                               stream_options={"include_usage": True}, **route)
            seen.append(_streamed([chunk async for chunk in stream]))

    asyncio.run(go())
    return seen


def test_every_litellm_call_is_recorded_once_with_exact_usage_and_cost(store, instrumented):
    provider = FakeProvider()
    with serve(provider) as url, workbench.run("litellm") as run:
        seen = _drive(url)
    assert all(text.startswith("echo: Say hello") for text in seen), seen
    rows = store.calls()
    assert_matches_served(rows, provider.served)
    assert len(rows) == 8 and all(row["run_id"] == run.run_id for row in rows)
    assert (run.billed.calls, run.billed.unsettled) == (8, 0)
    assert run.billed.cost_micros == sum(row["cost_micros"] for row in rows)


def test_litellm_replays_offline_from_a_recorded_cassette(store, instrumented, tmp_path):
    cassette = tmp_path / "litellm.json"
    provider = FakeProvider()
    with serve(provider) as url:
        with workbench.cassette(cassette, mode="record"):
            live = _drive(url)
    assert len(provider.requests) == 8
    with workbench.cassette(cassette, mode="replay") as session:
        replayed = _drive(url)  # the server is gone: every answer comes from the cassette
    assert replayed == live and session.misses == []
    rows = store.calls()
    assert [row["replayed"] for row in rows] == [False] * 8 + [True] * 8
    assert [(row["cost_micros"], row["error_type"]) for row in rows[8:]] == [
        (row["cost_micros"], None) for row in rows[:8]]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_litellm_client_built_with_workbench_is_recorded_once(store, instrumented, asynchronous):
    provider = FakeProvider()
    with serve(provider) as url:
        route = _routes(url)[1]
        if asynchronous:
            litellm.aclient_session = workbench.async_httpx_client()
            try:
                asyncio.run(litellm.acompletion(messages=MESSAGES, **route))
            finally:
                litellm.aclient_session = None
        else:
            litellm.client_session = workbench.httpx_client()
            try:
                litellm.completion(messages=MESSAGES, **route)
            finally:
                litellm.client_session = None
    assert_matches_served(store.calls(), provider.served)
