"""LangChain chat models, as their docs drive them (`invoke`, `ainvoke`, `stream`, `astream`):
`ChatOpenAI` given Workbench's clients (`http_client=`, `http_async_client=`), and `ChatAnthropic`
recorded by `workbench.instrument()` alone (it moves an `http_client=` argument into `model_kwargs`
and fails on the first call, so that is the only way in). The store must hold exactly what the fake
provider served, each call once, with exact counters and cost; a recorded cassette replays every
call offline with the same answers."""

from __future__ import annotations

import asyncio

from fixtures.capture_store import check_live, check_replay
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI

import workbench

PROMPT = "Say hello"


def _models(url: str) -> list:
    return [
        ChatOpenAI(model="wbt-gpt", base_url=url + "/v1", api_key="sk-test", max_retries=0, stream_usage=True,
                   http_client=workbench.http_client(), http_async_client=workbench.async_http_client()),
        ChatAnthropic(model="wbt-claude", base_url=url, api_key="sk-ant-test", max_retries=0),
    ]


def _drive(url: str) -> list[str]:
    """invoke, stream, ainvoke and astream on each model. Returns what the app saw."""
    seen = []
    models = _models(url)
    for model in models:
        seen.append(model.invoke(PROMPT).content)
        seen.append("".join(chunk.content for chunk in model.stream(PROMPT)))

    async def go():
        for model in models:
            seen.append((await model.ainvoke(PROMPT)).content)
            seen.append("".join([chunk.content async for chunk in model.astream(PROMPT)]))

    asyncio.run(go())
    return seen


def test_every_langchain_call_is_recorded_once_with_exact_usage_and_cost(instrumented):
    check_live(_drive, "echo: Say hello")


def test_langchain_replays_offline_from_a_recorded_cassette(instrumented, tmp_path):
    check_replay(_drive, tmp_path / "langchain.json")
