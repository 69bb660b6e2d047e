"""The REAL openai and anthropic SDKs record against the fake provider over HTTP, then replay with
the server stopped: the same outputs, and the store holds the replayed calls (replayed, cassette
set) with the usage and cost of the recorded ones. A changed prompt is WB_REPLAY_MISS at once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anthropic
import openai
import pytest
from fixtures.capture_store import COUNTERS
from workbench.demo.fake_server import serve

import workbench
from workbench.demo.fake_provider import FakeProvider, Reply
from workbench.replay.session import Cassette

USAGE = {"input_tokens": 1201, "cache_read_tokens": 384, "cache_write_tokens": 0, "output_tokens": 97,
         "reasoning_tokens": 31}
USAGE_ANTHROPIC = {"input_tokens": 1201, "cache_read_tokens": 384, "cache_write_tokens": 250,
                   "output_tokens": 97, "reasoning_tokens": 0}
MESSAGES = [{"role": "user", "content": "Say hello"}]


def _oa(url, cassette, mode, retries=0):
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=retries,
                         http_client=workbench.http_client(cassette=cassette, mode=mode))


def _aoa(url, cassette, mode):
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                              http_client=workbench.async_http_client(cassette=cassette, mode=mode))


def _an(url, cassette, mode, retries=0):
    return anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=retries,
                               http_client=workbench.http_client(cassette=cassette, mode=mode))


def _aan(url, cassette, mode):
    return anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0,
                                    http_client=workbench.async_http_client(cassette=cassette, mode=mode))


# --- drivers: one application-style call each; return everything the application saw

def chat_json(url, c, mode):
    r = _oa(url, c, mode).chat.completions.create(model="wbt-gpt", messages=MESSAGES)
    return r.model_dump()


def chat_stream(url, c, mode):
    stream = _oa(url, c, mode).chat.completions.create(
        model="wbt-gpt", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    return [chunk.model_dump() for chunk in stream]


def chat_helper(url, c, mode):
    with _oa(url, c, mode).chat.completions.stream(
            model="wbt-mini", messages=MESSAGES, stream_options={"include_usage": True}) as stream:
        return stream.get_final_completion().model_dump()


def chat_async(url, c, mode):
    async def go():
        return (await _aoa(url, c, mode).chat.completions.create(model="wbt-mini", messages=MESSAGES)).model_dump()
    return asyncio.run(go())


def chat_async_stream(url, c, mode):
    async def go():
        stream = await _aoa(url, c, mode).chat.completions.create(
            model="wbt-gpt", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
        return [chunk.model_dump() async for chunk in stream]
    return asyncio.run(go())


def responses_helper(url, c, mode):
    with _oa(url, c, mode).responses.stream(model="wbt-gpt", input="Say hello") as stream:
        return stream.get_final_response().model_dump()


def chat_retry_429(url, c, mode):
    r = _oa(url, c, mode, retries=2).chat.completions.create(model="wbt-gpt", messages=MESSAGES)
    return r.model_dump()


def chat_stream_retry_429(url, c, mode):
    stream = _oa(url, c, mode, retries=2).chat.completions.create(
        model="wbt-gpt", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    return [chunk.model_dump() for chunk in stream]


def messages_json(url, c, mode):
    return _an(url, c, mode).messages.create(model="wbt-claude", max_tokens=500, messages=MESSAGES).model_dump()


def messages_stream(url, c, mode):
    events = _an(url, c, mode).messages.create(model="wbt-claude", max_tokens=500, messages=MESSAGES, stream=True)
    return [event.model_dump() for event in events]


def messages_helper(url, c, mode):
    with _an(url, c, mode).messages.stream(model="wbt-claude", max_tokens=500, messages=MESSAGES) as stream:
        return [stream.get_final_text(), stream.get_final_message().model_dump()]


def messages_async(url, c, mode):
    async def go():
        client = _aan(url, c, mode)
        return (await client.messages.create(model="wbt-claude", max_tokens=500, messages=MESSAGES)).model_dump()
    return asyncio.run(go())


def messages_async_helper(url, c, mode):
    async def go():
        async with _aan(url, c, mode).messages.stream(model="wbt-claude", max_tokens=500, messages=MESSAGES) as s:
            return (await s.get_final_message()).model_dump()
    return asyncio.run(go())


def messages_retry_529(url, c, mode):
    r = _an(url, c, mode, retries=2).messages.create(model="wbt-claude", max_tokens=500, messages=MESSAGES)
    return r.model_dump()


def messages_helper_retry_529(url, c, mode):
    with _an(url, c, mode, retries=2).messages.stream(model="wbt-claude", max_tokens=500, messages=MESSAGES) as s:
        return s.get_final_message().model_dump()


TEXT = "Hello there, this is the fake provider speaking."
OK_OPENAI = Reply(text=TEXT, usage=USAGE)
OK_ANTHROPIC = Reply(text=TEXT, usage=USAGE_ANTHROPIC)
# a tiny retry-after keeps the SDKs' backoff short; the recorded header makes the replayed retry as quick
RATE_LIMITED = Reply(status=429, retry_after=0.001)
OVERLOADED = Reply(status=529, retry_after=0.001)

CASES = [  # driver, script, HTTP statuses recorded
    (chat_json, [OK_OPENAI], [200]),
    (chat_stream, [OK_OPENAI], [200]),
    (chat_helper, [OK_OPENAI], [200]),
    (chat_async, [OK_OPENAI], [200]),
    (chat_async_stream, [OK_OPENAI], [200]),
    (responses_helper, [OK_OPENAI], [200]),
    (chat_retry_429, [RATE_LIMITED, OK_OPENAI], [429, 200]),
    (chat_stream_retry_429, [RATE_LIMITED, OK_OPENAI], [429, 200]),
    (messages_json, [OK_ANTHROPIC], [200]),
    (messages_stream, [OK_ANTHROPIC], [200]),
    (messages_helper, [OK_ANTHROPIC], [200]),
    (messages_async, [OK_ANTHROPIC], [200]),
    (messages_async_helper, [OK_ANTHROPIC], [200]),
    (messages_retry_529, [OVERLOADED, OK_ANTHROPIC], [529, 200]),
    (messages_helper_retry_529, [OVERLOADED, OK_ANTHROPIC], [529, 200]),
]

COMPARED = ("wire", "stream", "http_status", "error_type", "settled", "model_requested", "model_served",
            "stop_reason", "response_id", "request_hash", "cost_micros", "price_source", *COUNTERS)


@pytest.mark.parametrize(("driver", "script", "statuses"), CASES, ids=[case[0].__name__ for case in CASES])
def test_record_then_replay_with_the_provider_stopped(store, tmp_path, driver, script, statuses):
    cassette = tmp_path / "cassettes" / f"{driver.__name__}.json"
    provider = FakeProvider().script(*script)
    with serve(provider) as url:
        recorded = driver(url, cassette, "record")
    assert len(provider.requests) == len(statuses)  # the retries really went to the provider
    file = json.loads(cassette.read_text())
    assert [i["response"]["status"]["code"] for i in file["interactions"]] == statuses

    # the server is gone: anything that tried the network would fail to connect
    replayed = driver(url, cassette, "replay")
    assert replayed == recorded
    assert len(provider.requests) == len(statuses)

    rows = store.calls()
    live = [row for row in rows if not row["replayed"]]
    again = [row for row in rows if row["replayed"]]
    assert len(live) == len(again) == len(statuses)
    assert [row["http_status"] for row in again] == statuses  # the error replayed too, then the success
    assert all(row["cassette"] == str(cassette) for row in again)
    for before, after in zip(live, again):
        assert {name: before[name] for name in COMPARED} == {name: after[name] for name in COMPARED}
    success = again[-1]
    assert success["settled"] is True and success["cost_micros"] is not None
    expected = USAGE_ANTHROPIC if success["wire"] == "anthropic.messages" else USAGE
    assert {name: success[name] for name in COUNTERS} == expected


# --- a changed prompt: WB_REPLAY_MISS, at once, as itself

class _Network:
    """The replay transport's network: counts what reaches it (nothing may)."""

    def __init__(self):
        self.requests = []

    def handle_request(self, request):
        self.requests.append(request)
        raise AssertionError("replay mode reached the network")

    def close(self):
        pass


def _count_replay_attempts(client) -> list:
    replay = client._transport.inner  # capture's recording transport wraps the replay transport
    assert type(replay).__name__ == "ReplayTransport"
    attempts = []
    original = replay.handle_request

    def counted(request):
        attempts.append(request)
        return original(request)

    replay.handle_request = counted
    return attempts


def _record_one(tmp_path: Path, sdk: str) -> tuple[Path, str]:
    cassette = tmp_path / f"{sdk}.json"
    provider = FakeProvider()
    with serve(provider) as url:
        ask(sdk, url, workbench.http_client(cassette=cassette, mode="record"), "Summarise the quarterly report")
    return cassette, url


def ask(sdk: str, url: str, http_client, text: str):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}] \
        if sdk == "openai" else [{"role": "user", "content": text}]
    if sdk == "openai":
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=2, http_client=http_client)
        return client.chat.completions.create(model="wbt-gpt", messages=messages)
    client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=2, http_client=http_client)
    return client.messages.create(model="wbt-claude", max_tokens=100, messages=messages)


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_changed_prompt_is_a_miss_with_the_diff_and_no_retries(store, tmp_path, sdk):
    cassette_path, url = _record_one(tmp_path, sdk)
    cassette = Cassette(cassette_path, mode="replay")
    network = _Network()
    client = cassette.http_client(transport=network)
    attempts = _count_replay_attempts(client)

    error_type = openai.BadRequestError if sdk == "openai" else anthropic.BadRequestError
    with pytest.raises(error_type) as raised:
        ask(sdk, url, client, "Summarise the annual report")

    message = str(raised.value)
    path = "/v1/chat/completions" if sdk == "openai" else "/v1/messages"
    [miss_row] = [row for row in store.calls() if row["replayed"] is False and row["http_status"] == 400]
    assert "WB_REPLAY_MISS" in message
    assert miss_row["request_hash"] in message  # the hash capture computed for the request that missed
    assert f"closest recording: POST {url}{path}" in message
    assert "-Summarise the quarterly report" in message and "+Summarise the annual report" in message
    assert "WORKBENCH_RECORD_MODE=record" in message and str(cassette_path) in message
    assert len(attempts) == 1  # max_retries=2, yet one attempt: the miss is not retryable
    assert network.requests == []
    [error] = cassette.misses
    assert isinstance(error, workbench.WorkbenchError) and error.code == "WB_REPLAY_MISS"
    assert miss_row["request_hash"] in error.cause


def test_a_miss_through_the_async_client_is_not_retried_either(store, tmp_path):
    cassette_path, url = _record_one(tmp_path, "openai")
    cassette = Cassette(cassette_path, mode="replay")
    client = cassette.async_http_client()
    replay = client._transport.inner
    attempts = []
    original = replay.handle_async_request

    async def counted(request):
        attempts.append(request)
        return await original(request)

    replay.handle_async_request = counted

    async def go():
        sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=2, http_client=client)
        return await sdk.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "other"}])

    with pytest.raises(openai.BadRequestError, match="WB_REPLAY_MISS"):
        asyncio.run(go())
    assert len(attempts) == 1 and [m.code for m in cassette.misses] == ["WB_REPLAY_MISS"]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_recording_edited_by_hand_replays_the_request_it_now_holds(store, tmp_path, sdk):
    """Stored hashes are trusted for speed; an edited request body keeps its old hash in the file. A
    miss looks again at what each recording holds now, so the edited request replays."""
    cassette_path, url = _record_one(tmp_path, sdk)
    data = json.loads(cassette_path.read_text())
    request = data["interactions"][0]["request"]
    request["body"] = request["body"].replace("quarterly", "annual")
    cassette_path.write_text(json.dumps(data))
    assert data["workbench"]["request_hashes"]  # the stale hash is still there

    cassette = Cassette(cassette_path, mode="replay")
    answer = ask(sdk, url, cassette.http_client(transport=_Network()), "Summarise the annual report")
    assert cassette.misses == []
    assert (answer.choices[0].message.content if sdk == "openai" else answer.content[0].text)
    with pytest.raises(openai.BadRequestError if sdk == "openai" else anthropic.BadRequestError):
        ask(sdk, url, cassette.http_client(transport=_Network()), "Summarise the weekly report")
    assert [error.code for error in cassette.misses] == ["WB_REPLAY_MISS"]
