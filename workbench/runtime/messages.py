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
class Image:
    """An image in a user turn: `data` (raw bytes, sent as base64) or an https `url`."""

    media_type: str = "image/png"  # image/jpeg, image/png, image/gif or image/webp
    data: bytes | None = None
    url: str | None = None

    kind = "image"


@dataclass(frozen=True)
class Document:
    """A PDF in a user turn, as raw bytes (sent as base64)."""

    data: bytes
    media_type: str = "application/pdf"
    title: str | None = None

    kind = "document"


Part = Union[str, Image, Document]


@dataclass(frozen=True)
class UserMessage:
    parts: tuple[Part, ...]  # blocks, in order (the task, then a compaction summary if any)


@dataclass(frozen=True)
class AssistantMessage:
    text: str | None
    tool_uses: tuple[ToolUse, ...] = ()


@dataclass(frozen=True)
class ToolResults:
    results: tuple[ToolResult, ...]  # paired with the previous assistant message's calls by position
    parts: tuple[str, ...] = ()  # user text after the results (a continuation, a summary instruction)


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
    temperature: float | None = None  # sent only to a model whose row lists it in `sampling`
    seed: int | None = None  # likewise; chat completions only
    effort: str | None = None  # reasoning effort: refused for a model whose row has no effort control
    thinking: bool | None = None  # extended thinking on or off: refused for a model without it
    cache: bool = True  # place prompt-cache marks where the host needs them (see `caching`)
    session: str | None = None  # a prompt-cache routing key, sent where the host takes one
    stream: bool = False
    prompt_hash: str | None = None  # the declared prompt it renders: part of the response-cache key


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
    cached: bool = False  # served by the gateway's response cache: nothing was sent or paid


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
