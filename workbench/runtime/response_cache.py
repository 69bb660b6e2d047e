"""The gateway's exact-match response cache: `Gateway(..., cache=ResponseCache())`.

A hit answers a model call with an earlier answer to the SAME request bytes, without sending it:
nothing is reserved, billed or recorded as a call. The key is the scope, the declared prompt's hash
and the request exactly as the provider would receive it (every tool whole, the model, the
parameters), so a prompt version bump or an edited output schema reaches another entry.

Scope is the narrowest by default: the actor the call is made for (`llm(..., actor=...)`,
`Agent.run(..., actor=...)`, or `with acting_for("user-42"):`), else the outermost run the call is
made in, so one user's answer is never served to another. `ResponseCache(shared=True)` is the
written statement that every caller may read every answer.

Only a settled, complete answer is stored: never a refusal (a cached refusal keeps serving a
classifier decision after the prompt was fixed), a cut or truncated answer, or an error. Every hit
is recorded as a `response_cache_hits` row (what it saved, which call it re-served), which the
reports and the dashboard read."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import OrderedDict
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Iterator

from workbench.capture import current_run, event, recorder, semconv
from workbench.ids import new_id
from workbench.runtime.messages import Completion
from workbench.runtime.options import count, number
from workbench.wire.canonical import digest

_actor: ContextVar[str | None] = ContextVar("workbench_actor", default=None)


@contextlib.contextmanager
def acting_for(actor: str | None) -> Iterator[None]:
    """Calls inside the block are made for `actor` (the response cache's scope); None keeps the
    actor of the block around it."""
    if actor is None:
        yield
        return
    token = _actor.set(str(actor))
    try:
        yield
    finally:
        _actor.reset(token)


def current_scope(shared: bool) -> str | None:
    if shared:
        return "shared"
    actor = _actor.get()
    if actor is not None:
        return f"actor:{actor}"
    run = current_run()
    while run is not None and run.parent is not None:
        run = run.parent
    return f"run:{run.run_id}" if run is not None else None  # outside any run: nothing to scope by


class ResponseCache:
    """In memory, least recently used first out; `ttl_s` None keeps an entry until evicted."""

    def __init__(self, max_entries: int = 1024, ttl_s: float | None = None, *, shared: bool = False) -> None:
        self.max_entries = count("ResponseCache.max_entries", max_entries)
        self.ttl_s = number("ResponseCache.ttl_s", ttl_s, 0, low_open=True, optional=True)
        self.shared = shared
        self.hits = 0
        self._entries: OrderedDict[str, tuple[float, Completion]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, wire: str, body: bytes, prompt_hash: str | None) -> str | None:
        scope = current_scope(self.shared)
        if scope is None:
            return None
        return digest({"scope": scope, "prompt_hash": prompt_hash, "wire": wire,
                       "body": body.decode("utf-8", "replace")})

    def get(self, key: str | None) -> Completion | None:
        if key is None:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            stored_at, completion = entry
            if self.ttl_s is not None and time.monotonic() - stored_at > self.ttl_s:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        return dataclasses.replace(completion, cached=True, cost_micros=0, attempts=0)

    def put(self, key: str | None, completion: Completion) -> None:
        call = completion.call
        if key is None or completion.cached or completion.stop not in ("end", "tool") or completion.refusal \
                or not call.settled or call.error_type:
            return
        with self._lock:
            self._entries[key] = (time.monotonic(), completion)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


def record_hit(completion: Completion, model: str) -> None:
    """The hit as a `response_cache_hits` row and a `gateway.cache_hit` event; fail-open."""
    call, run = completion.call, current_run()
    usage = call.usage
    row = {
        "hit_id": new_id(), "run_id": run.run_id if run else None,
        "occurred_at": datetime.now(timezone.utc).isoformat(), "model": model, "provider": completion.provider,
        "prompt_id": run.prompt.get("prompt_id") if run else None,
        "prompt_version": run.prompt.get("prompt_version") if run else None,
        "prompt_hash": run.prompt.get("prompt_hash") if run else None,
        "call_id": call.call_id, "input_tokens": usage.input_tokens, "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens, "output_tokens": usage.output_tokens,
        "saved_cost_micros": call.cost_micros, "currency": call.currency,
    }
    event(semconv.EVENT_GATEWAY_CACHE_HIT, model=model, call_id=call.call_id, saved_cost_micros=call.cost_micros)
    try:
        recorder().spool.append("cache_hit", row)
    except Exception:  # noqa: BLE001 - recording never breaks the call
        pass
