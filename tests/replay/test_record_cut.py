"""Record mode never drops a call the server cut: a stream (or a JSON body) the connection dropped
in the middle of is written to the cassette as far as it arrived, marked cut, and replays as it was
received: the same events, then the same error raised to the client at the same point, and the call
recorded as cut again."""

from __future__ import annotations

import asyncio
import json

import anthropic
import openai
import pytest
from workbench.demo.fake_server import serve

import workbench
from workbench.demo.fake_provider import FakeProvider, Reply
from workbench.replay.transport import ABANDONED_HEADER

MESSAGES = [{"role": "user", "content": "hello"}]
OFFLINE = "http://127.0.0.1:9"  # nothing listens: replay only


def _failure(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc)


def _chat_stream(cassette, mode, url) -> tuple[list[str], tuple[str, str]]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=workbench.http_client(cassette=cassette, mode=mode))
    seen = []
    try:
        for chunk in client.chat.completions.create(model="wbt-gpt", messages=MESSAGES, stream=True,
                                                    stream_options={"include_usage": True}):
            seen.append(chunk.model_dump_json())
    except Exception as exc:  # noqa: BLE001 - the error is what the test compares
        return seen, _failure(exc)
    raise AssertionError("the stream was not cut")


def _messages_stream_async(cassette, mode, url) -> tuple[list[str], tuple[str, str]]:
    async def go():
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0,
                                          http_client=workbench.async_http_client(cassette=cassette, mode=mode))
        seen = []
        try:
            async with client.messages.stream(model="wbt-claude", max_tokens=500, messages=MESSAGES) as stream:
                async for event in stream:
                    seen.append(event.model_dump_json())
        except Exception as exc:  # noqa: BLE001
            return seen, _failure(exc)
        raise AssertionError("the stream was not cut")

    return asyncio.run(go())


def _chat_json(cassette, mode, url) -> tuple[list[str], tuple[str, str]]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=workbench.http_client(cassette=cassette, mode=mode))
    try:
        client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
    except Exception as exc:  # noqa: BLE001
        return [], _failure(exc)
    raise AssertionError("the body was not cut")


@pytest.mark.parametrize("call", [_chat_stream, _messages_stream_async, _chat_json], ids=lambda f: f.__name__)
def test_a_cut_response_is_recorded_marked_and_replays_the_same_error(tmp_path, store, call):
    cassette = tmp_path / "cut.json"
    provider = FakeProvider().script(Reply(text="a long enough answer to be cut in the middle", cut_after_events=4))
    with serve(provider) as url:
        live_seen, live_error = call(cassette, "record", url)
    assert len(provider.requests) == 1
    [recorded] = json.loads(cassette.read_text())["interactions"]
    assert recorded["response"]["headers"][ABANDONED_HEADER][0] == "cut"

    replayed_seen, replayed_error = call(cassette, "replay", OFFLINE)
    assert (replayed_seen, replayed_error) == (live_seen, live_error)
    rows = store.calls()
    assert [(row["replayed"], row["settled"], row["error_type"], row["cost_micros"]) for row in rows] == [
        (False, False, "stream_cut", None), (True, False, "stream_cut", None)]

