"""OpenAI embeddings (`/v1/embeddings`) are recorded like chat: the real openai SDK (sync, async, and
its default client under `instrument()`) against the fake provider over HTTP, each call once, input
tokens only, the exact cost, an `embeddings {model}` span; a recorded cassette replays the same
vectors offline."""

from __future__ import annotations

import asyncio

import openai
from fixtures.capture_store import assert_matches_served

import workbench
from workbench.demo.fake_provider import FakeProvider
from workbench.demo.fake_server import serve

TEXTS = ["the cat sat", "on the mat, which was rather larger than the cat"]


def _vectors(response) -> list[list[float]]:
    return [item.embedding for item in response.data]


def test_embeddings_are_recorded_once_with_input_tokens_and_exact_cost(store, fake_provider, fake_url):
    client = openai.OpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=workbench.http_client())

    async def go():
        aclient = openai.AsyncOpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0,
                                     http_client=workbench.async_http_client())
        return await aclient.embeddings.create(model="wbt-embed", input=TEXTS)

    workbench.instrument()
    try:
        with workbench.run("embed") as run:
            first = client.embeddings.create(model="wbt-embed", input=TEXTS[0])
            second = asyncio.run(go())
            default = openai.OpenAI(base_url=fake_url + "/v1", api_key="sk-test", max_retries=0)
            third = default.embeddings.create(model="wbt-embed", input=TEXTS, encoding_format="float")
    finally:
        workbench.uninstrument()
    assert len(_vectors(first)[0]) == 8 and _vectors(second) == _vectors(third)
    rows = store.calls()
    assert_matches_served(rows, fake_provider.served)
    assert [row["input_tokens"] for row in rows] == [3, 3 + 12, 3 + 12]
    assert {(row["wire"], row["stream"], row["output_tokens"]) for row in rows} == {("openai.embeddings", False, 0)}
    assert (run.billed.calls, run.billed.input_tokens) == (3, 33)
    assert run.billed.cost_micros == sum(row["cost_micros"] for row in rows)
    spans = store.rows("SELECT name FROM spans WHERE name LIKE 'embeddings%'")
    assert [span["name"] for span in spans] == ["embeddings wbt-embed"] * 3


def test_embeddings_replay_offline_from_a_recorded_cassette(store, tmp_path):
    cassette = tmp_path / "embeddings.json"
    provider = FakeProvider()
    with serve(provider) as url:
        live = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                             http_client=workbench.http_client(cassette=cassette, mode="record"))
        recorded = _vectors(live.embeddings.create(model="wbt-embed", input=TEXTS))
    offline = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                            http_client=workbench.http_client(cassette=cassette, mode="replay"))
    assert _vectors(offline.embeddings.create(model="wbt-embed", input=TEXTS)) == recorded
    live_row, replayed_row = store.calls()
    assert (replayed_row["replayed"], replayed_row["cost_micros"]) == (True, live_row["cost_micros"])
    assert replayed_row["input_tokens"] == live_row["input_tokens"] == 15
