"""A deterministic, scriptable fake LLM provider speaking seven real wire formats.

It answers ``POST /v1/chat/completions`` (OpenAI chat), ``POST /v1/responses`` (OpenAI Responses),
``POST /v1/embeddings`` (see ``fake_embeddings``), ``POST /v1/messages`` (Anthropic Messages;
also ``/v1/messages/count_tokens``), ``POST /v1beta/models/{model}:generateContent`` (Gemini;
``:streamGenerateContent?alt=sse`` streams) and the legacy text completions, ``POST /v1/completions``
(OpenAI) and ``POST /v1/complete`` (Anthropic), as JSON or as
SSE when the body says ``"stream": true``, closely enough that the real ``openai``, ``anthropic``
and ``google-genai`` SDKs parse it, helpers included. ``FakeProvider.handle`` is the one core function; it is pure
Python and does no I/O. ``fake_server`` serves it over real HTTP (``workbench fake-provider``); the transports
at the bottom of this module plug it into an httpx2 / httpx client in-process.

Replies are scripted (``provider.script(Reply(...), ...)``, FIFO, one queue for every path); when
the queue is empty the ``responder`` hook, else a deterministic echo of the last user text, answers.

Token counting (deterministic, documented because tests assert on it): a piece of text costs
``ceil(len(text.encode("utf-8")) / 4)`` tokens.

* Anthropic: the request is cut into segments in cache-prefix order — each tool (its JSON), each
  system block, each message content block (a text block counts its text, any other block its
  compact JSON) — and input is the sum of the segments' costs.
* OpenAI (chat and Responses): the prompt is serialised to one string (tools JSON, instructions,
  then one ``role: content`` line per message / input item) and input is that string's cost.
* Gemini: the same, over its tools, ``systemInstruction`` and ``contents`` (one ``role: parts``
  line each). Thinking tokens (``Reply.reasoning_tokens``) are reported as ``thoughtsTokenCount``.
* Legacy completions: input is the sum of each prompt's cost (``prompt``, a string or a list of
  strings); never cached. OpenAI's answer repeats the reply for each prompt ``n`` times, and bills
  ``max(n, best_of)`` completions per prompt; Anthropic's ``/v1/complete`` reports no usage at all.
* Output is the cost of the visible text + refusal + each tool call's name and JSON arguments,
  plus ``Reply.reasoning_tokens`` (reasoning tokens are output tokens), at least 1.
* ``Reply(usage_reported=False)`` answers on the chat wire with no usage at all (no ``usage`` field,
  no usage chunk even when ``stream_options.include_usage`` asks), as some compatible servers do.

Prompt caching (deterministic and per provider instance, like a real cache; entries never expire
unless ``cache_ttl_s`` is set, and then each read renews the entry it read):

* Anthropic: explicit. The prefix up to each ``cache_control`` mark is hashed (model included). The
  longest previously written prefix ending at or up to 20 segments before a mark is a cache READ;
  from there up to the LAST mark is a cache WRITE; the rest is ``input_tokens`` (which EXCLUDES
  both, as Anthropic reports). Prefixes shorter than ``anthropic_min_cache_tokens`` are not
  cached: an int for every model (default 0), or a mapping from model-id prefixes to minimums
  (the longest matching prefix wins), such as ``ANTHROPIC_MIN_CACHE_TOKENS``, the real API's.
* OpenAI and Gemini (its implicit caching): automatic. A prompt of >= 1024 tokens remembers its prefixes at 1024, 1152, 1280, ...
  tokens (4 bytes per token over the serialised prompt); the longest one seen before is reported
  as ``cached_tokens``, which ``prompt_tokens`` INCLUDES, as OpenAI reports (Gemini:
  ``cachedContentTokenCount`` inside ``promptTokenCount``).
* Expiry: with ``cache_ttl_s`` set, an entry not used for that long is gone (the real APIs keep
  one about five minutes after its last use; a read renews it). Without it, entries never expire.

A ``clock`` (a function returning epoch seconds) stands in for the time: it decides when entries
expire and is sent as each response's ``Date`` header, so a test can leave a cache idle for an hour
in no time (without one: the wall clock, and no ``Date`` header). ``evict()`` drops every entry, as
a provider does under load.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Mapping
from email.utils import formatdate
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from workbench.demo.fake_embeddings import inputs_of, render_embeddings
from workbench.demo.fake_wires import (
    LEGACY_WIRES, RENDERERS, Turn, dumps, legacy_copies, legacy_prompts, usage_sent,
)

__all__ = [
    "Reply", "FakeRequest", "FakeResponse", "FakeProvider", "Served", "count_tokens",
    "FakeTransport", "AsyncFakeTransport", "HttpxFakeTransport", "AsyncHttpxFakeTransport",
    "make_transports", "ANTHROPIC_MIN_CACHE_TOKENS",
]

# Anthropic's smallest cacheable prefix by model (its prompt-caching docs, late 2025): a shorter
# marked prefix is neither written nor read, silently
ANTHROPIC_MIN_CACHE_TOKENS: dict[str, int] = {
    "claude-": 1024, "claude-3-haiku": 2048, "claude-3-5-haiku": 2048, "claude-haiku-4-5": 4096,
    "claude-opus-4-5": 4096,
}


@dataclass
class Reply:
    """One scripted answer. A ``status`` >= 400 makes it an error in the provider's error shape."""

    text: str | None = None
    tool_calls: list[tuple[str, dict]] = field(default_factory=list)
    status: int = 200
    error_type: str | None = None  # default derived from status and wire
    error_message: str | None = None
    error_code: str | None = None  # OpenAI error.code; default derived from status
    stop_reason: str | None = None  # any wire's spelling: "max_tokens" == "length" == ...
    refusal: str | None = None
    reasoning_tokens: int = 0
    cut_after_events: int | None = None  # send N SSE events (pings count), or half a JSON body, then drop
    delay_s: float = 0.0  # applied by the server / transports before the response starts
    linger_s: float = 0.0  # the HTTP server holds a stream this long after its last event (a late end)
    retry_after: float | None = None
    usage: dict[str, int] | None = None  # input_tokens, cache_read_tokens, cache_write_tokens, output_tokens
    usage_reported: bool = True  # chat wire: False answers with no usage at all, as some compatible servers do
    model: str | None = None  # model served; default: the model requested
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    json: Any  # parsed body, None when absent or not JSON

    @property
    def wire(self) -> str | None:
        return _wire_of(self.method, self.path)


@dataclass
class Served:
    """One answer the provider generated and billed, as its own log of what it served: the
    reference a test compares a store with. ``usage`` holds the disjoint counters it reported
    (``input_tokens`` uncached, ``cache_read_tokens``, ``cache_write_tokens``, ``output_tokens``,
    ``reasoning_tokens``), or None when it reported none (``usage_reported=False``)."""

    wire: str
    model: str
    stream: bool
    usage: dict[str, int] | None


@dataclass
class FakeResponse:
    status: int
    headers: dict[str, str]
    chunks: list[bytes]  # one SSE event per chunk when streaming; the JSON body otherwise
    cut: bool = False  # the connection must drop after the chunks, with no clean end
    delay_s: float = 0.0
    linger_s: float = 0.0  # wait after the last chunk before the response ends

    @property
    def is_stream(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def json(self) -> Any:
        return json.loads(self.body)


def count_tokens(text: str) -> int:
    """The fake tokenizer: 4 UTF-8 bytes per token, rounded up."""
    return math.ceil(len(text.encode("utf-8")) / 4)


# ---------------------------------------------------------------- request helpers

def _strip_cc(obj: Any) -> Any:
    # a cache mark is not content: moving it must not change a prefix's hash
    return {k: v for k, v in obj.items() if k != "cache_control"} if isinstance(obj, dict) else obj


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, dict) and isinstance(block.get("text"), str):
        return block["text"]
    return dumps(_strip_cc(block))


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return " ".join(_block_text(b) for b in content)
    return _block_text(content)


def _plain_text(x: Any) -> str:
    """Human text only (for the echo): text fields, tool results, function outputs."""
    if isinstance(x, str):
        return x
    if isinstance(x, list):
        return " ".join(t for t in (_plain_text(i) for i in x) if t)
    if isinstance(x, dict):
        for key in ("text", "content", "output", "parts"):
            if key in x:
                return _plain_text(x[key])
    return ""


def _wire_of(method: str, path: str) -> str | None:
    path = path.split("?", 1)[0].rstrip("/")
    if method.upper() != "POST":
        return None
    if path.endswith((":generateContent", ":streamGenerateContent")):
        return "google.gemini"
    for suffix, wire in (("/chat/completions", "openai.chat"), ("/responses", "openai.responses"),
                         ("/embeddings", "openai.embeddings"), ("/completions", "openai.completions"),
                         ("/complete", "anthropic.complete"),
                         ("/messages/count_tokens", "anthropic.count_tokens"),
                         ("/messages", "anthropic.messages")):
        if path.endswith(suffix):
            return wire
    return None


def _anthropic_segments(body: dict) -> list[tuple[str, str, bool]]:
    """(hash material, countable text, has cache mark) in Anthropic's prefix order."""
    segs = [(dumps(_strip_cc(t)), dumps(_strip_cc(t)), "cache_control" in t)
            for t in body.get("tools") or [] if isinstance(t, dict)]
    system = body.get("system")
    blocks = [system] if isinstance(system, str) else (system or [])
    segs += [("system:" + dumps(_strip_cc(b)), _block_text(b), isinstance(b, dict) and "cache_control" in b)
             for b in blocks]
    for m in body.get("messages") or []:
        content = m.get("content")
        for b in [content] if isinstance(content, str) else (content or []):
            segs.append((m.get("role", "") + ":" + dumps(_strip_cc(b)), _block_text(b),
                         isinstance(b, dict) and "cache_control" in b))
    return segs


def _openai_prompt(wire: str, body: dict) -> str:
    parts = [dumps(body["tools"])] if body.get("tools") else []
    if wire == "openai.responses":
        if body.get("instructions"):
            parts.append("system: " + str(body["instructions"]))
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else (items or [])
    else:
        items = body.get("messages") or []
    for m in items:
        if not isinstance(m, dict):
            parts.append(_block_text(m))
            continue
        # a message is "role: text"; anything else it carries (tool calls, call ids, outputs) as JSON
        rest = {k: v for k, v in m.items() if k not in ("role", "content", "type")}
        line = f"{m.get('role') or m.get('type', '')}: {_content_text(m.get('content'))}"
        parts.append(line + (" " + dumps(rest) if rest else ""))
    return "\n".join(parts)


def _gemini_prompt(body: dict) -> str:
    parts = [dumps(body["tools"])] if body.get("tools") else []
    if body.get("systemInstruction"):
        parts.append("system: " + _plain_text(body["systemInstruction"]))
    contents = body.get("contents")
    for content in [{"role": "user", "parts": [{"text": contents}]}] if isinstance(contents, str) else contents or []:
        if isinstance(content, dict):
            parts.append(f"{content.get('role', 'user')}: {dumps(content.get('parts') or [])}")
    return "\n".join(parts)


def _gemini_model(path: str) -> str:
    """The model a Gemini URL names: `/v1beta/models/{model}:generateContent`."""
    return path.split("?", 1)[0].rpartition("/")[2].partition(":")[0] or "fake-model"


def _last_user_text(wire: str, body: dict) -> str:
    if wire in LEGACY_WIRES:  # the last prompt; of an Anthropic one, its last human turn
        prompt = (legacy_prompts(body) or [""])[-1]
        return prompt.rsplit("Human:", 1)[-1].split("\n\nAssistant:", 1)[0].strip() if wire == "anthropic.complete" else prompt
    items = {"openai.responses": body.get("input"),
             "google.gemini": body.get("contents")}.get(wire, body.get("messages"))
    if isinstance(items, str):
        return items
    for m in reversed(items or []):
        if isinstance(m, dict) and m.get("role", "user") == "user":
            return _plain_text(m.get("content", m))
    return ""


# ---------------------------------------------------------------- errors

_OPENAI_ERRORS = {400: ("invalid_request_error", None), 401: ("invalid_request_error", "invalid_api_key"),
                  403: ("permission_error", None), 404: ("invalid_request_error", "not_found"),
                  429: ("requests", "rate_limit_exceeded")}
_ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                     404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                     500: "api_error", 529: "overloaded_error"}
_ERROR_TEXT = {429: "Rate limit exceeded", 529: "Overloaded", 500: "Internal server error"}
_GEMINI_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def _error_response(wire: str | None, status: int, rid: str, *, etype: str | None = None,
                    message: str | None = None, code: str | None = None, param: str | None = None,
                    retry_after: float | None = None, extra: dict | None = None) -> FakeResponse:
    message = message or _ERROR_TEXT.get(status, f"fake error (HTTP {status})")
    if wire and wire.startswith("anthropic"):
        etype = etype or _ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
        body: dict = {"type": "error", "error": {"type": etype, "message": message}, "request_id": rid}
        headers = {"request-id": rid}
    elif wire == "google.gemini":
        status_name = etype or _GEMINI_STATUS.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
        body = {"error": {"code": status, "message": message, "status": status_name}}
        headers = {"x-request-id": rid}
    else:
        dtype, dcode = _OPENAI_ERRORS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
        body = {"error": {"message": message, "type": etype or dtype, "param": param, "code": code or dcode}}
        headers = {"x-request-id": rid}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    return _json_response(status, body, {**headers, **(extra or {})})


def _json_response(status: int, obj: Any, headers: dict[str, str]) -> FakeResponse:
    data = json.dumps(obj, ensure_ascii=False).encode()
    return FakeResponse(status, {"content-type": "application/json", "content-length": str(len(data)),
                                 **headers}, [data])


# ---------------------------------------------------------------- the provider

class FakeProvider:
    """Scriptable, deterministic, thread-safe. See the module docstring for tokens and caching."""

    def __init__(self, *, responder: Callable[[FakeRequest], Reply | None] | None = None,
                 context_window: dict[str, int] | None = None,
                 anthropic_min_cache_tokens: int | Mapping[str, int] = 0, openai_min_cache_tokens: int = 1024,
                 cache_ttl_s: float | None = None, clock: Callable[[], float] | None = None,
                 echo_chars: int = 200) -> None:
        self.responder = responder
        self.context_window = dict(context_window or {})
        self.anthropic_min_cache_tokens = anthropic_min_cache_tokens
        self.openai_min_cache_tokens = openai_min_cache_tokens
        self.cache_ttl_s = cache_ttl_s
        self.clock = clock
        self.echo_chars = echo_chars
        self._lock = threading.RLock()  # the server is threaded; a responder may re-enter
        self.reset()

    def reset(self) -> None:
        """Forget the script, the recorded requests, both caches and the id counter."""
        with self._lock:
            self._queue: deque[Reply] = deque()
            self.requests: list[FakeRequest] = []
            # prefix hash -> when it was last written or read (on `clock`)
            self._anthropic_cache: dict[str, float] = {}
            self._openai_cache: dict[str, float] = {}
            self._seq = itertools.count(1)
            self.served: list[Served] = []  # every answer generated (errors and overflows are not)

    def clear_script(self) -> None:
        """Drop the scripted replies not served yet (the caches and recorded requests stay)."""
        with self._lock:
            self._queue.clear()

    def script(self, *replies: Reply | str) -> FakeProvider:
        """Enqueue replies (a bare string is ``Reply(text=...)``), served FIFO on every path."""
        with self._lock:
            self._queue.extend(Reply(text=r) if isinstance(r, str) else r for r in replies)
        return self

    def evict(self) -> None:
        """Drop every cache entry (a provider evicting under load: the next read misses)."""
        with self._lock:
            self._anthropic_cache.clear()
            self._openai_cache.clear()

    def _now(self) -> float:
        return self.clock() if self.clock is not None else time.time()

    @property
    def pending(self) -> int:
        return len(self._queue)

    # -- the one core function
    def handle(self, method: str, path: str, headers: dict[str, str] | Iterable[tuple[str, str]],
               body: bytes) -> FakeResponse:
        items = headers.items() if isinstance(headers, dict) else headers
        try:
            parsed = json.loads(body.decode("utf-8")) if body else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            parsed = None
        req = FakeRequest(method.upper(), path, {k.lower(): v for k, v in items}, body, parsed)
        with self._lock:
            self.requests.append(req)
            n = next(self._seq)
            return self._handle(req, n)

    def _handle(self, req: FakeRequest, n: int) -> FakeResponse:
        wire, body, rid = req.wire, req.json, f"req_fake{n:06d}"
        if wire is None:
            return _error_response("openai" if "/messages" not in req.path else "anthropic", 404, rid,
                                   message=f"Unknown request URL: {req.method} {req.path}")
        if not isinstance(body, dict):
            return _error_response(wire, 400, rid, message="We could not parse the JSON body of your request.")
        model = _gemini_model(req.path) if wire == "google.gemini" else body.get("model") or "fake-model"
        if wire == "openai.embeddings":
            return self._embeddings(body, model, rid)
        if wire in LEGACY_WIRES:
            prompts = legacy_prompts(body)
            if prompts is None:
                return _error_response(wire, 400, rid, message="'prompt' must be a string or a list of strings",
                                       param="prompt")
            total = sum(count_tokens(prompt) for prompt in prompts)
        elif wire.startswith("anthropic"):
            segs = _anthropic_segments(body)
            total = sum(count_tokens(t) for _, t, _ in segs)
            if wire == "anthropic.count_tokens":
                return _json_response(200, {"input_tokens": total}, {"request-id": rid})
        else:
            prompt = _gemini_prompt(body) if wire == "google.gemini" else _openai_prompt(wire, body)
            total = count_tokens(prompt)
        limit = self.context_window.get(model)
        if limit is not None and total > limit:  # rejected before generation: the script is kept
            return self._overflow(wire, rid, total, limit)

        reply = self._next_reply(req, wire, body)
        extra = dict(reply.headers)
        if self.clock is not None:
            extra.setdefault("date", formatdate(self.clock(), usegmt=True))
        if reply.status >= 400:
            err = _error_response(wire, reply.status, rid, etype=reply.error_type, message=reply.error_message,
                                  code=reply.error_code, retry_after=reply.retry_after, extra=extra)
            err.delay_s = reply.delay_s
            return err

        read, write = ((0, 0) if wire in LEGACY_WIRES else self._anthropic_caching(model, segs)
                       if wire.startswith("anthropic") else self._openai_caching(model, prompt, total))
        turn = self._turn(n, wire, body, model, reply, total, read, write)
        stream = req.path.split("?", 1)[0].endswith(":streamGenerateContent") or bool(body.get("stream"))
        reported = turn.usage_reported and usage_sent(wire, body, stream)
        self.served.append(Served(wire, turn.model, stream, dict(turn.usage) if reported else None))
        idh, render = RENDERERS[wire]
        if reply.retry_after is not None:
            extra["retry-after"] = f"{reply.retry_after:g}"
        obj_or_events = render(turn, body, stream)
        if stream:
            events = obj_or_events
            resp = FakeResponse(200, {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache",
                                      idh: rid, **extra}, events)
            if reply.cut_after_events is not None:
                resp.chunks, resp.cut = events[: reply.cut_after_events], True
        else:
            resp = _json_response(200, obj_or_events, {idh: rid, **extra})
            if reply.cut_after_events is not None:  # half a body behind a full content-length
                resp.chunks, resp.cut = [resp.chunks[0][: len(resp.chunks[0]) // 2]], True
        resp.delay_s, resp.linger_s = reply.delay_s, reply.linger_s
        return resp

    def _embeddings(self, body: dict, model: str, rid: str) -> FakeResponse:
        texts = inputs_of(body)
        if texts is None:
            return _error_response("openai.embeddings", 400, rid, message="'input' must be a string or a list of strings",
                                   param="input")
        tokens = sum(count_tokens(text) for text in texts)
        self.served.append(Served("openai.embeddings", model, False, {
            "input_tokens": tokens, "cache_read_tokens": 0, "cache_write_tokens": 0, "output_tokens": 0,
            "reasoning_tokens": 0}))
        return _json_response(200, render_embeddings(texts, model, tokens, body.get("encoding_format")),
                              {"x-request-id": rid})

    def _overflow(self, wire: str, rid: str, total: int, limit: int) -> FakeResponse:
        if wire.startswith("anthropic"):
            return _error_response(wire, 400, rid, etype="invalid_request_error",
                                   message=f"prompt is too long: {total} tokens > {limit} maximum")
        if wire == "openai.responses":
            msg = "Your input exceeds the context window of this model. Please adjust your input and try again."
            param = "input"
        else:
            msg, param = (f"This model's maximum context length is {limit} tokens. However, your messages resulted "
                          f"in {total} tokens. Please reduce the length of the messages."), "messages"
        return _error_response(wire, 400, rid, etype="invalid_request_error", message=msg,
                               code="context_length_exceeded", param=param)

    def _next_reply(self, req: FakeRequest, wire: str, body: dict) -> Reply:
        if self._queue:
            return self._queue.popleft()
        if self.responder is not None:
            reply = self.responder(req)
            if reply is not None:
                return reply
        return Reply(text="echo: " + _last_user_text(wire, body)[: self.echo_chars])

    # -- caching (see the module docstring)
    def _anthropic_minimum(self, model: str) -> int:
        minimum = self.anthropic_min_cache_tokens
        if isinstance(minimum, int):
            return minimum
        matches = [prefix for prefix in minimum if model.startswith(prefix)]
        return minimum[max(matches, key=len)] if matches else 0

    def _live(self, cache: dict[str, float], digest: str, now: float) -> bool:
        used = cache.get(digest)
        return used is not None and (self.cache_ttl_s is None or now - used <= self.cache_ttl_s)

    def _anthropic_caching(self, model: str, segs: list[tuple[str, str, bool]]) -> tuple[int, int]:
        h = hashlib.sha256(f"anthropic|{model}".encode())
        hashes, cum, tokens = [], [], 0
        for material, text, _ in segs:
            h.update(material.encode() + b"\x00")
            hashes.append(h.hexdigest())
            tokens += count_tokens(text)
            cum.append(tokens)
        minimum = self._anthropic_minimum(model)
        marks = [i for i, s in enumerate(segs) if s[2] and cum[i] >= minimum and cum[i] > 0]
        if not marks:
            return 0, 0
        now = self._now()
        # like the real API, each breakpoint also looks back up to 20 blocks for an earlier entry
        candidates = {i for m in marks for i in range(max(0, m - 19), m + 1)}
        hit = max((i for i in candidates if self._live(self._anthropic_cache, hashes[i], now)), default=None)
        read = cum[hit] if hit is not None else 0
        write = cum[marks[-1]] - read
        for index in [*marks, *([hit] if hit is not None else [])]:  # a read renews its entry
            self._anthropic_cache[hashes[index]] = now
        return read, write

    def _openai_caching(self, model: str, prompt: str, total: int) -> tuple[int, int]:
        if total < self.openai_min_cache_tokens:
            return 0, 0
        now = self._now()
        data = prompt.encode("utf-8")
        h, done, seen, cached = hashlib.sha256(f"openai|{model}".encode()), 0, [], 0
        for k in range(self.openai_min_cache_tokens, total + 1, 128):  # incremental: O(prompt)
            h.update(data[done: 4 * k])
            done = 4 * k
            digest = h.hexdigest()
            if self._live(self._openai_cache, digest, now):
                cached = k
            seen.append(digest)
        self._openai_cache.update(dict.fromkeys(seen, now))
        return cached, 0

    def _turn(self, n: int, wire: str, body: dict, model: str, reply: Reply, total: int,
              read: int, write: int) -> Turn:
        prefix = "toolu_fake" if wire.startswith("anthropic") else "call_fake"
        calls = [(f"{prefix}{n:06d}_{i}", name, dumps(args) if not isinstance(args, str) else args)
                 for i, (name, args) in enumerate(reply.tool_calls)]
        text, stop = reply.text, reply.stop_reason
        limit = (body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens")
                 or (body.get("generationConfig") or {}).get("maxOutputTokens") or body.get("max_tokens_to_sample"))

        def visible(t: str | None) -> int:
            return count_tokens((t or "") + (reply.refusal or "")) + sum(count_tokens(nm + a) for _, nm, a in calls)

        if stop is None and isinstance(limit, int) and visible(text) + reply.reasoning_tokens > limit:
            # honest truncation: the text is cut to the budget and the stop reason says so
            keep = max(0, limit - reply.reasoning_tokens) * 4
            text = (text or "").encode()[:keep].decode("utf-8", "ignore") if text is not None else None
            stop = "length"
        if stop is None:  # any wire's spelling; each renderer maps it to its own
            stop = "tool_use" if calls else "refusal" if reply.refusal and wire.startswith("anthropic") else "end_turn"
        # legacy completions bill every completion generated: each prompt's n (or best_of)
        copies = len(legacy_prompts(body) or [""]) * legacy_copies(body) if wire == "openai.completions" else 1
        usage = {"input_tokens": total - read - write, "cache_read_tokens": read, "cache_write_tokens": write,
                 "output_tokens": max(1, visible(text) + reply.reasoning_tokens) * copies,
                 "reasoning_tokens": reply.reasoning_tokens}
        usage.update(reply.usage or {})
        return Turn(n, reply.model or model, text, reply.refusal, calls, stop, usage, reply.usage_reported)


# ---------------------------------------------------------------- in-process transports

def make_transports(hx: Any) -> tuple[type, type]:
    """Build (sync, async) transports over an httpx-compatible module (httpx2 or httpx).

    The response body streams one chunk at a time; a cut response raises the module's
    ``RemoteProtocolError`` after its last chunk, as a dropped connection does. ``delay_s`` is
    slept before the response is returned (no timeout is enforced in-process).
    """
    import asyncio

    def _cut_error(request: Any) -> Exception:
        return hx.RemoteProtocolError(
            "peer closed connection without sending complete message body (fake provider cut)", request=request)

    class _Body(hx.SyncByteStream, hx.AsyncByteStream):
        def __init__(self, resp: FakeResponse, request: Any) -> None:
            self._resp, self._request = resp, request

        def __iter__(self):
            yield from self._resp.chunks
            if self._resp.cut:
                raise _cut_error(self._request)

        async def __aiter__(self):
            for chunk in self._resp.chunks:
                yield chunk
            if self._resp.cut:
                raise _cut_error(self._request)

    def _call(provider: FakeProvider, request: Any, body: bytes) -> FakeResponse:
        return provider.handle(request.method, request.url.raw_path.decode("ascii"),
                               list(request.headers.items()), body)

    class Transport(hx.BaseTransport):
        def __init__(self, provider: FakeProvider) -> None:
            self.provider = provider

        def handle_request(self, request: Any) -> Any:
            resp = _call(self.provider, request, request.read())
            if resp.delay_s:
                time.sleep(resp.delay_s)
            return hx.Response(resp.status, headers=list(resp.headers.items()),
                               stream=_Body(resp, request), request=request)

    class AsyncTransport(hx.AsyncBaseTransport):
        def __init__(self, provider: FakeProvider) -> None:
            self.provider = provider

        async def handle_async_request(self, request: Any) -> Any:
            resp = _call(self.provider, request, await request.aread())
            if resp.delay_s:
                await asyncio.sleep(resp.delay_s)
            return hx.Response(resp.status, headers=list(resp.headers.items()),
                               stream=_Body(resp, request), request=request)

    Transport.__qualname__ = Transport.__name__ = f"FakeTransport[{hx.__name__}]"
    AsyncTransport.__qualname__ = AsyncTransport.__name__ = f"AsyncFakeTransport[{hx.__name__}]"
    return Transport, AsyncTransport


try:
    import httpx2 as _httpx2
except ImportError:  # the core above stays usable without it
    FakeTransport = AsyncFakeTransport = None  # type: ignore[assignment,misc]
else:
    FakeTransport, AsyncFakeTransport = make_transports(_httpx2)

try:
    import httpx as _httpx
except ImportError:
    HttpxFakeTransport = AsyncHttpxFakeTransport = None  # type: ignore[assignment,misc]
else:
    HttpxFakeTransport, AsyncHttpxFakeTransport = make_transports(_httpx)
