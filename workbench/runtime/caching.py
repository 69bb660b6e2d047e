"""Prompt caching, per host: what is marked and where a caller's `session` key goes.

`PROMPT_CACHE_RULES` is the one table, first match wins (wire, host, model prefix):

| wire | host | model | marks | session |
|---|---|---|---|---|
| Anthropic Messages | any | any | the stable system block and the last block of the last two user turns | nowhere |
| OpenAI chat | openrouter.ai | `anthropic/…` | the stable system part and the tail message's last part | `x-session-id` header |
| OpenAI chat | openrouter.ai | anything else | none (the host caches implicitly; a mark would be a paid write) | `x-session-id` header |
| OpenAI chat | api.openai.com | any | none (automatic) | `prompt_cache_key` body field |
| OpenAI chat | any other | any | none | nowhere |

Anthropic caches only what is marked with `cache_control` (at most 4 marks per request). The
Anthropic marks, in prefix order: the stable system block (which caches the tools too; when there is
no stable system text, the last tool instead), the end of the previous request's tail (what the
last turn wrote, so it is read back even after more than 20 new blocks), and the tail of this request
(so the next turn reads it). A mark never goes on an empty block.

A `session` is a routing key, not a secret: on OpenRouter it is sent as a header (1 to 256
printable ASCII characters, else `WB_RUNTIME_OPTION_INVALID`); on OpenAI a key over 64 characters
is sent as a hash of itself (`h:` + 62 hex), so the same key always groups the same requests."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from workbench.runtime.options import invalid

MAX_MARKS = 4
_EPHEMERAL = {"type": "ephemeral"}
OPENAI_KEY_CHARS = 64
SESSION_HEADER_CHARS = 256


@dataclass(frozen=True)
class CacheRule:
    wire: str
    host: str | None  # a host suffix; None: any host
    model_prefix: str | None
    marks: Literal["anthropic", "tail", "none"]
    session: Literal["nowhere", "header", "body"]


PROMPT_CACHE_RULES: tuple[CacheRule, ...] = (
    CacheRule("anthropic.messages", None, None, "anthropic", "nowhere"),
    CacheRule("openai.chat", "openrouter.ai", "anthropic/", "tail", "header"),
    CacheRule("openai.chat", "openrouter.ai", None, "none", "header"),
    CacheRule("openai.chat", "api.openai.com", None, "none", "body"),
    CacheRule("openai.chat", None, None, "none", "nowhere"),
)


def cache_rule(wire: str, host: str, model: str) -> CacheRule:
    for rule in PROMPT_CACHE_RULES:
        if rule.wire != wire:
            continue
        if rule.host is not None and host != rule.host and not host.endswith("." + rule.host):
            continue
        if rule.model_prefix is not None and not model.startswith(rule.model_prefix):
            continue
        return rule
    return CacheRule(wire, None, None, "none", "nowhere")


def session_header(session: str) -> str:
    if not 1 <= len(session) <= SESSION_HEADER_CHARS or not all(" " <= ch <= "~" for ch in session):
        raise invalid("prompt_cache session", session, f"1 to {SESSION_HEADER_CHARS} printable ASCII characters")
    return session


def session_key(session: str) -> str:
    """OpenAI's `prompt_cache_key`: the session itself, or `h:` + 62 hex of its hash when longer
    than 64 characters."""
    if len(session) <= OPENAI_KEY_CHARS:
        return session
    return "h:" + hashlib.sha256(session.encode("utf-8")).hexdigest()[:62]


def _empty(block: dict) -> bool:
    if block.get("type") == "text":
        return not str(block.get("text") or "").strip()
    if block.get("type") == "tool_result":
        return not block.get("content")
    return False


def _place(targets: list[dict]) -> int:
    placed = 0
    seen: set[int] = set()
    for block in targets[:MAX_MARKS]:
        if id(block) in seen:
            continue
        seen.add(id(block))
        block["cache_control"] = dict(_EPHEMERAL)
        placed += 1
    return placed


def mark_anthropic(body: dict, stable_system: bool) -> int:
    """Add cache marks to an Anthropic Messages body in place; returns how many were placed."""
    targets: list[dict] = []
    system = body.get("system") or []
    if stable_system and system and not _empty(system[0]):
        targets.append(system[0])
    elif body.get("tools"):
        targets.append(body["tools"][-1])
    user_turns = [m for m in body.get("messages", []) if m["role"] == "user" and isinstance(m["content"], list)]
    for message in user_turns[-2:]:
        for block in reversed(message["content"]):
            if not _empty(block):
                targets.append(block)
                break
    return _place(targets)


def mark_chat_tail(body: dict, stable_system: bool) -> int:
    """OpenRouter's Anthropic models on the chat wire: the stable system part and the last part of
    the tail message (its content becomes a list of text parts to carry the mark)."""
    messages = body.get("messages") or []
    targets: list[dict] = []
    for index in ([0] if stable_system and messages and messages[0]["role"] == "system" else []) + [len(messages) - 1]:
        if index < 0:
            continue
        message = messages[index]
        content = message.get("content")
        if isinstance(content, str):
            if not content.strip():
                continue
            message["content"] = content = [{"type": "text", "text": content}]
        if isinstance(content, list):
            parts = [part for part in content if isinstance(part, dict) and not _empty(part)]
            if parts:
                targets.append(parts[-1])
    return _place(targets)


def prompt_cache_of(value) -> tuple[bool, str | None]:
    """`prompt_cache=`: "auto" or True (on), "off", False or None (off), or {"session": key} (on,
    with a routing key for the hosts that take one)."""
    if isinstance(value, dict):
        unknown = set(value) - {"session"}
        session = value.get("session")
        if unknown or not isinstance(session, str) or not session:
            raise invalid("prompt_cache", value, "'auto', 'off' or {'session': a non-empty string}")
        return True, session
    if value in ("auto", True):
        return True, None
    if value in ("off", False, None):
        return False, None
    raise invalid("prompt_cache", value, "'auto', 'off' or {'session': a non-empty string}")
