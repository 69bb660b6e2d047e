"""A run's state at a turn boundary, as JSON: the checkpoint the store keeps, and the signed
transcript handle `continue_()` takes.

The state holds what the model was sent (already redacted) and what the tools answered, the turns
used, what the run was billed and has spent against its budget, and its compaction state. A
checkpoint lives in the store (owner-only, like every call body). A transcript leaves Workbench:
the app stores it, so it is SIGNED — an HMAC-SHA256 over its canonical JSON with the project secret
`WORKBENCH_TRANSCRIPT_SECRET` (at least 32 characters; there is no default, and signing or checking
without one is `WB_TRANSCRIPT_SECRET_MISSING`) — and BOUND to the agent (its name and its prompt's
id, version and hash), the model and the tool names the run was offered. On the way back, before
anything is loaded or spent, it is checked: its size, the signature, each binding, then its shape
(turns alternate, every tool call is answered by the next message, position by position, and names
a tool the run was offered). Anything else is `WB_AGENT_TRANSCRIPT_INVALID`: a zeroed bill, fewer
turns, an edited message, a fabricated tool result or a spliced turn all break the signature or the
shape. Rotating the secret invalidates stored transcripts."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from typing import Any

from workbench.capture import Billed
from workbench.errors import WorkbenchError
from workbench.runtime.compaction import Conversation
from workbench.runtime.messages import (
    AssistantMessage, Document, Image, Message, Part, ToolResult, ToolResults, ToolUse, UserMessage,
)
from workbench.wire.canonical import canonical_json

FORMAT = 1
MAX_TRANSCRIPT_CHARS = 2_000_000
SECRET_ENV = "WORKBENCH_TRANSCRIPT_SECRET"
MIN_SECRET_CHARS = 32
_LABEL = b"workbench.transcript.v1\n"  # keeps these signatures apart from any other use of the secret
_STATE_ATTR = "__workbench_transcript__"


@dataclass
class RunState:
    """Everything a run needs to go on from a turn boundary."""

    agent: str
    prompt: dict  # prompt_id, prompt_version, prompt_hash (None for an anonymous prompt)
    model: str
    tools: list[str]  # the tool names the run was offered (`respond` included with an output)
    system_dynamic: str
    conversation: Conversation
    final: AssistantMessage | None = None  # the answer, once the run has one
    turn: int = 0  # turns used, every earlier run of the conversation included
    billed: Billed = field(default_factory=Billed)  # what every earlier run of it was billed
    # (tokens, money per currency) charged to its budget ledger
    spent: tuple[int, dict[str, int]] = field(default_factory=lambda: (0, {}))
    compactions: int = 0
    compaction_wait: bool = False  # a summary failed: the next attempt waits until the request no longer fits
    ratio: float = 1.0  # reported input / raw estimate, from the last turn
    signatures: list = field(default_factory=list)  # tool-loop detection (a checkpoint's; a transcript drops it)

    # -- JSON
    def to_json(self) -> dict:
        conversation = self.conversation
        return {
            "format": FORMAT, "agent": self.agent, "prompt": self.prompt, "model": self.model, "tools": self.tools,
            "system_dynamic": self.system_dynamic,
            "task": [_part(part) for part in conversation.task], "summary": conversation.summary,
            "summarised": conversation.summarised,
            "turns": [[_message(assistant), _message(follow)] for assistant, follow in conversation.turns],
            "final": _message(self.final) if self.final is not None else None,
            "turn": self.turn, "billed": self.billed.model_dump(), "spent": [self.spent[0], dict(self.spent[1])],
            "compactions": self.compactions, "compaction_wait": self.compaction_wait, "ratio": self.ratio,
            "signatures": [list(map(list, signature)) for signature in self.signatures],
        }

    @classmethod
    def from_json(cls, data: Any) -> RunState:
        """The state, or ValueError naming what is malformed."""
        try:
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format') if isinstance(data, dict) else None!r} (expected {FORMAT})")
            turns = []
            for pair in data["turns"]:
                assistant, follow = (_unmessage(item) for item in pair)
                if not isinstance(assistant, AssistantMessage) or isinstance(follow, AssistantMessage):
                    raise ValueError("a turn is not an assistant message and the user message answering it")
                turns.append((assistant, follow))
            final = _unmessage(data["final"]) if data["final"] is not None else None
            if final is not None and not isinstance(final, AssistantMessage):
                raise ValueError("the final answer is not an assistant message")
            conversation = Conversation(tuple(_unpart(part) for part in data["task"]), data["summary"],
                                        int(data["summarised"]), turns)
            billed = Billed(**data["billed"])
            return cls(
                agent=str(data["agent"]), prompt=dict(data["prompt"]), model=str(data["model"]),
                tools=[str(name) for name in data["tools"]], system_dynamic=str(data["system_dynamic"]),
                conversation=conversation, final=final, turn=int(data["turn"]), billed=billed,
                spent=_spent(data["spent"], billed), compactions=int(data["compactions"]),
                compaction_wait=bool(data["compaction_wait"]), ratio=float(data["ratio"]),
                signatures=[tuple(tuple(item) for item in signature) for signature in data.get("signatures", [])],
            )
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"missing or malformed field ({type(exc).__name__}: {exc})") from exc

    def check_shape(self) -> None:
        """Turns alternate, every tool call is answered in the next message by position, and every
        call names an offered tool; ValueError otherwise."""
        for number, (assistant, follow) in enumerate(self.conversation.turns, start=self.conversation.summarised + 1):
            unknown = [use.name for use in assistant.tool_uses if use.name not in self.tools]
            if unknown:
                raise ValueError(f"turn {number} calls {', '.join(unknown)}, which the run was not offered")
            calls = [use.id for use in assistant.tool_uses]
            answers = [result.call_id for result in follow.results] if isinstance(follow, ToolResults) else []
            if calls != answers:
                raise ValueError(f"turn {number}: the tool calls and the results answering them do not pair up")
        if self.final is not None and any(use.name not in self.tools for use in self.final.tool_uses):
            raise ValueError("the final answer calls a tool the run was not offered")


# -- messages as JSON
def _spent(value: Any, billed: Billed) -> tuple[int, dict[str, int]]:
    """A state's `spent`: tokens, and money per currency. A state written before spends named their
    currency holds one figure: in the bill's main currency, the one a cost limit counted it in."""
    tokens, money = value
    if isinstance(money, dict):
        return int(tokens), {str(currency): int(micros) for currency, micros in money.items()}
    return int(tokens), ({billed.currency: int(money)} if int(money) else {})


def _part(part: Part) -> Any:
    if isinstance(part, str):
        return part
    if isinstance(part, Image):
        return {"image": part.media_type, "url": part.url,
                "data": base64.b64encode(part.data).decode() if part.data is not None else None}
    return {"document": part.media_type, "title": part.title, "data": base64.b64encode(part.data).decode()}


def _unpart(data: Any) -> Part:
    if isinstance(data, str):
        return data
    if "image" in data:
        raw = data.get("data")
        return Image(str(data["image"]), base64.b64decode(raw) if raw is not None else None, data.get("url"))
    return Document(base64.b64decode(data["data"]), str(data["document"]), data.get("title"))


def _message(message: Message) -> dict:
    if isinstance(message, AssistantMessage):
        return {"assistant": message.text, "calls": [[use.id, use.name, use.arguments] for use in message.tool_uses]}
    if isinstance(message, ToolResults):
        return {"results": [[r.call_id, r.name, r.content, r.is_error] for r in message.results],
                "parts": list(message.parts)}
    return {"user": [_part(part) for part in message.parts]}


def _unmessage(data: Any) -> Message:
    if "assistant" in data:
        text = data["assistant"]
        return AssistantMessage(None if text is None else str(text),
                                tuple(ToolUse(str(i), str(n), str(a)) for i, n, a in data["calls"]))
    if "results" in data:
        return ToolResults(tuple(ToolResult(str(i), str(n), str(c), bool(e)) for i, n, c, e in data["results"]),
                           tuple(str(part) for part in data["parts"]))
    return UserMessage(tuple(_unpart(part) for part in data["user"]))


# -- signing
def _secret() -> bytes:
    secret = os.environ.get(SECRET_ENV, "")
    if len(secret) < MIN_SECRET_CHARS:
        raise WorkbenchError(
            "WB_TRANSCRIPT_SECRET_MISSING",
            f"{SECRET_ENV} is {'not set' if not secret else f'{len(secret)} characters long'}; signing or checking "
            f"a transcript needs a secret of at least {MIN_SECRET_CHARS} characters (none ships with Workbench)",
            f"export {SECRET_ENV}=\"$(python -c 'import secrets; print(secrets.token_hex(32))')\" from your "
            "secret store, the same value wherever transcripts are written and read",
        )
    return secret.encode("utf-8")


def _signature(payload: dict, secret: bytes) -> str:
    return "hmac-sha256:" + hmac.new(secret, _LABEL + canonical_json(payload), hashlib.sha256).hexdigest()


def sign(state: RunState) -> str:
    """The signed transcript handle: JSON text to store and pass back exactly as given."""
    payload = state.to_json()
    payload.pop("signatures")  # tool-loop detection is per call, never carried across
    return json.dumps({"transcript": payload, "signature": _signature(payload, _secret())},
                      ensure_ascii=False, separators=(",", ":"))


def verify(handle: Any, *, agent: str, prompt: dict, model: str, tools: list[str]) -> RunState:
    """The state a handle holds, after every check; `WB_AGENT_TRANSCRIPT_INVALID` otherwise."""
    secret = _secret()

    def refuse(why: str) -> WorkbenchError:
        return WorkbenchError(
            "WB_AGENT_TRANSCRIPT_INVALID", f"the transcript handed to agent {agent!r} was refused: {why}",
            "pass back exactly the transcript a run of this agent returned (result.transcript or "
            "transcript_of(error)), to the same agent, prompt version, model and tools; or start a new run",
        )

    if not isinstance(handle, str):
        raise refuse(f"it is a {type(handle).__name__}, not the JSON text a run returned")
    if len(handle) > MAX_TRANSCRIPT_CHARS:
        raise refuse(f"it is {len(handle):,} characters, over the {MAX_TRANSCRIPT_CHARS:,} a transcript may be")
    try:
        outer = json.loads(handle)
        payload, signature = outer["transcript"], outer["signature"]
        expected = _signature(payload, secret)
    except (ValueError, KeyError, TypeError) as exc:
        raise refuse(f"it is not a transcript ({type(exc).__name__})") from None
    if not isinstance(signature, str) or not hmac.compare_digest(signature, expected):
        raise refuse("its signature does not match its content (edited, spliced, or signed with another secret)")
    try:
        state = RunState.from_json({**payload, "signatures": []})
    except ValueError as exc:
        raise refuse(f"its content is malformed: {exc}") from None
    for what, held, wanted in (("agent", state.agent, agent), ("prompt", state.prompt, prompt),
                               ("model", state.model, model), ("tools", sorted(state.tools), sorted(tools))):
        if held != wanted:
            raise refuse(f"it was written for {what} {held!r}, and this run's is {wanted!r}")
    try:
        state.check_shape()
    except ValueError as exc:
        raise refuse(str(exc)) from None
    return state


def attach(exc: BaseException, state: RunState) -> None:
    if getattr(exc, _STATE_ATTR, None) is None:  # the innermost run's state: the one that failed
        try:
            setattr(exc, _STATE_ATTR, state)
        except (AttributeError, TypeError):
            pass


def transcript_of(exc: BaseException) -> str | None:
    """The signed transcript of the agent run `exc` failed out of, after a provider answered: the
    conversation up to the request the failed turn was answering, its turns and bill counting the
    failed call. None when no provider had answered."""
    state = getattr(exc, _STATE_ATTR, None)
    return sign(state) if state is not None else None
