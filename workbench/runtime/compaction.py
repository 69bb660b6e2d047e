"""Auto-compaction: keep a long agent run inside its model's context window.

Before each turn the request is estimated (its bytes / 4, scaled by what the provider reported for
the previous request against that request's own estimate). Over `at` of the room (the context window
minus the turn's `max_tokens`), every turn older than the last `keep_turns` is summarised in ONE
model call, billed to the run; the system prompt, the tools, the task and the kept turns stay the
same bytes, and the summary joins the task message. A provider's context-overflow refusal gets one
forced compaction, then `WB_AGENT_CONTEXT_EXHAUSTED`. A summary that fails (a provider error, an
empty or cut answer) leaves the run whole while it still fits the room."""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.runtime.messages import AssistantMessage, Message, ToolResults, UserMessage

INSTRUCTIONS = (
    "You compact the earlier part of an AI agent's working conversation so the agent can continue "
    "within its context window. Write a concise summary of the transcript you are given: the facts "
    "found, tool results that still matter (exact values, ids, numbers), decisions made, what was "
    "tried and failed, and what remains to do. Write only the summary."
)
SUMMARY_HEADER = "Summary of the earlier turns of this task (compacted to fit the context window):"


@dataclass(frozen=True)
class Compaction:
    """`Agent(compact=Compaction(...))`; `compact="auto"` is `Compaction()`, `None` turns it off."""

    at: float = 0.8
    keep_turns: int = 4
    model: str | None = None  # the summary model; None: the agent's own
    max_summary_tokens: int = 1024
    instructions: str = INSTRUCTIONS

    def __post_init__(self) -> None:
        if not 0 < self.at <= 1:
            raise ValueError(f"Compaction(at={self.at}) must be in (0, 1]")
        if self.keep_turns < 0:
            raise ValueError(f"Compaction(keep_turns={self.keep_turns}) must be >= 0")


def compaction_of(value: Compaction | str | bool | None) -> Compaction | None:
    if isinstance(value, Compaction):
        return value
    if value in ("auto", True):
        return Compaction()
    if value in (None, False, "off"):
        return None
    raise ValueError(f"compact={value!r}: use 'auto', None or a Compaction(...)")


@dataclass(frozen=True)
class CompactionInfo:
    """One compaction, as the `agent.compact` event and the `compactions` row record it."""

    turn: int  # the turn it ran before
    outcome: str  # "ok": the old turns were summarised; "failed": no summary, every turn kept
    trigger: str  # "threshold" (the estimate passed `at`) or "overflow" (the provider refused)
    tokens_before: int
    tokens_after: int
    limit: int  # the threshold: `at` x (context window - max_tokens)
    summarised_turns: int
    kept_turns: int
    model: str
    cost_micros: int
    error: str | None = None


@dataclass
class Conversation:
    """The task, an optional summary of compacted turns, and the turns since (each an assistant
    message and what answered it: tool results, or a user nudge)."""

    task: str
    summary: str | None = None
    summarised: int = 0  # turns folded into the summary so far
    turns: list[tuple[AssistantMessage, Message]] = field(default_factory=list)

    def messages(self) -> list[Message]:
        parts = (self.task,) if self.summary is None else (self.task, f"{SUMMARY_HEADER}\n\n{self.summary}")
        out: list[Message] = [UserMessage(parts)]
        for assistant, follow in self.turns:
            out += [assistant, follow]
        return out


def transcript(summary: str | None, turns: list[tuple[AssistantMessage, Message]], first_turn: int) -> str:
    lines: list[str] = []
    if summary:
        lines += ["[summary of the turns before]", summary, ""]
    for number, (assistant, follow) in enumerate(turns, start=first_turn):
        lines.append(f"[turn {number}]")
        if assistant.text:
            lines.append(f"assistant: {assistant.text}")
        for use in assistant.tool_uses:
            lines.append(f"assistant called {use.name}({use.arguments})")
        if isinstance(follow, ToolResults):
            for result in follow.results:
                lines.append(f"{'error from' if result.is_error else 'result of'} {result.name}: {result.content}")
        elif isinstance(follow, UserMessage):
            lines += [f"user: {part}" for part in follow.parts]
        lines.append("")
    return "\n".join(lines).rstrip()
