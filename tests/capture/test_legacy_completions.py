"""The legacy completions endpoints are recorded like chat: OpenAI's `/v1/completions` through the real
openai SDK (`client.completions.create`, sync, async, streamed) against the fake provider over HTTP,
each call once, the billed counters and the exact cost, a `text_completion {model}` span; Anthropic's
`/v1/complete`, which reports no usage, recorded with its text and stop reason as unsettled and
unpriced; both replayed offline from a recorded cassette."""

from __future__ import annotations

import asyncio
import json

import httpx2
import openai
from fixtures.capture_store import assert_matches_served

import workbench
from workbench.demo.fake_provider import FakeProvider
from workbench.demo.fake_server import serve

PROMPT = "Write a tagline for an ice cream shop."
CLAUDE_PROMPT = "\n\nHuman: Write a tagline for an ice cream shop.\n\nAssistant:"


def _clients(url: str) -> tuple[openai.OpenAI, openai.AsyncOpenAI]:
    return (openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, http_client=workbench.http_client()),
            openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                               http_client=workbench.async_http_client()))


def _calls(store) -> list[dict]:
    """The stored calls with the text each answered (kept apart from the hot table)."""
    return store.rows("SELECT c.*, b.output_text FROM calls c LEFT JOIN call_bodies b USING (call_id) "
                      "ORDER BY c.started_at")


def _streamed(chunks) -> tuple[str, object]:
    text, usage = "", None
    for chunk in chunks:
        text += "".join(choice.text for choice in chunk.choices if choice.index == 0)
        usage = chunk.usage or usage
    return text, usage


def test_openai_completions_are_recorded_once_with_exact_counters_and_cost(store, fake_provider, fake_url):
    client, aclient = _clients(fake_url)

    async def go():
        answer = await aclient.completions.create(model="wbt-gpt", prompt=[PROMPT, "And for a bakery."])
        stream = await aclient.completions.create(model="wbt-gpt", prompt=PROMPT, stream=True,
                                                  stream_options={"include_usage": True})
        text = "".join([chunk.choices[0].text async for chunk in stream if chunk.choices])
        return answer, text

    with workbench.run("legacy") as run:
        # n=2 of best_of=3: three completions generated and billed, two returned; echo repeats the prompt
        best = client.completions.create(model="wbt-gpt", prompt=PROMPT, n=2, best_of=3, echo=True, max_tokens=40)
        text, usage = _streamed(client.completions.create(model="wbt-gpt", prompt=PROMPT, stream=True,
                                                          stream_options={"include_usage": True}))
        bare, _ = _streamed(client.completions.create(model="wbt-gpt", prompt=PROMPT, stream=True))
        batch, atext = asyncio.run(go())
    assert [choice.text for choice in best.choices] == [PROMPT + "echo: " + PROMPT] * 2
    assert text == bare == atext == "echo: " + PROMPT and usage.completion_tokens == 11
    assert [choice.index for choice in batch.choices] == [0, 1]
    rows = _calls(store)
    assert_matches_served(rows, fake_provider.served)
    assert [(row["wire"], row["stream"], row["settled"]) for row in rows] == [
        ("openai.completions", False, True), ("openai.completions", True, True),
        ("openai.completions", True, False), ("openai.completions", False, True), ("openai.completions", True, True)]
    # billed as reported: 3 completions of 11 tokens for n=2/best_of=3, 6 for each prompt of the batch
    assert [row["output_tokens"] for row in rows] == [33, 11, 0, 12, 11]
    assert [row["input_tokens"] for row in rows] == [10, 10, 0, 10 + 5, 10]
    assert rows[0]["output_text"] == PROMPT + "echo: " + PROMPT and rows[0]["stop_reason"] == "stop"
    assert (run.billed.calls, run.billed.unsettled, run.billed.output_tokens) == (4, 1, 67)  # calls settled, and the one that reported no usage
    assert run.billed.cost_micros == sum(row["cost_micros"] or 0 for row in rows)
    spans = store.rows("SELECT name, attributes FROM spans WHERE name LIKE 'text_completion%' ORDER BY start_time")
    assert [span["name"] for span in spans] == ["text_completion wbt-gpt"] * 5
    assert json.loads(spans[0]["attributes"])["gen_ai.operation.name"] == "text_completion"


def test_a_real_instruct_model_is_priced_by_the_price_library(store, fake_provider, fake_url):
    client, _ = _clients(fake_url)
    client.completions.create(model="gpt-3.5-turbo-instruct", prompt=PROMPT)
    row = store.one("SELECT * FROM calls")
    # OpenAI's price for gpt-3.5-turbo-instruct: $1.50 in, $2.00 out per million tokens, i.e. 150 and
    # 200 micro-cents a token (https://platform.openai.com/docs/pricing, legacy models)
    assert (row["input_tokens"], row["output_tokens"]) == (10, 11)
    assert row["cost_micros"] == 10 * 150 + 11 * 200
    assert row["price_source"].startswith("genai-prices")


def _anthropic_complete(client: httpx2.Client, url: str, stream: bool) -> str:
    body = {"model": "claude-2.1", "prompt": CLAUDE_PROMPT, "max_tokens_to_sample": 50, "stream": stream}
    headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
    if not stream:
        return client.post(url + "/v1/complete", json=body, headers=headers).json()["completion"]
    text = ""
    with client.stream("POST", url + "/v1/complete", json=body, headers=headers) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and '"completion"' in line:
                text += json.loads(line[6:])["completion"]
    return text


def test_anthropic_complete_is_recorded_unsettled_and_unpriced_never_estimated(store, fake_provider, fake_url):
    with workbench.run("claude-2") as run, workbench.http_client() as client:
        answers = [_anthropic_complete(client, fake_url, stream) for stream in (False, True)]
    assert answers == ["echo: Write a tagline for an ice cream shop."] * 2
    rows = _calls(store)
    assert_matches_served(rows, fake_provider.served)  # served with no usage: unsettled rows, no cost
    assert [(row["wire"], row["provider"], row["stream"], row["output_text"], row["stop_reason"]) for row in rows] == [
        ("anthropic.complete", "anthropic", stream, answers[0], "stop_sequence") for stream in (False, True)]
    assert {(row["input_tokens"], row["output_tokens"], row["price_source"], row["error_type"]) for row in rows} == {
        (0, 0, None, None)}
    assert (run.billed.calls, run.billed.unsettled, run.billed.cost_micros) == (0, 2, 0)  # nothing billed, 2 unsettled
    spans = store.rows("SELECT name FROM spans WHERE name LIKE 'text_completion%'")
    assert [span["name"] for span in spans] == ["text_completion claude-2.1"] * 2


def test_legacy_completions_replay_offline_from_a_recorded_cassette(store, tmp_path):
    cassette = tmp_path / "legacy.json"

    def drive(url: str, mode: str) -> list[str]:
        client = workbench.http_client(cassette=cassette, mode=mode)
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, http_client=client)
        answer = sdk.completions.create(model="wbt-gpt", prompt=PROMPT).choices[0].text
        text, _ = _streamed(sdk.completions.create(model="wbt-gpt", prompt=PROMPT, stream=True,
                                                   stream_options={"include_usage": True}))
        return [answer, text, *(_anthropic_complete(client, url, stream) for stream in (False, True))]

    with serve(FakeProvider()) as url:
        live = drive(url, "record")
    assert drive(url, "replay") == live  # the server is gone: every answer comes from the cassette
    rows = _calls(store)
    assert [row["replayed"] for row in rows] == [False] * 4 + [True] * 4
    fields = ("wire", "stream", "settled", "input_tokens", "output_tokens", "cost_micros", "output_text")
    assert [{name: row[name] for name in fields} for row in rows[4:]] == [
        {name: row[name] for name in fields} for row in rows[:4]]


def test_litellm_text_completion_to_anthropic_is_recorded_without_its_estimated_usage(store, fake_provider, fake_url,
                                                                                      monkeypatch):
    """LiteLLM's `anthropic_text/` route sends `/v1/complete` and fills in a usage of its own (counted
    with a tokenizer, not billed by Anthropic): the store keeps the call unsettled, never that estimate."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price map fetched from the network
    import litellm

    workbench.instrument()
    try:
        with workbench.run("litellm-claude-2") as run:
            answer = litellm.text_completion(model="anthropic_text/claude-2.1", prompt="Hello there", max_tokens=50,
                                             api_base=fake_url + "/v1/complete", api_key="sk-ant-test")
    finally:
        workbench.uninstrument()
    assert answer.choices[0].text.startswith("echo: ") and answer.usage.prompt_tokens > 0  # LiteLLM's estimate
    (row,) = _calls(store)
    assert_matches_served([row], fake_provider.served)
    assert (row["wire"], row["settled"], row["input_tokens"], row["cost_micros"]) == ("anthropic.complete", False, 0, None)
    assert (run.billed.calls, run.billed.unsettled) == (0, 1)
