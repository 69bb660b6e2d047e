"""The runtime's provider-neutral conversation: what a turn asks for and what it got back.

Providers turn a `ModelRequest` into their own wire body and a response into a `Completion`; nothing
else in the runtime knows a wire format. Messages are frozen, so a kept turn is the same value —
and therefore the same request bytes — turn after turn."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, Union

from workbench.models import Usage
from workbench.wire.call import Call

# normalized stop: the wire's own spelling is kept in `Completion.stop_reason`
Stop = Literal["end", "tool", "length", "refusal", "other"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description and the JSON Schema of its input."""

    name: str
    description: str
    schema: dict


@dataclass(frozen=True)
class ToolUse:
    """One tool call the model made: its id, the tool name and the raw JSON arguments."""

    id: str
    name: str
    arguments: str  # the JSON text as the model produced it

    def args(self) -> dict:
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class UserMessage:
    parts: tuple[str, ...]  # text blocks, in order (the task, then a compaction summary if any)


@dataclass(frozen=True)
class AssistantMessage:
    text: str | None
    tool_uses: tuple[ToolUse, ...] = ()


@dataclass(frozen=True)
class ToolResults:
    results: tuple[ToolResult, ...]  # paired with the previous assistant message's calls by position


Message = Union[UserMessage, AssistantMessage, ToolResults]


@dataclass
class ModelRequest:
    """One model call, provider-neutral. `system` is the stable prefix (the same bytes run to run);
    `system_dynamic` is the per-run part, placed after it and never cache-marked."""

    model: str
    messages: list[Message]
    system: str = ""
    system_dynamic: str = ""
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: str | None = None  # None: auto; "any": some tool; any other value: that tool's name
    max_tokens: int = 1024
    temperature: float | None = None
    cache: bool = True  # place prompt-cache marks where the wire needs them (Anthropic)


@dataclass
class Completion:
    """What one model call answered, with its usage and exact cost (from the shared wire parser)."""

    text: str | None
    tool_uses: list[ToolUse]
    stop: Stop
    stop_reason: str | None  # the wire's own spelling
    refusal: str | None
    usage: Usage
    cost_micros: int | None
    model: str  # the model that served it
    provider: str  # the name of the gateway provider that answered
    call: Call
    estimate: int  # the request's raw token estimate (bytes / 4), for scaling later estimates
    attempts: int = 1


def stop_of(raw: str | None, refusal: str | None, has_tools: bool) -> Stop:
    if refusal or raw in ("refusal", "content_filter"):
        return "refusal"
    if raw in ("max_tokens", "length", "model_context_window_exceeded"):
        return "length"
    if raw in ("tool_use", "tool_calls", "function_call") or (has_tools and raw is None):
        return "tool"
    if raw in ("end_turn", "stop", "stop_sequence", None):
        return "end"
    return "other"
