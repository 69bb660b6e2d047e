"""OpenAI Responses. There is no finish_reason: the stop reason is `status`, or
`incomplete_details.reason` when the status is `incomplete`. `input_tokens` INCLUDES
`input_tokens_details.cached_tokens`."""

from __future__ import annotations

from workbench.models import Usage
from workbench.wire.call import Call, ToolCall
from workbench.wire.openai_chat import _int
from workbench.wire.sse import Event

_TOOL_ITEMS = {"function_call", "custom_tool_call"}
_FINAL_EVENTS = {"response.completed", "response.incomplete", "response.failed"}


def usage_of(usage: dict) -> Usage:
    details = usage.get("input_tokens_details") or {}
    output = usage.get("output_tokens_details") or {}
    cached = _int(details.get("cached_tokens"))
    written = _int(details.get("cache_write_tokens"))
    return Usage(
        input_tokens=max(_int(usage.get("input_tokens")) - cached - written, 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        output_tokens=_int(usage.get("output_tokens")),
        reasoning_tokens=_int(output.get("reasoning_tokens")),
    )


def _tool_call(item: dict) -> ToolCall:
    return ToolCall(
        id=item.get("call_id") or item.get("id"),
        name=item.get("name") or "",
        arguments=item.get("arguments", item.get("input", "")) or "",
    )


def _output_text(items: list) -> str | None:
    texts = [
        part.get("text", "")
        for item in items
        if isinstance(item, dict) and item.get("type") == "message"
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") == "output_text"
    ]
    return "".join(texts) if texts else None


def _refusal(items: list) -> str | None:
    for item in items:
        for part in (item.get("content") or []) if isinstance(item, dict) else []:
            if isinstance(part, dict) and part.get("type") == "refusal":
                return part.get("refusal")
    return None


def fill_json(call: Call, body: dict) -> None:
    """Fill from a response object (the JSON body, or the `response` of a final stream event)."""
    call.response_id = body.get("id") or call.response_id
    call.model_served = body.get("model") or call.model_served
    status = body.get("status")
    if status == "incomplete":
        call.stop_reason = (body.get("incomplete_details") or {}).get("reason") or status
    else:
        call.stop_reason = status
    items = [item for item in body.get("output") or [] if isinstance(item, dict)]
    call.tool_calls = [_tool_call(item) for item in items if item.get("type") in _TOOL_ITEMS]
    call.output_text = _output_text(items)
    call.refusal = _refusal(items)
    if isinstance(body.get("error"), dict):
        call.error_type = body["error"].get("type") or body["error"].get("code")
        call.error_message = body["error"].get("message")
    if isinstance(body.get("usage"), dict):
        call.usage = usage_of(body["usage"])
        call.settled = True


def fill_stream(call: Call, events: list[Event]) -> None:
    done_items: list[dict] = []
    final = False
    for event in events:
        data = event.json()
        if not isinstance(data, dict):
            continue
        kind = data.get("type") or event.event
        response = data.get("response")
        if kind in _FINAL_EVENTS and isinstance(response, dict):
            fill_json(call, response)
            final = True
        elif kind == "response.created" and isinstance(response, dict):
            call.response_id = response.get("id")
            call.model_served = response.get("model")
        elif kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            done_items.append(data["item"])
        elif kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else data
            call.error_type = error.get("type") or error.get("code")
            call.error_message = error.get("message")
    if not final:
        call.tool_calls = [_tool_call(item) for item in done_items if item.get("type") in _TOOL_ITEMS]
        call.output_text = _output_text(done_items)


def is_complete(events: list[Event]) -> bool:
    return any((event.json() or {}).get("type") in _FINAL_EVENTS for event in events if event.data[:1] == "{")
