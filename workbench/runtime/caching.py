"""Prompt-cache marks. Anthropic caches only what is marked with `cache_control` (at most 4 marks
per request); OpenAI caches every long prefix by itself, so nothing is marked there.

The marks, in prefix order: the stable system block (which caches the tools too; when there is no
stable system text, the last tool instead), the end of the previous request's tail (what the last
turn wrote, so it is read back even after more than 20 new blocks), and the tail of this request
(so the next turn reads it). A mark never goes on an empty block."""

from __future__ import annotations

MAX_MARKS = 4
_EPHEMERAL = {"type": "ephemeral"}


def _empty(block: dict) -> bool:
    if block.get("type") == "text":
        return not block.get("text")
    if block.get("type") == "tool_result":
        content = block.get("content")
        return not content
    return False


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
    placed = 0
    seen: set[int] = set()
    for block in targets[:MAX_MARKS]:
        if id(block) in seen:
            continue
        seen.add(id(block))
        block["cache_control"] = dict(_EPHEMERAL)
        placed += 1
    return placed
