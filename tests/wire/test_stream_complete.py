"""Where a stream is complete, per protocol: at its end marker, or once its usage is final."""

from __future__ import annotations

import json

from workbench.wire import is_complete


def _sse(*events: tuple[str | None, object]) -> bytes:
    return b"".join(((f"event: {name}\n" if name else "") + f"data: {json.dumps(data) if not isinstance(data, str) else data}\n\n").encode()
                    for name, data in events)


START = ("message_start", {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3, "output_tokens": 1}}})
DELTA = ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}})


def test_anthropic_is_complete_at_the_message_delta_with_usage_not_before():
    assert not is_complete("anthropic.messages", _sse(START))
    assert is_complete("anthropic.messages", _sse(START, DELTA))
    assert is_complete("anthropic.messages", _sse(START, ("message_stop", {"type": "message_stop"})))
    no_usage = ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    assert not is_complete("anthropic.messages", _sse(START, no_usage))


def _chunk(finish=None, usage=None, choices=True) -> tuple[None, dict]:
    return None, {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}] if choices else [], "usage": usage}


USAGE = {"prompt_tokens": 5, "completion_tokens": 2}


def test_chat_is_complete_at_done_or_at_usage_after_the_finish_reason():
    assert is_complete("openai.chat", _sse(_chunk(), (None, "[DONE]")))
    assert is_complete("openai.chat", _sse(_chunk(), _chunk("stop"), _chunk(usage=USAGE, choices=False)))
    assert is_complete("openai.chat", _sse(_chunk(), _chunk("stop", usage=USAGE)))  # usage in the last choice chunk
    assert not is_complete("openai.chat", _sse(_chunk(), _chunk("stop")))
    # a running count on every chunk (vLLM's continuous usage stats) is not final before the finish
    assert not is_complete("openai.chat", _sse(_chunk(usage=USAGE), _chunk(usage=USAGE)))


def test_responses_is_complete_at_its_final_event_only():
    created = ("response.created", {"type": "response.created", "response": {"id": "r"}})
    done = ("response.completed", {"type": "response.completed", "response": {"id": "r", "usage": {}}})
    assert not is_complete("openai.responses", _sse(created))
    assert is_complete("openai.responses", _sse(created, done))
