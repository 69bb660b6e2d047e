"""google-genai (Gemini's own SDK), as its docs drive it (`client.models.generate_content`,
`generate_content_stream`, and the same through `client.aio`), pointed at the fake provider with
`HttpOptions(base_url=...)`: recorded through Workbench's clients handed to it
(`HttpOptions(httpx_client=..., httpx_async_client=...)`, the README's recipe) with `instrument()`
in effect too, each call once; and by `instrument()` alone, which sees the SDK's own httpx2 clients
(its async calls go through aiohttp instead when aiohttp is installed: see the recipe). The store
must hold exactly what the fake provider served, with exact counters and cost (cached tokens,
thinking tokens, function calls included); a recorded cassette replays every call offline with the
same answers."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from fixtures.capture_store import assert_matches_served, check_live, check_replay
from google import genai
from google.genai import types

import workbench
from workbench.demo.fake_provider import FakeProvider, Reply
from workbench.demo.fake_server import serve

MODEL = "wbt-gemini"
API_KEY = "AIzaTestKeyNotARealOne0000000000000000"


def _client(url: str, **options) -> genai.Client:
    return genai.Client(api_key=API_KEY, http_options=types.HttpOptions(base_url=url, **options))


def _recipe_client(url: str) -> genai.Client:
    return _client(url, httpx_client=workbench.http_client(), httpx_async_client=workbench.async_http_client())


def _drive(url: str, client_of=_recipe_client) -> list[str]:
    """Every way in: sync and async, JSON and streamed. Returns what the app saw."""
    client = client_of(url)
    seen = [client.models.generate_content(model=MODEL, contents="Say hello").text]
    seen.append("".join(chunk.text or "" for chunk in client.models.generate_content_stream(model=MODEL,
                                                                                          contents="Say hello")))

    async def go():
        seen.append((await client.aio.models.generate_content(model=MODEL, contents="Say hello")).text)
        stream = await client.aio.models.generate_content_stream(model=MODEL, contents="Say hello")
        seen.append("".join([chunk.text or "" async for chunk in stream]))

    asyncio.run(go())
    return seen


def test_every_google_genai_call_is_recorded_once_with_exact_usage_and_cost(instrumented):
    check_live(_drive, "echo: Say hello")


def test_google_genai_replays_offline_from_a_recorded_cassette(instrumented, tmp_path):
    check_replay(_drive, tmp_path / "gemini.json")


def test_instrument_alone_records_the_sdks_own_httpx2_clients(instrumented, monkeypatch):
    # as installed without aiohttp (an optional extra of google-genai's): `client.aio` then sends
    # over the SDK's own httpx2 async client, which `instrument()` sees like the sync one
    monkeypatch.setattr("google.genai._api_client.has_aiohttp", False)
    check_live(lambda url: _drive(url, _client), "echo: Say hello")


def test_instrument_alone_records_async_calls_over_aiohttp(instrumented):
    # with aiohttp installed, `client.aio` sends through a bare aiohttp session the SDK builds on
    # first use, after instrument(): recorded by the trace config instrument() adds to every session
    import google.genai._api_client as api_client

    assert api_client.has_aiohttp
    check_live(lambda url: _drive(url, _client), "echo: Say hello")


def test_thinking_cached_tokens_and_function_calls_are_counted_and_priced(store, instrumented):
    """A long system instruction sent twice is cached the second time (`cachedContentTokenCount`,
    inside `promptTokenCount`); thinking (`thoughtsTokenCount`) is output; a function call is a
    tool call, streamed or not."""
    provider = FakeProvider()
    provider.script(Reply(text="first", reasoning_tokens=40),
                    Reply(tool_calls=[("get_weather", {"city": "Paris"})], reasoning_tokens=12))
    config = types.GenerateContentConfig(system_instruction="You are terse. " * 400)
    with serve(provider) as url, workbench.run("gemini") as run:
        client = _recipe_client(url)
        first = client.models.generate_content(model=MODEL, contents="Say hello", config=config)
        chunks = list(client.models.generate_content_stream(model=MODEL, contents="Weather in Paris?", config=config))
    calls = [call for chunk in chunks for call in chunk.function_calls or []]
    assert (first.text, [(call.name, call.args) for call in calls]) == ("first", [("get_weather", {"city": "Paris"})])
    assert first.usage_metadata.thoughts_token_count == 40
    assert chunks[-1].usage_metadata.cached_content_token_count > 0
    rows = store.calls()
    assert_matches_served(rows, provider.served)
    assert [row["reasoning_tokens"] for row in rows] == [40, 12]
    assert [row["cache_read_tokens"] for row in rows] == [0, provider.served[1].usage["cache_read_tokens"]]
    assert rows[1]["cache_read_tokens"] > 0
    assert [(row["wire"], row["provider"], row["model_requested"], row["stream"]) for row in rows] == [
        ("google.gemini", "google", MODEL, False), ("google.gemini", "google", MODEL, True)]
    assert (rows[1]["tool_call_count"], rows[1]["tool_names"]) == (1, ["get_weather"])
    assert (run.billed.calls, run.billed.cost_micros) == (2, sum(row["cost_micros"] for row in rows))
    spans = store.rows("SELECT name FROM spans WHERE name LIKE 'generate_content%'")
    assert [span["name"] for span in spans] == [f"generate_content {MODEL}"] * 2


def test_the_readme_recipe_records_every_call_once(store, instrumented, monkeypatch):
    """The README's lines, run as they stand, with the variables `workbench fake-provider` prints."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    recipe = next(block for block in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "genai.Client(" in block)
    provider = FakeProvider()
    with serve(provider) as url:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", url)
        monkeypatch.setenv("GEMINI_API_KEY", "sk-fake-workbench")
        namespace: dict = {}
        exec(recipe, namespace)  # noqa: S102 - the README's own sample
        client = namespace["client"]
        client.models.generate_content(model=MODEL, contents="Say hello")
        asyncio.run(client.aio.models.generate_content(model=MODEL, contents="Say hello"))
    assert [request.headers["x-goog-api-key"] for request in provider.requests] == ["sk-fake-workbench"] * 2
    assert_matches_served(store.calls(), provider.served)


def test_a_stream_the_app_stops_reading_early_is_recorded_unsettled(store, instrumented):
    """Gemini's usage is final only at the chunk with the finish reason: a stream left before it
    is recorded once, abandoned and unsettled, never billed from a running count."""
    provider = FakeProvider()
    provider.script(Reply(text="one two three four five six seven eight"))
    with serve(provider) as url:
        for chunk in _recipe_client(url).models.generate_content_stream(model=MODEL, contents="count"):
            break
    [row] = store.calls()
    assert (row["error_type"], row["settled"], row["cost_micros"], row["stream"]) == (
        "stream_abandoned", False, None, True)
