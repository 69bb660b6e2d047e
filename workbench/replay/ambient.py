"""Ambient cassettes: `with workbench.cassette(path, mode=...):` puts a cassette in scope, and every
client Workbench sees — built before or inside the block, by your code or deep in a library, through
`http_client()`, `httpx_client()` (and their async twins) or, after `instrument()`, the SDKs' own
default clients — records into it and replays from it. The pytest plugin opens one for each test
that has a cassette.

Which cassette a request uses:
- the innermost scope of the code that sends it: scopes nest, and leaving one restores the one
  around it; a scope in `live` mode means "no cassette here";
- asyncio tasks started inside a scope use it (a task copies its context when created);
- a thread has no scope of its own unless it opens one (Python threads start with an empty
  context), so it uses the most recently opened scope still open in the process — the running
  test's, as vcrpy's process-wide patching would;
- a client bound to a cassette (`http_client(cassette=...)`, `Cassette.http_client()`) keeps its own;
- each process has its own scopes: pytest-xdist workers never see each other's cassettes.

Capture asks for the transport through `workbench.capture.route`; this module answers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import httpx
import httpx2

from workbench.capture.route import set_router
from workbench.config import RecordMode
from workbench.replay.clients import (
    AsyncHttpxReplayTransport, AsyncReplayTransport, HttpxReplayTransport, ReplayTransport,
)
from workbench.replay.scrub import BodyHook
from workbench.replay.session import Cassette

_SCOPE: ContextVar[Cassette] = ContextVar("workbench_ambient_cassette")
_open: list[Cassette] = []  # every scope open in the process, in the order opened
_lock = threading.Lock()
_REPLAY = {
    (httpx2, False): ReplayTransport, (httpx2, True): AsyncReplayTransport,
    (httpx, False): HttpxReplayTransport, (httpx, True): AsyncHttpxReplayTransport,
}
_BOUND = tuple(_REPLAY.values())


def current() -> Cassette | None:
    """The cassette in scope here (see the module's rule), or None."""
    try:
        session = _SCOPE.get()
    except LookupError:
        with _lock:
            session = _open[-1] if _open else None
    return None if session is None or session.mode == "live" else session


@contextmanager
def cassette(path: Cassette | Path | str, mode: RecordMode | None = None,
             body_hook: BodyHook | None = None) -> Iterator[Cassette]:
    """Record into and replay from one cassette, for every client Workbench sees, inside the block.

    `mode`: replay (default: `WORKBENCH_RECORD_MODE`, else replay), record, rerecord or live. The
    cassette is saved when the block ends."""
    session = path if isinstance(path, Cassette) else Cassette(path, mode, body_hook)
    token = _SCOPE.set(session)
    with _lock:
        _open.append(session)
    try:
        yield session
    finally:
        try:
            _SCOPE.reset(token)
        except ValueError:  # left in another context than it was entered (a generator resumed elsewhere)
            pass
        with _lock:
            for position in range(len(_open) - 1, -1, -1):
                if _open[position] is session:
                    del _open[position]
                    break
        session.save()


def replaying(session: Cassette, inner, module, asynchronous: bool):
    """`inner` behind `session`'s replay transport; a client bound to a cassette keeps its own, and
    a library Workbench does not replay keeps `inner`."""
    if isinstance(inner, _BOUND):
        return inner
    replay = _REPLAY.get((module, asynchronous))
    return inner if replay is None else replay(session, inner)


def _route(inner, module, asynchronous: bool):
    session = current()
    return inner if session is None else replaying(session, inner, module, asynchronous)


set_router(_route)
