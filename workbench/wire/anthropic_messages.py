"""Anthropic Messages. `input_tokens` EXCLUDES cache reads and writes, so the counters map one to
one. A stream carries usage in `message_start` and the final `message_delta`: the latest wins.

A stream is complete once its usage is final: at the `message_delta` that carries it (sent once,
with the stop reason), not only at `message_stop`. Clients that stop reading there (LiteLLM does)
have received the whole answer and its bill; a stream stopped before it is abandoned."""

from __future__ import annotations

import json

from workbench.models import Usage
from workbench.wire.call import Call, ToolCall
from workbench.wire.openai_chat import _int
from workbench.wire.sse import Event

_COUNTERS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")


def usage_of(usage: dict) -> Usage:
    split = usage.get("cache_creation") or {}
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        cache_read_tokens=_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=_int(usage.get("cache_creation_input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_write_1h_tokens=_int(split.get("ephemeral_1h_input_tokens")),
    )


def _blocks(call: Call, content: list) -> None:
    texts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(block.get("text") or "")
        elif block.get("type") == "tool_use":
            call.tool_calls.append(
                ToolCall(id=block.get("id"), name=block.get("name") or "", arguments=json.dumps(block.get("input", {})))
            )
    call.output_text = "".join(texts) if texts else None


def _error(call: Call, body: dict) -> None:
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    call.error_type = error.get("type") or "error"
    call.error_message = error.get("message")


def fill_json(call: Call, body: dict) -> None:
    if body.get("type") == "error":
        _error(call, body)
        return
    call.response_id = body.get("id")
    call.model_served = body.get("model")
    call.stop_reason = body.get("stop_reason")
    _blocks(call, body.get("content") or [])
    if call.stop_reason == "refusal":
        call.refusal = call.output_text or "refusal"
    if isinstance(body.get("usage"), dict):
        call.usage = usage_of(body["usage"])
        call.settled = True


def fill_stream(call: Call, events: list[Event]) -> None:
    usage: dict = {}
    blocks: dict[int, dict] = {}
    delta_usage = False
    for event in events:
        data = event.json()
        if not isinstance(data, dict):
            continue
        kind = data.get("type") or event.event
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = data["message"]
            call.response_id = message.get("id")
            call.model_served = message.get("model")
            usage.update({k: v for k, v in (message.get("usage") or {}).items() if v is not None})
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            block = dict(data["content_block"])
            if block.get("type") == "tool_use":
                block["partial_json"] = ""
            blocks[data.get("index", len(blocks))] = block
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            block = blocks.setdefault(data.get("index", 0), {"type": "text", "text": ""})
            delta = data["delta"]
            if delta.get("type") == "text_delta":
                block["text"] = (block.get("text") or "") + (delta.get("text") or "")
            elif delta.get("type") == "input_json_delta":
                block["partial_json"] = (block.get("partial_json") or "") + (delta.get("partial_json") or "")
        elif kind == "message_delta":
            call.stop_reason = (data.get("delta") or {}).get("stop_reason") or call.stop_reason
            if isinstance(data.get("usage"), dict):
                usage.update({k: v for k, v in data["usage"].items() if v is not None})
                delta_usage = True
        elif kind == "error":
            _error(call, data)
    content = []
    for index in sorted(blocks):
        block = blocks[index]
        if block.get("type") == "tool_use":
            try:
                block["input"] = json.loads(block.pop("partial_json") or "{}")
            except json.JSONDecodeError:
                block["input"] = {}
        content.append(block)
    _blocks(call, content)
    if call.stop_reason == "refusal":
        call.refusal = call.output_text or "refusal"
    if delta_usage:
        call.usage = usage_of(usage)
        call.settled = True


def is_complete(events: list[Event]) -> bool:
    for event in events:
        if event.event == "message_stop" or '"message_stop"' in event.data:
            return True
        if event.event == "message_delta" or '"message_delta"' in event.data:
            data = event.json()
            if isinstance(data, dict) and data.get("type") == "message_delta" and isinstance(data.get("usage"), dict):
                return True
    return False
