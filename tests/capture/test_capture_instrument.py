"""instrument(): SDK clients created WITHOUT http_client= are recorded, whatever transport they were
built with (custom, mounted, in-process), before or after the call; uninstrument() restores the
clients; a workbench.http_client() client under instrument() is recorded exactly once."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import openai
import pytest

import workbench
from fixtures.capture_store import assert_matches_served
from workbench.demo.fake_provider import AsyncHttpxFakeTransport, FakeProvider, FakeTransport

MESSAGES = [{"role": "user", "content": "hello"}]


def _methods() -> tuple:
    return tuple(getattr(cls, name) for cls in (httpx2.Client, httpx2.AsyncClient, httpx.Client, httpx.AsyncClient)
                 for name in ("_transport_for_url", "send"))


@pytest.fixture
def instrumented():
    originals = _methods()
    workbench.instrument()
    try:
        yield
    finally:
        workbench.uninstrument()
        assert _methods() == originals


def test_instrument_records_default_clients_and_uninstrument_restores(store, fake_url, instrumented):
    with workbench.run("instrumented") as run:
        plain = openai.OpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0)
        plain.chat.completions.create(model="wbt-gpt", messages=MESSAGES)

        async def go():
            client = openai.AsyncOpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0)
            await client.chat.completions.create(model="wbt-mini", messages=MESSAGES)

        asyncio.run(go())
        httpx.post(fake_url + "/v1/chat/completions", json={"model": "wbt-gpt", "messages": MESSAGES})
    calls = store.calls()
    assert [(c["model_requested"], c["settled"], c["run_id"]) for c in calls] == [
        ("wbt-gpt", True, run.run_id), ("wbt-mini", True, run.run_id), ("wbt-gpt", True, run.run_id)]
    assert all(c["cost_micros"] > 0 for c in calls)

    workbench.uninstrument()
    openai.OpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0).chat.completions.create(
        model="wbt-gpt", messages=MESSAGES)
    assert len(store.calls()) == 3  # not recorded any more


def test_http_client_under_instrument_is_recorded_once(store, fake_url, instrumented):
    client = openai.OpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=workbench.http_client())
    client.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
    stream = client.chat.completions.create(model="wbt-gpt", messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True})
    list(stream)

    async def go():
        aclient = openai.AsyncOpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0,
                                     http_client=workbench.async_http_client())
        await aclient.chat.completions.create(model="wbt-gpt", messages=MESSAGES)

    asyncio.run(go())
    calls = store.calls()
    assert len(calls) == 3
    assert len({c["span_id"] for c in calls}) == 3
    assert len(store.rows("SELECT * FROM spans WHERE name = 'chat wbt-gpt'")) == 3


def test_clients_on_custom_transports_are_recorded_built_before_or_after(store):
    provider = FakeProvider()
    before = openai.OpenAI(base_url="http://fake/v1", api_key="sk-test", max_retries=0,
                           http_client=httpx2.Client(transport=FakeTransport(provider)))
    workbench.instrument()
    try:
        before.chat.completions.create(model="wbt-gpt", messages=MESSAGES)

        async def go():
            # an httpx client whose transport is mounted for one host only
            mounted = httpx.AsyncClient(mounts={"http://fake": AsyncHttpxFakeTransport(provider)})
            await mounted.post("http://fake/v1/chat/completions", json={"model": "wbt-mini", "messages": MESSAGES})

        asyncio.run(go())
    finally:
        workbench.uninstrument()
    assert_matches_served(store.calls(), provider.served)
    assert len(provider.served) == 2


def test_in_process_transports_are_left_alone_even_inside_a_cassette(store, tmp_path):
    """An app under test (ASGI/WSGI) or a mock has no provider behind it: not recorded, and never
    answered from a test's cassette in its place."""
    mock = httpx2.Client(transport=httpx2.MockTransport(lambda request: httpx2.Response(200, json={"ok": True})))
    workbench.instrument()
    try:
        with workbench.cassette(tmp_path / "empty.json", mode="replay") as session:
            assert mock.post("http://app.test/v1/chat/completions", json={"model": "wbt-gpt"}).json() == {"ok": True}
    finally:
        workbench.uninstrument()
    workbench.flush()
    assert session.misses == [] and not store.path.exists()  # nothing recorded: no store was even created
