"""Auto-compaction: keep a long agent run inside its model's context window.

Before each turn the request is estimated (its bytes / 4, scaled by what the provider reported for
the previous request against that request's own estimate). Over `at` of the room (the context window
minus the turn's `max_tokens`), every turn older than the last `keep_turns` is summarised in ONE
model call, billed to the run; the system prompt, the tools, the task and the kept turns stay the
same bytes, and the summary joins the task message.

The summary call is the run's own request up to the cut plus one instruction (same system, tools and
cache hint), so it reads the prefix the turn that ended at the cut already cached. When that does not
fit the summary model's room (its window minus `max_summary_tokens`), the same system, tools and task
are sent with the turns to summarise as TEXT, shortened oldest first until it fits: each tool result
clipped to its first and last `SUMMARY_CLIP_CHARS` characters, then left out. No turn is ever dropped
from the run: only the summary call's input is shortened.

A provider's context-overflow refusal gets one forced compaction, then `WB_AGENT_CONTEXT_EXHAUSTED`.
A summary that fails (a provider error, an empty, cut or refused answer, or no shorter) leaves the run
whole while it still fits the room, and the next attempt waits until it no longer fits: each attempt
is a billed call."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from workbench.models import Usage
from workbench.runtime.messages import (
    AssistantMessage, Message, ModelRequest, Part, ToolResult, ToolResults, UserMessage,
)
from workbench.runtime.options import count, invalid, number

INSTRUCTIONS = (
    "Stop here: do not call any tool. Write a concise summary of the conversation so far, so the work "
    "can continue from it alone: the facts found, tool results that still matter (exact values, ids, "
    "numbers), decisions made, what was tried and failed, and what remains to do. Write only the summary."
)
SUMMARY_HEADER = "Summary of the earlier turns of this task (compacted to fit the context window):"
SUMMARY_CLIP_CHARS = 1000
DEFAULT_SUMMARY_TOKENS = 2048


@dataclass(frozen=True)
class Compaction:
    """`Agent(compact=Compaction(...))`; `compact="auto"` is `Compaction()`, `None` turns it off.
    `max_summary_tokens` None is min(2048, the agent's max_tokens)."""

    at: float = 0.8
    keep_turns: int = 4
    model: str | None = None  # the summary model; None: the agent's own (which reads the cached prefix)
    max_summary_tokens: int | None = None
    instructions: str = INSTRUCTIONS

    def __post_init__(self) -> None:
        number("Compaction.at", self.at, 0, 1, low_open=True)
        count("Compaction.keep_turns", self.keep_turns, 1)
        count("Compaction.max_summary_tokens", self.max_summary_tokens, 1, optional=True)
        if not isinstance(self.instructions, str) or not self.instructions.strip():
            raise invalid("Compaction.instructions", self.instructions, "a non-empty instruction")


def compaction_of(value: Compaction | str | bool | None) -> Compaction | None:
    if isinstance(value, Compaction):
        return value
    if value in ("auto", True):
        return Compaction()
    if value in (None, False, "off"):
        return None
    raise invalid("compact", value, "'auto', 'off', None or a Compaction(...)")


@dataclass(frozen=True)
class CompactionInfo:
    """One compaction attempt, as `on_compact`, the `agent.compact` event and the `compactions` row
    record it."""

    turn: int  # the turn it ran before
    outcome: str  # "ok": the old turns were summarised; "failed": no summary, every turn kept
    trigger: str  # why it ran: "threshold" (the estimate passed `at`) or "overflow" (the provider refused)
    tokens_before: int
    tokens_after: int
    limit: int  # the threshold: `at` x (context window - max_tokens)
    summarised_turns: int
    kept_turns: int
    compactions: int  # successful compactions of the run so far, this one included
    model: str
    summary_input: str  # "messages" (the run's cached request) or "text" (the turns as clipped text)
    clipped: int  # turns whose tool results were clipped in the text form
    omitted: int  # turns whose tool results were left out of the text form
    usage: Usage
    cost_micros: int
    error: str | None = None  # why it failed


@dataclass
class Conversation:
    """The task, an optional summary of compacted turns, and the turns since (each an assistant
    message and what answered it: tool results, or a user message)."""

    task: tuple[Part, ...]
    summary: str | None = None
    summarised: int = 0  # turns folded into the summary so far
    turns: list[tuple[AssistantMessage, Message]] = field(default_factory=list)

    def first(self) -> UserMessage:
        return UserMessage(self.task if self.summary is None else (*self.task, f"{SUMMARY_HEADER}\n\n{self.summary}"))

    def messages(self, upto: int | None = None) -> list[Message]:
        out: list[Message] = [self.first()]
        for assistant, follow in self.turns[:upto]:
            out += [assistant, follow]
        return out


def with_text(message: Message, text: str) -> Message:
    """`message` (the user side of a turn) with `text` appended as its last part."""
    if isinstance(message, ToolResults):
        return replace(message, parts=(*message.parts, text))
    assert isinstance(message, UserMessage)
    return UserMessage((*message.parts, text))


def transcript(summary: str | None, turns: list[tuple[AssistantMessage, Message]], first_turn: int,
               clipped: int = 0, omitted: int = 0) -> str:
    """The turns as text; the tool results of the first `omitted` turns left out, and of the first
    `clipped` turns cut to their ends."""
    lines: list[str] = []
    if summary:
        lines += ["[summary of the turns before]", summary, ""]
    for index, (assistant, follow) in enumerate(turns):
        lines.append(f"[turn {first_turn + index}]")
        if assistant.text:
            lines.append(f"assistant: {assistant.text}")
        for use in assistant.tool_uses:
            lines.append(f"assistant called {use.name}({use.arguments})")
        results: tuple[ToolResult, ...] = follow.results if isinstance(follow, ToolResults) else ()
        for result in results:
            content = result.content
            if index < omitted:
                content = f"[{len(content)} characters left out to fit]"
            elif index < clipped and len(content) > 2 * SUMMARY_CLIP_CHARS:
                content = (f"{content[:SUMMARY_CLIP_CHARS]}\n[… {len(content) - 2 * SUMMARY_CLIP_CHARS} characters "
                           f"clipped …]\n{content[-SUMMARY_CLIP_CHARS:]}")
            lines.append(f"{'error from' if result.is_error else 'result of'} {result.name}: {content}")
        parts = follow.parts if isinstance(follow, (ToolResults, UserMessage)) else ()
        lines += [f"user: {part}" for part in parts if isinstance(part, str)]
        lines.append("")
    return "\n".join(lines).rstrip()


def summary_request(run_request: ModelRequest, conversation: Conversation, count_: int, compaction: Compaction,
                    model: str, max_tokens: int, room: int,
                    estimate: Callable[[ModelRequest], int]) -> tuple[ModelRequest | None, str, int, int]:
    """The summary call for the first `count_` turns: (request, summary_input, clipped, omitted);
    the request is None when even the shortest text form does not fit `room`."""
    messages = conversation.messages(count_)
    messages[-1] = with_text(messages[-1], compaction.instructions)
    request = replace(run_request, model=model, messages=messages, max_tokens=max_tokens, tool_choice=None,
                      temperature=None, seed=None, stream=False)
    if estimate(request) <= room:
        return request, "messages", 0, 0
    old = conversation.turns[:count_]
    # shortest first would hide which form was needed: clip oldest first, then omit oldest first
    steps = [(clipped, 0) for clipped in range(1, count_ + 1)] + [(count_, omitted) for omitted in range(1, count_ + 1)]
    for clipped, omitted in [(0, 0), *steps]:
        text = transcript(conversation.summary, old, conversation.summarised + 1, clipped, omitted)
        first = UserMessage((*conversation.task, f"The conversation so far, as text:\n\n{text}", compaction.instructions))
        candidate = replace(request, messages=[first])
        if estimate(candidate) <= room:
            return candidate, "text", clipped, omitted
    return None, "text", count_, count_
