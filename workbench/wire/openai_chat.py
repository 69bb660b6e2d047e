"""OpenAI chat-completions (and the compatible hosts: OpenRouter, Groq, Mistral, DeepSeek, Azure).

`prompt_tokens` INCLUDES `prompt_tokens_details.cached_tokens` (and the newer `cache_write_tokens`),
so the uncached input is what is left after both are taken out.

A stream is complete at `data: [DONE]`, or once its usage is final: a chunk carrying `usage` at or
after the chunk with the `finish_reason` (OpenAI sends it last, with no choices, when
`stream_options.include_usage` asks). Usage seen before any finish reason (servers that report a
running count on every chunk) is not final."""

from __future__ import annotations

from workbench.models import Usage
from workbench.wire.call import Call, ToolCall
from workbench.wire.sse import Event


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(usage: dict) -> Usage:
    prompt = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    cached = _int(prompt.get("cached_tokens"))
    written = _int(prompt.get("cache_write_tokens"))
    return Usage(
        input_tokens=max(_int(usage.get("prompt_tokens")) - cached - written, 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        output_tokens=_int(usage.get("completion_tokens")),
        reasoning_tokens=_int(completion.get("reasoning_tokens")),
    )


def _settle(call: Call, usage) -> None:
    if isinstance(usage, dict):
        call.usage = usage_of(usage)
        call.settled = True
        if usage.get("cost") is not None:  # OpenRouter reports its own charge
            call.provider_cost = str(usage["cost"])


def fill_json(call: Call, body: dict) -> None:
    call.response_id = body.get("id")
    call.model_served = body.get("model")
    choices = body.get("choices") or []
    for choice in choices:
        message = choice.get("message") or {}
        for tool in message.get("tool_calls") or []:
            call.tool_calls.append(_tool_call(tool))
        if isinstance(message.get("function_call"), dict):  # the legacy single-function form
            call.tool_calls.append(_tool_call({"function": message["function_call"]}))
    if choices:
        first = choices[0]
        call.stop_reason = first.get("finish_reason")
        message = first.get("message") or {}
        call.output_text = message.get("content") if isinstance(message.get("content"), str) else None
        call.refusal = message.get("refusal")
    _settle(call, body.get("usage"))
    if isinstance(body.get("error"), dict):  # some compatible hosts answer 200 with an error
        call.error_type = body["error"].get("type") or str(body["error"].get("code"))
        call.error_message = body["error"].get("message")


def _tool_call(tool: dict) -> ToolCall:
    function = tool.get("function") or tool.get("custom") or {}
    arguments = function.get("arguments", function.get("input", ""))
    return ToolCall(id=tool.get("id"), name=function.get("name") or "", arguments=arguments or "")


def fill_stream(call: Call, events: list[Event]) -> None:
    text: list[str] = []
    refusal: list[str] = []
    tools: dict[tuple[int, int], dict] = {}
    for event in events:
        if event.data.strip() == "[DONE]":
            continue
        chunk = event.json()
        if not isinstance(chunk, dict):
            continue
        if isinstance(chunk.get("error"), dict):
            call.error_type = chunk["error"].get("type") or str(chunk["error"].get("code"))
            call.error_message = chunk["error"].get("message")
        call.response_id = call.response_id or chunk.get("id")
        call.model_served = call.model_served or chunk.get("model")
        for choice in chunk.get("choices") or []:
            index = choice.get("index", 0)
            delta = choice.get("delta") or {}
            legacy = delta.get("function_call")
            tool_deltas = delta.get("tool_calls") or ([{"index": 0, "function": legacy}] if isinstance(legacy, dict) else [])
            for tool in tool_deltas:
                slot = tools.setdefault((index, tool.get("index", 0)), {"id": None, "name": "", "arguments": ""})
                slot["id"] = slot["id"] or tool.get("id")
                function = tool.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            if index == 0:
                if isinstance(delta.get("content"), str):
                    text.append(delta["content"])
                if isinstance(delta.get("refusal"), str):
                    refusal.append(delta["refusal"])
                if choice.get("finish_reason"):
                    call.stop_reason = choice["finish_reason"]
        _settle(call, chunk.get("usage"))
        groq = chunk.get("x_groq")
        if isinstance(groq, dict):
            _settle(call, groq.get("usage"))
    call.output_text = "".join(text) if text else None
    call.refusal = "".join(refusal) if refusal else None
    call.tool_calls = [ToolCall(**tools[key]) for key in sorted(tools)]


def is_complete(events: list[Event]) -> bool:
    finished = False
    for event in events:
        if event.data.strip() == "[DONE]":
            return True
        chunk = event.json()
        if not isinstance(chunk, dict):
            continue
        finished = finished or any(isinstance(choice, dict) and choice.get("finish_reason")
                                   for choice in chunk.get("choices") or [])
        if finished and isinstance(chunk.get("usage"), dict):
            return True
    return False
