"""instrument(): SDK clients created WITHOUT http_client= are recorded; uninstrument() restores the
network transports; a workbench.http_client() client under instrument() is recorded exactly once."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import openai
import pytest

import workbench

MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture
def instrumented():
    originals = (httpx2.HTTPTransport.handle_request, httpx2.AsyncHTTPTransport.handle_async_request,
                 httpx.HTTPTransport.handle_request, httpx.AsyncHTTPTransport.handle_async_request)
    workbench.instrument()
    try:
        yield
    finally:
        workbench.uninstrument()
        assert (httpx2.HTTPTransport.handle_request, httpx2.AsyncHTTPTransport.handle_async_request,
                httpx.HTTPTransport.handle_request, httpx.AsyncHTTPTransport.handle_async_request) == originals


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
