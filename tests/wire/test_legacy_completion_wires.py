"""The legacy completions wires: OpenAI's `/v1/completions` (usage as chat, text in `choices[].text`,
stream usage only on request) and Anthropic's `/v1/complete` (no usage ever: unsettled, unpriced)."""

from __future__ import annotations

import json

from workbench.models import ModelRegistry
from workbench.wire import Exchange, is_complete, parse_exchange, priced, wire_of

OPENAI = "https://api.openai.com/v1/completions"
ANTHROPIC = "https://api.anthropic.com/v1/complete"


def _call(url: str, request: dict, body, status: int = 200, sse: bool = False):
    response = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_exchange(Exchange(
        method="POST", url=url, request_body=json.dumps(request).encode(), status=status,
        response_headers={"content-type": "text/event-stream" if sse else "application/json"}, response_body=response))


def _sse(*events: tuple[str | None, object]) -> bytes:
    return b"".join(((f"event: {name}\n" if name else "") + "data: "
                     + (data if isinstance(data, str) else json.dumps(data)) + "\n\n").encode() for name, data in events)


def test_the_legacy_paths_have_their_own_wires_and_chat_keeps_its_own():
    assert wire_of("POST", OPENAI) == "openai.completions"
    assert wire_of("POST", "https://x.openai.azure.com/openai/deployments/d/completions?api-version=2024-02-01") == \
        "openai.completions"
    assert wire_of("POST", "https://api.openai.com/v1/chat/completions") == "openai.chat"
    assert wire_of("POST", ANTHROPIC) == "anthropic.complete"
    assert wire_of("GET", OPENAI) == "unknown"


def test_openai_completion_usage_text_and_choice_zero():
    request = {"model": "gpt-3.5-turbo-instruct", "prompt": "Say hi", "n": 2}
    call = _call(OPENAI, request, {
        "id": "cmpl-1", "object": "text_completion", "model": "gpt-3.5-turbo-instruct",
        "choices": [{"text": " hi", "index": 0, "finish_reason": "stop"},
                    {"text": " hello there", "index": 1, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12,
                  "prompt_tokens_details": {"cached_tokens": 2}}})
    assert (call.wire, call.provider, call.response_id, call.model_served) == (
        "openai.completions", "openai", "cmpl-1", "gpt-3.5-turbo-instruct")
    assert (call.output_text, call.stop_reason, call.settled) == (" hi", "stop", True)
    # prompt_tokens includes the cached part; completion_tokens counts every choice generated
    usage = call.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (1, 2, 9)


def test_openai_completion_without_usage_is_unsettled_and_an_error_keeps_its_type():
    assert _call(OPENAI, {"model": "m"}, {"id": "c", "choices": [{"text": "x", "index": 0}]}).settled is False
    error = _call(OPENAI, {"model": "m"}, {"error": {"type": "invalid_request_error", "message": "bad"}}, status=400)
    assert (error.settled, error.error_type, error.error_message) == (False, "invalid_request_error", "bad")


def _chunk(text: str, finish=None, index: int = 0) -> tuple[None, dict]:
    return None, {"id": "cmpl-s", "object": "text_completion", "model": "davinci-002",
                  "choices": [{"text": text, "index": index, "logprobs": None, "finish_reason": finish}]}


USAGE = (None, {"id": "cmpl-s", "object": "text_completion", "model": "davinci-002", "choices": [],
                "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}})


def test_openai_completion_stream_joins_choice_zero_and_settles_only_with_a_usage_chunk():
    request = {"model": "davinci-002", "prompt": "p", "stream": True, "stream_options": {"include_usage": True}}
    body = _sse(_chunk("Hel"), _chunk("other", index=1), _chunk("lo", "length"), USAGE, (None, "[DONE]"))
    call = _call(OPENAI, request, body, sse=True)
    assert (call.stream, call.output_text, call.stop_reason, call.response_id) == (True, "Hello", "length", "cmpl-s")
    assert (call.settled, call.usage.input_tokens, call.usage.output_tokens) == (True, 4, 2)
    bare = _call(OPENAI, {**request, "stream_options": None}, _sse(_chunk("Hi", "stop"), (None, "[DONE]")), sse=True)
    assert (bare.output_text, bare.settled, bare.usage.output_tokens) == ("Hi", False, 0)


def test_openai_completion_stream_is_complete_at_done_or_at_usage_after_the_finish():
    assert is_complete("openai.completions", _sse(_chunk("a"), _chunk("b", "stop"), (None, "[DONE]")))
    assert is_complete("openai.completions", _sse(_chunk("a", "stop"), USAGE))
    assert not is_complete("openai.completions", _sse(_chunk("a"), _chunk("b", "stop")))


def test_anthropic_complete_reports_no_usage_so_it_is_unsettled_and_unpriced():
    request = {"model": "claude-2.1", "prompt": "\n\nHuman: Hi\n\nAssistant:", "max_tokens_to_sample": 20}
    call = _call(ANTHROPIC, request, {"type": "completion", "id": "compl_1", "completion": " Hello!",
                                      "stop_reason": "stop_sequence", "model": "claude-2.1"})
    assert (call.wire, call.provider, call.response_id, call.output_text, call.stop_reason) == (
        "anthropic.complete", "anthropic", "compl_1", " Hello!", "stop_sequence")
    assert (call.settled, call.error_type, call.usage.input_tokens, call.usage.output_tokens) == (False, None, 0, 0)
    # claude-2.1 has a price; a call without usage is still not priced (never priced at zero)
    assert (priced(call, ModelRegistry()).cost_micros, call.price_source) == (None, None)


def test_anthropic_complete_errors_have_the_messages_shape():
    call = _call(ANTHROPIC, {"model": "claude-2.1"}, {"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}}, status=529)
    assert (call.error_type, call.error_message, call.settled) == ("overloaded_error", "Overloaded", False)


def _completion(text: str, stop=None) -> tuple[str, dict]:
    return "completion", {"type": "completion", "id": "compl_s", "completion": text, "stop_reason": stop,
                          "model": "claude-2.0"}


def test_anthropic_complete_stream_adds_deltas_and_is_complete_at_the_stop_reason():
    body = _sse(_completion(" Hello"), ("ping", {"type": "ping"}), _completion("!"), _completion("", "stop_sequence"))
    call = _call(ANTHROPIC, {"model": "claude-2.0", "stream": True}, body, sse=True)
    assert (call.stream, call.output_text, call.stop_reason, call.model_served, call.settled) == (
        True, " Hello!", "stop_sequence", "claude-2.0", False)
    assert is_complete("anthropic.complete", body)
    assert not is_complete("anthropic.complete", _sse(_completion(" Hello"), ("ping", {"type": "ping"})))


def test_anthropic_complete_stream_before_2023_06_01_carries_the_whole_text_so_far():
    old = [(None, {"completion": " Hello", "stop_reason": None, "model": "claude-v1", "log_id": "l1"}),
           (None, {"completion": " Hello there", "stop_reason": "stop_sequence", "model": "claude-v1", "log_id": "l1"}),
           (None, "[DONE]")]
    call = _call(ANTHROPIC, {"model": "claude-v1", "stream": True}, _sse(*old), sse=True)
    assert (call.output_text, call.stop_reason, call.response_id) == (" Hello there", "stop_sequence", "l1")
    assert is_complete("anthropic.complete", _sse(*old))


def test_an_error_event_in_an_anthropic_complete_stream_is_kept():
    body = _sse(_completion(" Hi"), ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                          "message": "Overloaded"}}))
    call = _call(ANTHROPIC, {"model": "claude-2.0", "stream": True}, body, sse=True)
    assert (call.output_text, call.error_type, call.settled) == (" Hi", "overloaded_error", False)


def test_the_legacy_openai_models_are_priced_at_openais_published_rates():
    """OpenAI's prices per million tokens (https://platform.openai.com/docs/pricing, legacy models):
    gpt-3.5-turbo-instruct $1.50 in / $2.00 out, davinci-002 $2.00 / $2.00, babbage-002 $0.40 / $0.40,
    i.e. 150/200, 200/200 and 40/40 micro-cents a token; read from the bundled price library."""
    rates = {"gpt-3.5-turbo-instruct": (150, 200), "davinci-002": (200, 200), "babbage-002": (40, 40)}
    for model, (per_input, per_output) in rates.items():
        call = _call(OPENAI, {"model": model, "prompt": "p"}, {"id": "c", "model": model, "choices": [],
                                                               "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
        priced(call, ModelRegistry())
        assert (call.cost_micros, call.price_source.split(":")[-1]) == (7 * per_input + 3 * per_output, f"openai/{model}")
