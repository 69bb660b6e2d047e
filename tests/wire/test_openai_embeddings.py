"""The embeddings wire: input tokens only, priced at the input rate; no usage is unsettled."""

from __future__ import annotations

import json

from workbench.wire import Exchange, parse_exchange, wire_of

URL = "https://api.openai.com/v1/embeddings"


def _call(body: dict, status: int = 200):
    return parse_exchange(Exchange(
        method="POST", url=URL, request_headers={}, request_body=json.dumps({"model": "text-embedding-3-small",
                                                                              "input": ["a", "b"]}).encode(),
        status=status, response_headers={"content-type": "application/json"}, response_body=json.dumps(body).encode()))


def test_embeddings_usage_is_input_tokens_only():
    assert wire_of("POST", URL) == "openai.embeddings"
    call = _call({"object": "list", "model": "text-embedding-3-small", "data": [],
                  "usage": {"prompt_tokens": 7, "total_tokens": 7}})
    assert (call.wire, call.provider, call.model_served, call.settled, call.stream) == (
        "openai.embeddings", "openai", "text-embedding-3-small", True, False)
    usage = call.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens,
            usage.reasoning_tokens) == (7, 0, 0, 0, 0)


def test_embeddings_without_usage_are_unsettled_and_errors_keep_their_type():
    assert _call({"object": "list", "model": "m", "data": []}).settled is False
    error = _call({"error": {"type": "invalid_request_error", "message": "bad input"}}, status=400)
    assert (error.settled, error.error_type, error.error_message) == (False, "invalid_request_error", "bad input")
