"""Ambient cassettes: inside `with workbench.cassette(path, mode=...)`, every client Workbench sees
records into that cassette and replays from it — clients built before the block or deep in the
application, through `http_client()`, `httpx_client()` and, after `instrument()`, the SDKs' own
default clients; nested scopes, asyncio tasks and threads follow the documented rule."""

from __future__ import annotations

import asyncio
import json
import threading

import openai
import pytest

import workbench
from workbench.config import settings
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, FakeTransport, HttpxFakeTransport

URL = "http://fake.test/v1/chat/completions"
DEAD = "http://127.0.0.1:9/v1"  # nothing listens: a request that reaches the network fails


def _body(text: str) -> dict:
    return {"model": "wbt-gpt", "messages": [{"role": "user", "content": text}]}


def _answer(response) -> str:
    return response.json()["choices"][0]["message"]["content"]


def _recorded(path) -> list[str]:
    return [json.loads(item["request"]["body"])["messages"][0]["content"]
            for item in json.loads(path.read_text())["interactions"]]


def test_a_client_built_before_the_scope_records_into_it_and_replays_from_it(tmp_path):
    path = tmp_path / "app.json"
    provider = FakeProvider()
    client = workbench.http_client(transport=FakeTransport(provider))  # built at import time, say
    with workbench.cassette(path, mode="record"):
        assert _answer(client.post(URL, json=_body("hello"))) == "echo: hello"
    assert _recorded(path) == ["hello"]
    silent = FakeProvider(echo_chars=2)  # a different answer, so a replayed one is recognisable
    client = workbench.http_client(transport=FakeTransport(silent))
    with workbench.cassette(path) as cassette:
        assert _answer(client.post(URL, json=_body("hello"))) == "echo: hello"
    assert silent.requests == [] and cassette.mode == "replay"
    # outside any scope the same client goes to its own transport again
    assert _answer(client.post(URL, json=_body("hello"))) == "echo: he"


def test_httpx_clients_are_seen_too(tmp_path):
    path = tmp_path / "httpx.json"
    client = workbench.httpx_client(transport=HttpxFakeTransport(FakeProvider()))
    with workbench.cassette(path, mode="record"):
        client.post(URL, json=_body("over httpx"))
    assert _recorded(path) == ["over httpx"]


def test_a_miss_in_an_ambient_replay_scope_names_the_cassette(tmp_path):
    path = tmp_path / "empty.json"
    client = workbench.http_client(transport=FakeTransport(FakeProvider()))
    with workbench.cassette(path, mode="replay") as cassette:
        response = client.post(URL, json=_body("never recorded"))
    assert response.status_code == 400 and response.headers["x-workbench-error"] == "WB_REPLAY_MISS"
    assert str(path) in cassette.misses[0].cause


def test_the_sdks_own_default_clients_replay_once_instrumented(tmp_path, fake_url, fake_provider, monkeypatch):
    """The application builds `OpenAI()` with no Workbench client at all (here, before the scope)."""
    path = tmp_path / "sdk.json"
    workbench.instrument()
    try:
        app_client = openai.OpenAI(base_url=f"{fake_url}/v1", api_key="sk-test", max_retries=0)
        with workbench.cassette(path, mode="record"):
            reply = app_client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "echo: hi" and len(fake_provider.requests) == 1
        offline = openai.OpenAI(base_url=DEAD, api_key="sk-test", max_retries=0)
        with workbench.cassette(path):
            again = offline.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "hi"}])
        assert again.choices[0].message.content == "echo: hi" and len(fake_provider.requests) == 1
    finally:
        workbench.uninstrument()


def test_replay_works_with_capture_switched_off(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    client = workbench.http_client(transport=FakeTransport(FakeProvider()))
    with workbench.cassette(path, mode="record"):
        client.post(URL, json=_body("kept"))
    monkeypatch.setenv("WORKBENCH_CAPTURE", "false")
    settings.cache_clear()
    workbench.configure()
    silent = FakeProvider()
    client = workbench.http_client(transport=FakeTransport(silent))
    with workbench.cassette(path):
        assert _answer(client.post(URL, json=_body("kept"))) == "echo: kept"
    assert silent.requests == []


def test_nested_scopes_the_innermost_wins_and_live_means_no_cassette(tmp_path):
    outer, inner = tmp_path / "outer.json", tmp_path / "inner.json"
    provider = FakeProvider()
    client = workbench.http_client(transport=FakeTransport(provider))
    with workbench.cassette(outer, mode="record"):
        client.post(URL, json=_body("one"))
        with workbench.cassette(inner, mode="record"):
            client.post(URL, json=_body("two"))
            with workbench.cassette(tmp_path / "unused.json", mode="live"):
                client.post(URL, json=_body("three"))
        client.post(URL, json=_body("four"))
    assert _recorded(outer) == ["one", "four"]
    assert _recorded(inner) == ["two"]
    assert not (tmp_path / "unused.json").exists()
    assert [request.json["messages"][0]["content"] for request in provider.requests] == ["one", "two", "three", "four"]


def test_a_client_bound_to_a_cassette_keeps_its_own(tmp_path):
    ambient, bound = tmp_path / "ambient.json", tmp_path / "bound.json"
    provider = FakeProvider()
    own = workbench.http_client(cassette=bound, mode="record", transport=FakeTransport(provider))
    with workbench.cassette(ambient, mode="record"):
        own.post(URL, json=_body("mine"))
    own.close()
    assert _recorded(bound) == ["mine"] and not ambient.exists()


def test_asyncio_tasks_started_in_a_scope_use_it(tmp_path):
    path = tmp_path / "async.json"
    client = workbench.async_http_client(transport=AsyncFakeTransport(FakeProvider()))

    async def main():
        with workbench.cassette(path, mode="record"):
            await asyncio.gather(*(asyncio.create_task(client.post(URL, json=_body(f"task {n}"))) for n in range(3)))
        await client.aclose()

    asyncio.run(main())
    assert sorted(_recorded(path)) == ["task 0", "task 1", "task 2"]


def test_a_thread_without_a_scope_uses_the_latest_scope_open_in_the_process(tmp_path):
    path = tmp_path / "threads.json"
    client = workbench.http_client(transport=FakeTransport(FakeProvider()))
    with workbench.cassette(path, mode="record"):
        worker = threading.Thread(target=lambda: client.post(URL, json=_body("from a worker thread")))
        worker.start()
        worker.join()
    assert _recorded(path) == ["from a worker thread"]


def test_a_thread_with_its_own_scope_keeps_it_while_another_is_open(tmp_path):
    main_path, thread_path = tmp_path / "main.json", tmp_path / "thread.json"
    client = workbench.http_client(transport=FakeTransport(FakeProvider()))
    entered, leave = threading.Event(), threading.Event()

    def worker():
        with workbench.cassette(thread_path, mode="record"):
            entered.set()
            leave.wait(10)
            client.post(URL, json=_body("thread"))

    thread = threading.Thread(target=worker)
    with workbench.cassette(main_path, mode="record"):
        thread.start()
        entered.wait(10)
        client.post(URL, json=_body("main"))  # opened earlier than the thread's, still this context's
        leave.set()
        thread.join()
    assert _recorded(main_path) == ["main"] and _recorded(thread_path) == ["thread"]


def test_a_bad_mode_is_a_workbench_error(tmp_path):
    with pytest.raises(workbench.WorkbenchError) as caught:
        with workbench.cassette(tmp_path / "x.json", mode="sometimes"):
            pass
    assert caught.value.code == "WB_CONFIG_INVALID" and "sometimes" in caught.value.cause
