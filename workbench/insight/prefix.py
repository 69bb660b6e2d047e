"""A request's cacheable prefix, as block-level hashes: what the verdicts and the compaction
detector compare instead of bytes.

A provider caches a request's *prefix*, in its own order: the tool list, then the system blocks, then
the messages. A request is cut into regions in that order — the tool list (one region), each system
block, each message (or Responses input item) — and each region is hashed on its canonical JSON with
the cache marks taken out (moving a mark does not change what is cached). Two requests share a prefix
of depth k when their first k regions hash the same; the cumulative hash at depth k names that prefix.

Per wire:
- Anthropic Messages caches only what is marked: a `cache_control` on a tool, a system block or a
  content block marks the end of a cacheable prefix there (at most four); a top-level
  `cache_control` marks the last region (automatic caching). `ttl: "1h"` asks for the one-hour life.
- OpenAI chat and Responses (and the compatible hosts) cache every long prefix by themselves;
  `prompt_cache_key` scopes the cache, `prompt_cache_retention: "24h"` extends its life. A
  `cache_control` (OpenRouter, for Claude models) or `prompt_cache_breakpoint` in a content part is
  a mark too, and a Claude model behind the chat wire caches only what is marked.

Computed once per call, from the full request bytes (the stored body is size-capped), on the
recorder's spool thread; ingestion computes it from the stored body for calls recorded without it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache

import orjson

_MARK_KEYS = ("cache_control", "prompt_cache_breakpoint")
# one letter per region, so a call's structure is a short string: tools, system, user, assistant,
# tool output, a previous response (Responses' server-side history), anything else
TOOLS, SYSTEM, USER, ASSISTANT, OUTPUT, PREVIOUS, OTHER = "t", "s", "u", "a", "o", "p", "x"
_ROLES = {"system": SYSTEM, "developer": SYSTEM, "user": USER, "assistant": ASSISTANT, "model": ASSISTANT,
          "tool": OUTPUT, "function": OUTPUT}
DEFAULT_TTL_S = 300
_SEED, _MIX, _MASK, _HALF, _SIGN = 0x2545F4914F6CDD1D, 0x9E3779B97F4A7C15, 2**64 - 1, 2**63, 2**64


@dataclass(slots=True)
class Fingerprint:
    blocks: list[int] = field(default_factory=list)  # each region's hash (signed 64-bit)
    sizes: list[int] = field(default_factory=list)  # each region's canonical size in bytes
    kinds: str = ""  # one letter per region (see above)
    marks: list[int] = field(default_factory=list)  # regions a cache mark ends a prefix at
    explicit: bool = False  # the provider caches only what is marked
    ttl_s: int = DEFAULT_TTL_S  # the longest life asked for (or the provider's default)
    scope: str | None = None  # prompt_cache_key: the cache is shared only within it
    lead: int = 0  # regions before the conversation (tools, system blocks, a previous response)
    base: int = 0  # the region of the request's first message (a chat's system messages lead yet are messages)

    def cumulative(self) -> list[int]:
        """The hash of each prefix: depth k (1-based) at index k - 1."""
        return list(_cumulative(tuple(self.blocks)))

    def label(self, index: int) -> str:
        """The region at `index` as a person names it: `tool list`, `system block 1`, `message 3 (user)`
        (a message is numbered by its place in the request's message list)."""
        kind = self.kinds[index]
        if kind == TOOLS:
            return "tool list"
        if kind == PREVIOUS:
            return "previous response"
        if index < self.lead:
            return f"system block {self.kinds[:index].count(SYSTEM)}"
        role = {SYSTEM: "system", USER: "user", ASSISTANT: "assistant", OUTPUT: "tool result"}.get(kind, "other")
        return f"message {index - self.base} ({role})"


@lru_cache(maxsize=8192)
def _cumulative(blocks: tuple[int, ...]) -> tuple[int, ...]:
    """Each region's hash mixed into the running one (integer arithmetic, a few hundred nanoseconds a
    region). Remembered: every batch replays the calls stored within the cache's life before it, so
    the same prefixes come back batch after batch (8,192 of ~20 regions: about 15 MB at most)."""
    out, running = [], _SEED
    for block in blocks:
        running = ((running ^ block) * _MIX) & _MASK
        running ^= running >> 29
        out.append(running - _SIGN if running >= _HALF else running)
    return tuple(out)


def _hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


def _unmarked(value):
    """`value` without cache marks at any depth, and whether it carried one (and its ttl)."""
    marked = [False, 0]

    def strip(item):
        if isinstance(item, dict):
            out = {}
            for key, inner in item.items():
                if key in _MARK_KEYS:
                    marked[0] = True
                    if isinstance(inner, dict) and inner.get("ttl") == "1h":
                        marked[1] = 3600
                    continue
                out[key] = strip(inner)
            return out
        if isinstance(item, list):
            return [strip(inner) for inner in item]
        return item

    return strip(value), marked[0], marked[1]


class _Builder:
    def __init__(self, keep: bool = False) -> None:
        self.print = Fingerprint()
        self.ttl = 0
        self.values: list | None = [] if keep else None

    def add(self, kind: str, value) -> None:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        marked, ttl, clean = False, 0, value
        # most regions carry no mark: only those are walked (in Python) to take the marks out
        if b'"cache_control"' in data or b'"prompt_cache_breakpoint"' in data:
            clean, marked, ttl = _unmarked(value)
            data = orjson.dumps(clean, option=orjson.OPT_SORT_KEYS)
        if self.values is not None:
            self.values.append(clean)
        self.print.blocks.append(_hash(data))
        self.print.sizes.append(len(data))
        self.print.kinds += kind
        if marked:
            self.print.marks.append(len(self.print.blocks) - 1)
            self.ttl = max(self.ttl, ttl or DEFAULT_TTL_S)


def _anthropic(body: dict, build: _Builder) -> None:
    build.print.explicit = True
    if body.get("tools"):
        build.add(TOOLS, body["tools"])
    system = body.get("system")
    if isinstance(system, str) and system:
        build.add(SYSTEM, system)
    elif isinstance(system, list):
        for block in system:
            build.add(SYSTEM, block)
    build.print.lead = build.print.base = len(build.print.blocks)
    for message in body.get("messages") or []:
        build.add(_message_kind(message), message)
    top = body.get("cache_control")
    if isinstance(top, dict) and build.print.blocks:  # automatic caching: up to the last region
        if build.print.marks[-1:] != [len(build.print.blocks) - 1]:
            build.print.marks.append(len(build.print.blocks) - 1)
        build.ttl = max(build.ttl, 3600 if top.get("ttl") == "1h" else DEFAULT_TTL_S)


def _message_kind(message) -> str:
    if not isinstance(message, dict):
        return OTHER
    kind = _ROLES.get(message.get("role"), OTHER)
    content = message.get("content")
    if kind == USER and isinstance(content, list) and content and all(
            isinstance(part, dict) and part.get("type") == "tool_result" for part in content):
        return OUTPUT
    return kind


def _openai_chat(body: dict, build: _Builder, model: str | None) -> None:
    tools = body.get("tools") or body.get("functions")
    if tools:
        build.add(TOOLS, tools)
    build.print.lead = build.print.base = len(build.print.blocks)
    for message in body.get("messages") or []:
        build.add(_message_kind(message), message)
    # leading system messages are the chat's system blocks
    while build.print.lead < len(build.print.kinds) and build.print.kinds[build.print.lead] == SYSTEM:
        build.print.lead += 1
    # a Claude model behind the chat wire (OpenRouter) caches only what is marked
    build.print.explicit = "claude" in (model or "").lower()


def _openai_responses(body: dict, build: _Builder) -> None:
    if body.get("tools"):
        build.add(TOOLS, body["tools"])
    if body.get("instructions"):
        build.add(SYSTEM, body["instructions"])
    if body.get("previous_response_id"):
        build.add(PREVIOUS, body["previous_response_id"])
    build.print.lead = build.print.base = len(build.print.blocks)
    items = body.get("input")
    if isinstance(items, str):
        build.add(USER, items)
    elif isinstance(items, list):
        for item in items:
            kind = _message_kind(item)
            if kind == OTHER and isinstance(item, dict):
                kind = {"function_call": ASSISTANT, "function_call_output": OUTPUT, "reasoning": ASSISTANT,
                        "custom_tool_call": ASSISTANT, "custom_tool_call_output": OUTPUT}.get(item.get("type"), OTHER)
            build.add(kind, item)


def fingerprint(wire: str, body, model: str | None = None) -> Fingerprint | None:
    """The prefix fingerprint of a request body (parsed JSON); None for a wire with no prompt cache
    or a body that is not a request object (or holds a value JSON cannot write, a huge integer)."""
    try:
        build = _build(wire, body, model, keep=False)
    except TypeError:  # orjson's encode error
        return None
    return None if build is None else build.print


def region_values(wire: str, body, model: str | None = None) -> list | None:
    """The request's regions in prefix order, as JSON values without their cache marks."""
    try:
        build = _build(wire, body, model, keep=True)
    except TypeError:
        return None
    return None if build is None else build.values


def _build(wire: str, body, model: str | None, keep: bool) -> _Builder | None:
    if not isinstance(body, dict):
        return None
    build = _Builder(keep)
    if wire == "anthropic.messages":
        _anthropic(body, build)
    elif wire == "openai.chat":
        _openai_chat(body, build, model or body.get("model"))
    elif wire == "openai.responses":
        _openai_responses(body, build)
    else:
        return None
    found = build.print
    if not found.explicit:
        found.ttl_s = 86400 if body.get("prompt_cache_retention") == "24h" else DEFAULT_TTL_S
    else:
        found.ttl_s = build.ttl or DEFAULT_TTL_S
    key = body.get("prompt_cache_key")
    found.scope = key if isinstance(key, str) and key else None
    return build


def fingerprint_bytes(wire: str, body: bytes, model: str | None = None) -> Fingerprint | None:
    try:
        return fingerprint(wire, orjson.loads(body), model)
    except orjson.JSONDecodeError:
        return None


def row(call_id: str, found: Fingerprint, clock_at: str | None, session: str | None) -> dict:
    """The `call_prefix` record of a call (its lineage, keys and diff are filled in at ingest)."""
    return {"call_id": call_id, "session": session, "scope": found.scope, "clock_at": clock_at,
            "blocks": found.blocks, "sizes": found.sizes, "kinds": found.kinds, "marks": found.marks,
            "lead": found.lead, "base": found.base, "explicit": found.explicit, "ttl_s": found.ttl_s, "lineage": None, "keys": None,
            "diff": None, "written": None}


def captured(call_id: str, wire: str, model: str | None, body: bytes, date: str | None, started_at: str | None,
             session: str | None) -> dict | None:
    """The record capture spools beside a call: its fingerprint from the full request bytes, and the
    provider's clock (the response's `Date` header; a replay serves the recorded one), else the
    call's start."""
    found = fingerprint_bytes(wire, body, model)
    if found is None:
        return None
    clock_at = started_at
    if date:
        try:
            from email.utils import parsedate_to_datetime

            clock_at = parsedate_to_datetime(date).isoformat()
        except (TypeError, ValueError, IndexError):
            pass
    return row(call_id, found, clock_at, session)
