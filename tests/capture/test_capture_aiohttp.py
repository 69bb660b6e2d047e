"""A bare `aiohttp.ClientSession` (no httpx client around it) talking to a provider, recorded by
`instrument()` alone: every way of reading the response (a JSON body, `json()`, `text()`, the
stream through `resp.content`), each call once with the counters and cost the fake provider says
it served; a stream stopped early or cut is recorded as such, never drained; and a recording that
fails never reaches the application."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from fixtures.capture_store import assert_matches_served

import workbench
from workbench.demo.fake_provider import Reply

MESSAGES = [{"role": "user", "content": "Say hello"}]
CHAT = {"model": "wbt-gpt", "messages": MESSAGES}
STREAM = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
MESSAGES_STREAM = {"model": "wbt-claude", "max_tokens": 100, "messages": MESSAGES, "stream": True}
HEADERS = {"authorization": "Bearer " + "sk-" + "test-aiohttp-0000000000000000"}


def _events(body: bytes) -> list[str]:
    return [line[6:] for line in body.decode().splitlines() if line.startswith("data: ")]


async def _every_read_path(url: str) -> list[str]:
    """JSON through read(), json() and text(); streams through iteration, iter_chunked, readline
    and iter_any (both wires). Returns the text the application saw per call."""
    seen = []
    async with aiohttp.ClientSession(headers=HEADERS) as session:
        async with session.post(url + "/v1/chat/completions", json=CHAT) as resp:
            seen.append(json.loads(await resp.read())["choices"][0]["message"]["content"])
        async with session.post(url + "/v1/chat/completions", json=CHAT) as resp:
            seen.append((await resp.json())["choices"][0]["message"]["content"])
        async with session.post(url + "/v1/chat/completions", json=CHAT) as resp:
            seen.append(json.loads(await resp.text())["choices"][0]["message"]["content"])
        async with session.post(url + "/v1/chat/completions", json=STREAM) as resp:
            body = b"".join([line async for line in resp.content])
            seen.append(_chat_text(body))
        async with session.post(url + "/v1/chat/completions", json=STREAM) as resp:
            body = b"".join([chunk async for chunk in resp.content.iter_chunked(7)])
            seen.append(_chat_text(body))
        async with session.post(url + "/v1/messages", json=MESSAGES_STREAM,
                                headers={"x-api-key": "sk-ant-test-0000", "anthropic-version": "2023-06-01"}) as resp:
            body = b"".join([chunk async for chunk in resp.content.iter_any()])
            seen.append("".join(json.loads(event)["delta"].get("text", "") for event in _events(body)
                                if json.loads(event)["type"] == "content_block_delta"))
    return seen


def _chat_text(body: bytes) -> str:
    return "".join(choice["delta"].get("content") or ""
                   for event in _events(body) if event != "[DONE]" for choice in json.loads(event)["choices"])


def test_every_read_path_of_a_bare_session_is_recorded_once_with_exact_cost(store, fake_provider, fake_url,
                                                                             instrumented):
    with workbench.run("aiohttp") as run:
        seen = asyncio.run(_every_read_path(fake_url))
    assert all(text.startswith("echo: Say hello") for text in seen), seen
    rows = store.calls()
    assert_matches_served(rows, fake_provider.served)
    assert len(rows) == len(seen) == 6
    assert [row["stream"] for row in rows] == [False, False, False, True, True, True]
    assert all(row["run_id"] == run.run_id for row in rows)
    assert (run.billed.calls, run.billed.unsettled) == (6, 0)
    assert run.billed.cost_micros == sum(row["cost_micros"] for row in rows)
    # the request body is what was sent (the model asked for), and no credential was kept
    assert [row["model_requested"] for row in rows] == ["wbt-gpt"] * 5 + ["wbt-claude"]
    body = json.dumps(store.rows("SELECT * FROM call_bodies"), default=str)
    assert "sk-test-aiohttp" not in body and "sk-ant-test" not in body


def test_a_stream_stopped_early_is_abandoned_and_not_drained(store, fake_provider, fake_url, instrumented):
    fake_provider.script(Reply(text=" ".join(f"word{i}" for i in range(300))))

    async def stop_early():
        async with aiohttp.ClientSession() as session:
            async with session.post(fake_url + "/v1/chat/completions", json=STREAM) as resp:
                read = 0
                async for _line in resp.content:
                    read += 1
                    if read == 3:
                        break  # leaving the block closes the response
        return read

    assert asyncio.run(stop_early()) == 3
    [row] = store.calls()
    assert (row["stream"], row["settled"], row["error_type"], row["cost_micros"]) == (
        True, False, "stream_abandoned", None)


def test_a_stream_the_server_cuts_is_recorded_as_cut(store, fake_provider, fake_url, instrumented):
    fake_provider.script(Reply(text="a long enough answer to be cut in the middle", cut_after_events=3))

    async def read_until_cut():
        async with aiohttp.ClientSession() as session:
            async with session.post(fake_url + "/v1/chat/completions", json=STREAM) as resp:
                async for _line in resp.content:
                    pass

    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(read_until_cut())
    [row] = store.calls()
    assert (row["http_status"], row["settled"], row["error_type"], row["cost_micros"]) == (
        200, False, "stream_cut", None)


def test_a_connection_refused_is_recorded_as_a_transport_error(store, instrumented):
    async def refused():
        async with aiohttp.ClientSession() as session:
            await session.post("http://127.0.0.1:9/v1/chat/completions", json=CHAT)

    with pytest.raises(aiohttp.ClientConnectionError):
        asyncio.run(refused())
    [row] = store.calls()
    assert (row["http_status"], row["error_type"]) == (None, "transport_error")


def test_a_session_is_not_recorded_once_uninstrumented(store, fake_provider, fake_url):
    already = workbench.capture.instrumented()
    workbench.instrument()

    async def call():
        async with aiohttp.ClientSession() as session:
            async with session.post(fake_url + "/v1/chat/completions", json=CHAT) as resp:
                await resp.json()

    asyncio.run(call())
    workbench.uninstrument()
    try:
        asyncio.run(call())
    finally:
        if already:
            workbench.instrument()
    assert len(store.calls()) == 1 and len(fake_provider.requests) == 2


def test_a_recording_that_fails_never_breaks_the_request(store, fake_provider, fake_url, instrumented, monkeypatch):
    from workbench.capture.transport import Pending

    def broken(self, chunk):
        raise RuntimeError("recording broke")

    monkeypatch.setattr(Pending, "received", broken)

    async def call():
        async with aiohttp.ClientSession() as session:
            async with session.post(fake_url + "/v1/chat/completions", json=STREAM) as resp:
                return _chat_text(b"".join([line async for line in resp.content]))

    assert asyncio.run(call()).startswith("echo: Say hello")
