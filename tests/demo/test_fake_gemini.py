"""The fake provider speaks Gemini's generateContent well enough for the REAL google-genai SDK, over
real HTTP: the model from the URL, usage as Gemini counts it (cached tokens inside the prompt count,
thoughts apart from the candidates), a stream whose usage is a running count until its last chunk,
function calls, truncation at `maxOutputTokens`, and Google's error shape."""

from __future__ import annotations

import pytest
from google import genai
from google.genai import errors, types

from workbench.demo.fake_provider import Reply, count_tokens

MODEL = "gemini-test"


@pytest.fixture
def client(fake_url: str) -> genai.Client:
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=fake_url))


def test_json_echo_and_usage(client, fake_provider):
    fake_provider.script(Reply(text="echo: hello there", reasoning_tokens=6))
    response = client.models.generate_content(model=MODEL, contents="hello there")
    usage = response.usage_metadata
    assert (response.text, response.model_version, response.candidates[0].finish_reason) == (
        "echo: hello there", MODEL, types.FinishReason.STOP)
    assert usage.prompt_token_count == count_tokens('user: [{"text":"hello there"}]')
    assert (usage.candidates_token_count, usage.thoughts_token_count) == (count_tokens("echo: hello there"), 6)
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count + 6
    [request] = fake_provider.requests
    assert request.path.endswith(f"/models/{MODEL}:generateContent")
    assert fake_provider.served[0].usage["output_tokens"] == usage.candidates_token_count + 6


def test_stream_carries_a_running_count_until_the_last_chunk(client, fake_provider):
    fake_provider.script(Reply(text="one two three four", reasoning_tokens=2))
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="count"))
    assert "".join(chunk.text for chunk in chunks) == "one two three four"
    counts = [chunk.usage_metadata.candidates_token_count for chunk in chunks]
    assert counts == sorted(counts) and counts[-1] == count_tokens("one two three four")
    assert [chunk.candidates[0].finish_reason for chunk in chunks][-1] == types.FinishReason.STOP
    assert all(chunk.candidates[0].finish_reason is None for chunk in chunks[:-1])
    assert fake_provider.requests[0].path.endswith(":streamGenerateContent?alt=sse")
    assert fake_provider.served[0].stream is True


def test_function_calls_and_implicit_caching(client, fake_provider):
    fake_provider.script(Reply(tool_calls=[("get_weather", {"city": "Paris"})]),
                         Reply(tool_calls=[("get_weather", {"city": "Rome"})]))
    config = types.GenerateContentConfig(system_instruction="Be brief. " * 500)
    first = client.models.generate_content(model=MODEL, contents="Weather?", config=config)
    second = client.models.generate_content(model=MODEL, contents="Weather?", config=config)
    assert [(call.name, call.args) for call in first.function_calls] == [("get_weather", {"city": "Paris"})]
    assert first.usage_metadata.cached_content_token_count is None
    cached = second.usage_metadata.cached_content_token_count
    assert 1024 <= cached <= second.usage_metadata.prompt_token_count
    assert fake_provider.served[1].usage["cache_read_tokens"] == cached
    assert fake_provider.served[1].usage["input_tokens"] == second.usage_metadata.prompt_token_count - cached


def test_max_output_tokens_cuts_the_text(client, fake_provider):
    fake_provider.script(Reply(text="word " * 40))
    response = client.models.generate_content(
        model=MODEL, contents="long", config=types.GenerateContentConfig(max_output_tokens=5))
    assert response.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert response.usage_metadata.candidates_token_count <= 5 and len(response.text) <= 20


def test_errors_come_in_googles_shape(client, fake_provider):
    fake_provider.script(Reply(status=429, error_message="Resource has been exhausted"))
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents="x")
    assert (caught.value.code, caught.value.status, caught.value.message) == (
        429, "RESOURCE_EXHAUSTED", "Resource has been exhausted")
