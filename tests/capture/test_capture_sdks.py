"""The REAL openai and anthropic SDKs, through workbench.http_client() / async_http_client(), over
real HTTP on 127.0.0.1 against the fake provider: every wire, sync and async, `stream=True` and the
SDK stream helpers. Each call is read back from DuckDB: every counter, the exact cost, the run, the
provider's ids and the span."""

from __future__ import annotations

import asyncio
import json

import anthropic
import openai
import pytest
from fixtures.capture_store import COUNTERS, expected_cost

import workbench
from workbench.demo.fake_provider import Reply

# distinct numbers, so a counter read from the wrong field cannot pass
USAGE_OPENAI = {"input_tokens": 1201, "cache_read_tokens": 384, "cache_write_tokens": 0,
                "output_tokens": 97, "reasoning_tokens": 31}
USAGE_ANTHROPIC = {"input_tokens": 1201, "cache_read_tokens": 384, "cache_write_tokens": 250,
                   "output_tokens": 97, "reasoning_tokens": 0}
MESSAGES = [{"role": "user", "content": "Say hello"}]
TEXT = "Hello there, this is the fake provider speaking."


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, http_client=workbench.http_client())


def _async_openai(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0,
                              http_client=workbench.async_http_client())


def _anthropic(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0, http_client=workbench.http_client())


def _async_anthropic(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0,
                                    http_client=workbench.async_http_client())


# --- one driver per (wire, mode): makes the call the way an application would, returns its text

def chat_json(url, model):
    return _openai(url).chat.completions.create(model=model, messages=MESSAGES).choices[0].message.content


def chat_stream(url, model):
    stream = _openai(url).chat.completions.create(
        model=model, messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def chat_helper(url, model):
    with _openai(url).chat.completions.stream(
        model=model, messages=MESSAGES, stream_options={"include_usage": True}
    ) as stream:
        return stream.get_final_completion().choices[0].message.content


def chat_async(url, model):
    async def go():
        client = _async_openai(url)
        return (await client.chat.completions.create(model=model, messages=MESSAGES)).choices[0].message.content

    return asyncio.run(go())


def chat_async_stream(url, model):
    async def go():
        client = _async_openai(url)
        stream = await client.chat.completions.create(
            model=model, messages=MESSAGES, stream=True, stream_options={"include_usage": True})
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    return asyncio.run(go())


def responses_json(url, model):
    return _openai(url).responses.create(model=model, input="Say hello").output_text


def responses_stream(url, model):
    text = []
    for event in _openai(url).responses.create(model=model, input="Say hello", stream=True):
        if event.type == "response.output_text.delta":
            text.append(event.delta)
    return "".join(text)


def responses_helper(url, model):
    with _openai(url).responses.stream(model=model, input="Say hello") as stream:
        return stream.get_final_response().output_text


def responses_async(url, model):
    async def go():
        return (await _async_openai(url).responses.create(model=model, input="Say hello")).output_text

    return asyncio.run(go())


def messages_json(url, model):
    return _anthropic(url).messages.create(model=model, max_tokens=500, messages=MESSAGES).content[0].text


def messages_stream(url, model):
    text = []
    for event in _anthropic(url).messages.create(model=model, max_tokens=500, messages=MESSAGES, stream=True):
        if event.type == "content_block_delta":
            text.append(event.delta.text)
    return "".join(text)


def messages_helper(url, model):
    with _anthropic(url).messages.stream(model=model, max_tokens=500, messages=MESSAGES) as stream:
        return stream.get_final_message().content[0].text


def messages_async(url, model):
    async def go():
        client = _async_anthropic(url)
        return (await client.messages.create(model=model, max_tokens=500, messages=MESSAGES)).content[0].text

    return asyncio.run(go())


def messages_async_helper(url, model):
    async def go():
        async with _async_anthropic(url).messages.stream(model=model, max_tokens=500, messages=MESSAGES) as stream:
            return (await stream.get_final_message()).content[0].text

    return asyncio.run(go())


CASES = [
    # driver, wire, model, streamed, response id, stop reason as stored
    (chat_json, "openai.chat", "wbt-gpt", False, "chatcmpl-fake000001", "stop"),
    (chat_stream, "openai.chat", "wbt-gpt", True, "chatcmpl-fake000001", "stop"),
    (chat_helper, "openai.chat", "wbt-mini", True, "chatcmpl-fake000001", "stop"),
    (chat_async, "openai.chat", "wbt-mini", False, "chatcmpl-fake000001", "stop"),
    (chat_async_stream, "openai.chat", "wbt-gpt", True, "chatcmpl-fake000001", "stop"),
    (responses_json, "openai.responses", "wbt-gpt", False, "resp_fake000001", "completed"),
    (responses_stream, "openai.responses", "wbt-mini", True, "resp_fake000001", "completed"),
    (responses_helper, "openai.responses", "wbt-gpt", True, "resp_fake000001", "completed"),
    (responses_async, "openai.responses", "wbt-mini", False, "resp_fake000001", "completed"),
    (messages_json, "anthropic.messages", "wbt-claude", False, "msg_fake000001", "end_turn"),
    (messages_stream, "anthropic.messages", "wbt-claude", True, "msg_fake000001", "end_turn"),
    (messages_helper, "anthropic.messages", "wbt-claude", True, "msg_fake000001", "end_turn"),
    (messages_async, "anthropic.messages", "wbt-claude", False, "msg_fake000001", "end_turn"),
    (messages_async_helper, "anthropic.messages", "wbt-claude", True, "msg_fake000001", "end_turn"),
]


@pytest.mark.parametrize(("driver", "wire", "model", "streamed", "response_id", "stop"), CASES,
                         ids=[case[0].__name__ for case in CASES])
def test_call_recorded_with_usage_cost_run_and_span(store, fake_provider, fake_url, driver, wire, model, streamed,
                                                    response_id, stop):
    usage = USAGE_ANTHROPIC if wire.startswith("anthropic") else USAGE_OPENAI
    fake_provider.script(Reply(text=TEXT, usage=usage))
    cost = expected_cost(model, usage)

    with workbench.run("wire-test", kind="app", case=driver.__name__) as run:
        assert driver(fake_url, model) == TEXT  # the application saw the whole answer

    [call] = store.calls()
    for name in COUNTERS:
        assert call[name] == usage[name], name
    assert call["cost_micros"] == cost
    assert call["price_source"] == f"{model}@2025-01-01"
    assert call["currency"] == "USD"
    assert (call["wire"], call["model_requested"], call["model_served"]) == (wire, model, model)
    assert call["stream"] is streamed
    assert call["settled"] is True and call["error_type"] is None and call["http_status"] == 200
    assert call["stop_reason"] == stop
    assert call["run_id"] == run.run_id
    assert call["request_id"] == "req_fake000001"
    assert call["response_id"] == response_id
    assert call["started_at"] <= call["first_byte_at"] <= call["ended_at"]
    assert call["request_hash"].startswith("wb1:")
    body = store.one("SELECT * FROM call_bodies WHERE call_id = ?", [call["call_id"]])
    assert json.loads(body["request_json"])["model"] == model
    assert body["output_text"] == TEXT

    # the bill, in Python and in the runs table
    billed = run.billed
    assert (billed.calls, billed.unsettled, billed.cost_micros) == (1, 0, cost)
    assert [getattr(billed, name) for name in COUNTERS] == [usage[name] for name in COUNTERS]
    run_row = store.one("SELECT * FROM runs WHERE run_id = ?", [run.run_id])
    assert run_row["status"] == "ok" and run_row["name"] == "wire-test"
    assert (run_row["billed_calls"], run_row["billed_unsettled"], run_row["billed_cost_micros"]) == (1, 0, cost)
    assert [run_row[f"billed_{name}"] for name in COUNTERS] == [usage[name] for name in COUNTERS]

    # the span: `chat {model}`, CLIENT, inside the run's span, with the GenAI attributes
    span = store.span(call["span_id"])
    assert span["name"] == f"chat {model}" and span["kind"] == "CLIENT"
    assert span["trace_id"] == call["trace_id"] == run_row["trace_id"]
    assert span["parent_span_id"] == call["parent_span_id"]
    if wire.startswith("anthropic"):
        # the anthropic SDK opens its own CLIENT span per API call; ours is inside it, inside the run's
        sdk_span = store.span(span["parent_span_id"])
        assert sdk_span["name"] == "anthropic.messages.create"
        assert sdk_span["parent_span_id"] == run_row["span_id"]
    else:
        assert span["parent_span_id"] == run_row["span_id"]
    run_span = store.span(run_row["span_id"])
    assert run_span["name"] == "run wire-test" and run_span["run_id"] == run.run_id
    attributes = json.loads(span["attributes"])
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == ("anthropic" if wire.startswith("anthropic") else "openai")
    assert attributes["gen_ai.request.model"] == attributes["gen_ai.response.model"] == model
    assert attributes["gen_ai.response.id"] == response_id
    # OpenTelemetry's input count INCLUDES cache reads and writes; our column does not
    assert attributes["gen_ai.usage.input_tokens"] == (
        usage["input_tokens"] + usage["cache_read_tokens"] + usage["cache_write_tokens"])
    assert attributes["gen_ai.usage.output_tokens"] == usage["output_tokens"]
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == usage["cache_read_tokens"]
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == usage["cache_write_tokens"]
    assert attributes["gen_ai.usage.reasoning.output_tokens"] == usage["reasoning_tokens"]
    assert attributes["workbench.cost_micros"] == cost
    assert attributes["workbench.replayed"] is False
    assert attributes["workbench.call_id"] == call["call_id"]
    assert attributes["gen_ai.response.finish_reasons"] == [stop]
    assert "error.type" not in attributes


def test_models_toml_prices(store, fake_provider, fake_url):
    """A call priced by the repository's models.toml row (gpt-4o-mini: scale 3, $0.150 / $0.075 / $0.600
    per million), the cost in micro-cents computed here from the TOML file itself."""
    import math
    import tomllib
    from fractions import Fraction
    from pathlib import Path

    rows = tomllib.loads((Path(__file__).resolve().parents[2] / "models.toml").read_text())["model"]
    row = next(row for row in rows if row["id"] == "gpt-4o-mini")
    workbench.register_model(**row)
    usage = {"input_tokens": 5000, "cache_read_tokens": 2048, "cache_write_tokens": 0, "output_tokens": 333,
             "reasoning_tokens": 0}
    fake_provider.script(Reply(text="ok", usage=usage))
    chat_json(fake_url, "gpt-4o-mini")
    [call] = store.calls()
    exact = Fraction(5000 * row["input"] + 2048 * row["cache_read"] + 333 * row["output"], 10 ** (row["scale"] - 2))
    assert call["cost_micros"] == math.ceil(exact)
    assert call["price_source"] == "gpt-4o-mini@2025-08-01"


def test_tool_calls_recorded(store, fake_provider, fake_url):
    fake_provider.script(Reply(tool_calls=[("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]))
    client = _anthropic(fake_url)
    message = client.messages.create(model="wbt-claude", max_tokens=100, messages=MESSAGES)
    assert [block.name for block in message.content] == ["get_weather", "get_time"]
    [call] = store.calls()
    assert call["tool_call_count"] == 2 and call["tool_names"] == ["get_weather", "get_time"]
    assert call["stop_reason"] == "tool_use"
    assert call["run_id"] is None  # outside any run
    body = store.one("SELECT tool_calls FROM call_bodies")
    assert [tool["name"] for tool in json.loads(body["tool_calls"])] == ["get_weather", "get_time"]


def test_unknown_model_is_unpriced_never_free(store, fake_provider, fake_url):
    fake_provider.script(Reply(text="ok"))
    with workbench.run("unpriced") as run:
        chat_json(fake_url, "no-such-model-xyz")
    [call] = store.calls()
    assert call["settled"] is True and call["output_tokens"] > 0
    assert call["cost_micros"] is None and call["price_source"] is None
    assert run.billed.unpriced_calls == 1 and run.billed.cost_micros == 0


def test_chat_stream_without_include_usage_is_unsettled(store, fake_provider, fake_url):
    fake_provider.script(Reply(text=TEXT))
    stream = _openai(fake_url).chat.completions.create(model="wbt-gpt", messages=MESSAGES, stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == TEXT
    [call] = store.calls()
    # never guessed: no usage reported, so not settled and not priced, but complete (no error)
    assert call["settled"] is False and call["cost_micros"] is None and call["error_type"] is None
    assert call["input_tokens"] == call["output_tokens"] == 0
