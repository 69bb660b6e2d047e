"""instructor, as its docs drive it: `instructor.from_openai` over the openai SDK given Workbench's
httpx client, `create` with a `response_model` (the model answers with a tool call, which instructor
validates into the pydantic object), sync and async, and `create_partial` streaming the object.
The store must hold exactly what the fake provider served, each call once, with exact counters and
cost; a recorded cassette replays every call offline with the same answers."""

from __future__ import annotations

import asyncio

from fixtures.capture_store import check_live, check_replay
from fixtures.client_env import require
from pydantic import BaseModel

import workbench
from workbench.demo.fake_provider import FakeProvider, FakeRequest, Reply

instructor = require("instructor")
import openai  # noqa: E402

MESSAGES = [{"role": "user", "content": "Say hello"}]


class Greeting(BaseModel):
    text: str


def _greet(request: FakeRequest) -> Reply | None:
    """The model's answer to instructor's forced tool: the greeting as the tool's arguments."""
    tools = (request.json or {}).get("tools") or []
    return Reply(tool_calls=[(tools[0]["function"]["name"], {"text": "hello from the tool"})]) if tools else None


def _drive(url: str) -> list[str]:
    """create, async create and create_partial (streamed). Returns what the app saw."""
    options = dict(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    client = instructor.from_openai(openai.OpenAI(http_client=workbench.httpx_client(), **options))
    aclient = instructor.from_openai(openai.AsyncOpenAI(http_client=workbench.async_httpx_client(), **options))
    ask = dict(model="wbt-gpt", response_model=Greeting, messages=MESSAGES, max_retries=0)
    seen = [client.chat.completions.create(**ask).text]
    partials = list(client.chat.completions.create_partial(stream_options={"include_usage": True}, **ask))
    assert len(partials) > 1  # streamed: the object grows chunk by chunk
    seen.append(partials[-1].text)

    async def go():
        seen.append((await aclient.chat.completions.create(**ask)).text)

    asyncio.run(go())
    return seen


def test_every_instructor_call_is_recorded_once_with_exact_usage_and_cost(instrumented):
    check_live(_drive, "hello from the tool", FakeProvider(responder=_greet))


def test_instructor_replays_offline_from_a_recorded_cassette(instrumented, tmp_path):
    check_replay(_drive, tmp_path / "instructor.json", FakeProvider(responder=_greet))
