"""LiteLLM, as its docs drive it (`litellm.completion` / `acompletion`, streaming or not, the OpenAI
and Anthropic routes), recorded by `workbench.instrument()` alone: its sync client (httpx) and its
async one (httpx over LiteLLM's aiohttp transport) alike. The store must hold exactly what the fake
provider served, each call once, with exact counters and cost; a recorded cassette replays every
call offline with the same answers."""

from __future__ import annotations

import asyncio

import litellm
import pytest
from fixtures.capture_store import assert_matches_served, check_live, check_replay
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


def test_every_litellm_call_is_recorded_once_with_exact_usage_and_cost(instrumented):
    check_live(_drive, "echo: Say hello")


def test_litellm_replays_offline_from_a_recorded_cassette(instrumented, tmp_path):
    check_replay(_drive, tmp_path / "litellm.json")


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
