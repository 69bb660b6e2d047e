"""Anthropic's legacy Text Completions (`POST /v1/complete`: `claude-2.x`, `claude-instant-1.x`, in
old traffic and old cassettes; Anthropic's current SDKs no longer send it).

The answer is `{"type": "completion", "id", "completion", "stop_reason", "model"}` (before API version
2023-06-01 also `stop`, `log_id`, `exception`, `truncated`). `stop_reason` is `stop_sequence` or
`max_tokens`. Errors have the Messages shape (`{"type": "error", "error": {...}}`).

The API reports NO token usage, in the body, the stream or a header: so such a call is never
settled and never priced. It is stored with its model, text and stop reason, `settled = false` and
`price_source = null`, and counted in a run's bill as unsettled, exactly as a call that was cut
before its usage arrived; its tokens are never estimated from the prompt's length (a tokenizer's
count is not what Anthropic billed). Pricing such traffic needs the provider's own usage export.

A stream (since 2023-06-01) is named events: `completion` events whose `completion` is a text delta,
`ping`, and `error`; the last `completion` event carries the stop reason, and no end marker follows.
Before 2023-06-01 it was unnamed `data:` events whose `completion` held the whole text so far, ended
by `data: [DONE]`: such an event (no `type`) replaces the text instead of adding to it. A stream is
complete at the event with a stop reason (or `[DONE]`): there is no usage to wait for."""

from __future__ import annotations

from workbench.wire.anthropic_messages import _error  # the same error shape as Messages
from workbench.wire.call import Call
from workbench.wire.sse import Event

__all__ = ["fill_json", "fill_stream", "is_complete"]


def fill_json(call: Call, body: dict) -> None:
    if body.get("type") == "error":
        _error(call, body)
        return
    call.response_id = body.get("id")
    call.model_served = body.get("model")
    call.stop_reason = body.get("stop_reason")
    call.output_text = body.get("completion") if isinstance(body.get("completion"), str) else None


def fill_stream(call: Call, events: list[Event]) -> None:
    text = ""
    for event in events:
        data = event.json()
        if not isinstance(data, dict):
            continue
        if data.get("type") == "error" or event.event == "error":
            _error(call, data)
            continue
        if not isinstance(data.get("completion"), str):
            continue  # a ping
        call.response_id = call.response_id or data.get("id") or data.get("log_id")
        call.model_served = call.model_served or data.get("model")
        # since 2023-06-01 each event is a delta; before it (no `type`), the whole text so far
        text = text + data["completion"] if data.get("type") == "completion" else data["completion"]
        call.stop_reason = data.get("stop_reason") or call.stop_reason
    call.output_text = text or None


def is_complete(events: list[Event]) -> bool:
    for event in events:
        if event.data.strip() == "[DONE]":
            return True
        data = event.json()
        if isinstance(data, dict) and data.get("stop_reason"):
            return True
    return False
