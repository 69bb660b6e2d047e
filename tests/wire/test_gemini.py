"""Gemini's generateContent wire: the model and the stream flag from the URL; `usageMetadata` made
disjoint (cached tokens out of the prompt, tool-use prompt tokens into the input, thoughts into the
output); a stream's running usage final only at its finish reason; function calls, blocked prompts
and Google's error shape; priced from the price library's Gemini rows."""

from __future__ import annotations

import json

from workbench.models import ModelRegistry
from workbench.wire import Exchange, is_complete, parse_exchange, priced, wire_of

BASE = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
USAGE = {"promptTokenCount": 1200, "cachedContentTokenCount": 1000, "toolUsePromptTokenCount": 50,
         "candidatesTokenCount": 30, "thoughtsTokenCount": 70, "totalTokenCount": 1350}


def _chunk(text: str | None = None, finish: str | None = None, usage: dict | None = None, **parts) -> dict:
    candidate: dict = {"content": {"role": "model", "parts": ([{"text": text}] if text is not None else [])
                                   + [{key: value} for key, value in parts.items()]}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash-001", "responseId": "resp-1",
            **({"usageMetadata": usage} if usage else {})}


def _call(body, url: str = BASE + ":generateContent", status: int = 200, content_type: str = "application/json"):
    text = body if isinstance(body, str) else json.dumps(body)
    return parse_exchange(Exchange(
        url=url + "?key=AIzaNotARealKey", request_body=b'{"contents": [{"parts": [{"text": "hi"}]}]}', status=status,
        response_headers={"content-type": content_type}, response_body=text.encode()))


def _sse(*chunks: dict) -> str:
    return "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in chunks)


def test_the_wire_and_the_model_come_from_the_url():
    assert wire_of("POST", BASE + ":generateContent") == wire_of("POST", BASE + ":streamGenerateContent?alt=sse") \
        == "google.gemini"
    assert wire_of("POST", BASE + ":countTokens") == "unknown"
    vertex = ("https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers/google/"
              "models/gemini-2.0-flash:generateContent")
    assert wire_of("POST", vertex) == "google.gemini"
    call = _call(_chunk("hello", "STOP", USAGE))
    assert (call.provider, call.model_requested, call.model_served, call.response_id, call.stream) == (
        "google", "gemini-2.5-flash", "gemini-2.5-flash-001", "resp-1", False)
    assert call.url.endswith("?key=%5Bredacted%5D") or call.url.endswith("?key=[redacted]")


def test_usage_is_made_disjoint():
    call = _call(_chunk("hello", "STOP", USAGE))
    usage = call.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens,
            usage.reasoning_tokens) == (1200 - 1000 + 50, 1000, 0, 30 + 70, 70)
    # the disjoint counters add up to the provider's own total
    assert usage.input_tokens + usage.cache_read_tokens + usage.output_tokens == USAGE["totalTokenCount"]
    assert (call.settled, call.stop_reason, call.output_text) == (True, "STOP", "hello")


def test_a_stream_settles_at_the_chunk_with_the_finish_reason():
    running = {"promptTokenCount": 10, "candidatesTokenCount": 3, "thoughtsTokenCount": 5}
    final = {"promptTokenCount": 10, "candidatesTokenCount": 9, "thoughtsTokenCount": 5}
    body = _sse(_chunk("Hel", usage=running), _chunk("lo", "STOP", final))
    url = BASE + ":streamGenerateContent"
    call = _call(body, url=url, content_type="text/event-stream")
    assert (call.stream, call.settled, call.output_text, call.usage.output_tokens, call.usage.reasoning_tokens) == (
        True, True, "Hello", 14, 5)
    cut = _sse(_chunk("Hel", usage=running))
    assert _call(cut, url=url, content_type="text/event-stream").settled is False  # a running count is not final
    assert wire_of("POST", url) == "google.gemini"
    assert is_complete("google.gemini", body.encode()) is True
    assert is_complete("google.gemini", cut.encode()) is False


def test_a_stream_asked_for_without_alt_sse_is_a_json_array():
    chunks = [_chunk("Hel", usage={"promptTokenCount": 4, "candidatesTokenCount": 1}),
              _chunk("lo", "STOP", {"promptTokenCount": 4, "candidatesTokenCount": 2})]
    call = _call(chunks, url=BASE + ":streamGenerateContent")
    assert (call.error_type, call.settled, call.output_text, call.usage.input_tokens, call.usage.output_tokens) == (
        None, True, "Hello", 4, 2)


def test_function_calls_are_tool_calls_and_thoughts_are_not_text():
    body = _chunk(None, "STOP", USAGE, functionCall={"name": "get_weather", "args": {"city": "Paris"}})
    body["candidates"][0]["content"]["parts"].insert(0, {"text": "let me think", "thought": True})
    call = _call(body)
    assert [(tool.name, json.loads(tool.arguments), tool.id) for tool in call.tool_calls] == [
        ("get_weather", {"city": "Paris"}, None)]
    assert call.output_text is None


def test_a_blocked_prompt_is_a_refusal_and_safety_stops_are_too():
    blocked = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
               "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12}, "modelVersion": "gemini-2.5-flash"}
    call = _call(blocked)
    assert (call.stop_reason, call.refusal, call.settled, call.usage.input_tokens, call.usage.output_tokens) == (
        "PROHIBITED_CONTENT", "PROHIBITED_CONTENT", True, 12, 0)
    assert _call(_chunk(None, "SAFETY", USAGE)).refusal == "SAFETY"


def test_errors_keep_googles_status_and_message():
    error = {"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}}
    call = _call(error, status=429)
    assert (call.error_type, call.error_message, call.settled) == ("RESOURCE_EXHAUSTED", "Resource has been exhausted",
                                                                   False)
    in_stream = _call(_sse(error), url=BASE + ":streamGenerateContent", content_type="text/event-stream")
    assert (in_stream.error_type, in_stream.settled) == ("RESOURCE_EXHAUSTED", False)


def test_gemini_calls_are_priced_from_the_library_with_cache_reads_and_thinking():
    registry = ModelRegistry()
    call = priced(_call(_chunk("hello", "STOP", USAGE)), registry)
    # gemini-2.5-flash: 30, 3 and 250 cents per million input, cached input and output (thinking
    # included) tokens, so tokens x cents per million is the cost in millionths of a cent
    expected = 250 * 30 + 1000 * 3 + 100 * 250
    assert (call.price_source.split(":")[1], call.currency) == ("google/gemini-2.5-flash", "USD")
    assert call.cost_micros == expected
