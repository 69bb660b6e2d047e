"""A run's transcript from its calls' recorded bodies: the messages each request added, the tool
calls and results, and what the model answered. Pure functions over JSON text, one reader per wire;
a body that was cut at the size cap or is not JSON is shown as what it is, never guessed at."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    role: str  # system, user, assistant, tool
    kind: str  # text, tool_call, tool_result, raw
    text: str
    name: str = ""


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(filter(None, (_text(part) for part in content)))
    if isinstance(content, dict):
        for key in ("text", "input_text", "output_text", "content", "refusal"):
            if key in content and content[key] is not None:
                return _text(content[key])
        return json.dumps(content)
    return str(content)


def _args(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _openai_chat(request: dict) -> list[Entry]:
    out = []
    for message in request.get("messages") or []:
        role = message.get("role", "?")
        if role == "tool":
            out.append(Entry("tool", "tool_result", _text(message.get("content")), message.get("tool_call_id") or ""))
            continue
        if message.get("content"):
            out.append(Entry("system" if role == "developer" else role, "text", _text(message.get("content"))))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            out.append(Entry(role, "tool_call", _args(function.get("arguments", "")), function.get("name", "?")))
    return out


def _anthropic(request: dict) -> list[Entry]:
    out = []
    if request.get("system"):
        out.append(Entry("system", "text", _text(request["system"])))
    for message in request.get("messages") or []:
        role = message.get("role", "?")
        content = message.get("content")
        for block in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            kind = block.get("type") if isinstance(block, dict) else "text"
            if kind == "tool_use":
                out.append(Entry(role, "tool_call", _args(block.get("input", {})), block.get("name", "?")))
            elif kind == "tool_result":
                out.append(Entry("tool", "tool_result", _text(block.get("content")), block.get("tool_use_id") or ""))
            elif kind in ("text", None):
                out.append(Entry(role, "text", _text(block)))
            else:
                out.append(Entry(role, "raw", json.dumps(block)[:2000], kind or ""))
    return out


def _openai_responses(request: dict) -> list[Entry]:
    out = []
    if request.get("instructions"):
        out.append(Entry("system", "text", _text(request["instructions"])))
    items = request.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        kind = item.get("type", "message")
        if kind == "function_call":
            out.append(Entry("assistant", "tool_call", _args(item.get("arguments", "")), item.get("name", "?")))
        elif kind == "function_call_output":
            out.append(Entry("tool", "tool_result", _text(item.get("output")), item.get("call_id") or ""))
        elif kind == "message":
            role = item.get("role", "?")
            out.append(Entry("system" if role == "developer" else role, "text", _text(item.get("content"))))
        else:
            out.append(Entry("assistant", "raw", json.dumps(item)[:2000], kind))
    return out


_READERS = {"openai.chat": _openai_chat, "anthropic.messages": _anthropic, "openai.responses": _openai_responses}


def request_entries(wire: str | None, request_json: str | None) -> list[Entry]:
    """The conversation a request sent, as entries; a body that cannot be read is one raw entry."""
    if not request_json:
        return []
    try:
        request = json.loads(request_json)
        reader = _READERS.get(wire or "")
        if reader is None or not isinstance(request, dict):
            raise ValueError(wire)
        return reader(request)
    except (ValueError, TypeError, AttributeError):
        return [Entry("user", "raw", request_json[:4000], "request body")]


def response_entries(output_text: str | None, tool_calls_json: str | None) -> list[Entry]:
    """What the model answered, from the normalized output text and tool calls (any wire, streamed or not)."""
    out = [Entry("assistant", "text", output_text)] if output_text else []
    try:
        calls = json.loads(tool_calls_json) if tool_calls_json else []
    except ValueError:
        calls = []
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            out.append(Entry("assistant", "tool_call", call.get("arguments") or "", call.get("name") or "?"))
    return out


def turns(calls: list[dict]) -> list[tuple[dict, list[Entry], list[Entry]]]:
    """Per call, in order: the entries its request added to the conversation (everything, when the
    conversation does not continue the previous call's) and the entries of its response."""
    out = []
    previous: list[Entry] = []
    for call in calls:
        sent = request_entries(call.get("wire"), call.get("request_json"))
        answered = response_entries(call.get("output_text"), call.get("tool_calls"))
        new = sent
        if previous and sent[: len(previous)] == previous:
            new = sent[len(previous):]
            # the previous answer usually comes back as the first thing sent: skip it
            skip = 0
            while skip < len(new) and new[skip].role == "assistant":
                skip += 1
            new = new[skip:]
        out.append((call, new, answered))
        previous = sent
    return out
