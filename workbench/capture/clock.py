"""Capture's clock: every time a recording carries (a call's start, first byte and end, a run's
start and end, their spans, span events and compactions, an eval run's start and end) is read
here, so traffic can be recorded as of another time: `workbench demo` records a month of traffic in
seconds, through the same transports, runs and spool as live traffic.

The clock is the wall clock plus a shift held in a context variable (threads and asyncio tasks
each keep their own, as they keep the current run). A shift moves the origin, never the rate:
what a call took is what it really took."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone

_shift_ns: ContextVar[int | None] = ContextVar("workbench_clock_shift_ns", default=None)  # None: not backdated


def shift_ns() -> int:
    """How far capture's clock is from the wall clock, in nanoseconds (0 unless backdated)."""
    return _shift_ns.get() or 0


def now_ns() -> int:
    return time.time_ns() + (_shift_ns.get() or 0)


def now() -> datetime:
    return datetime.fromtimestamp(now_ns() / 1e9, tz=timezone.utc)


@contextmanager
def backdated(at: datetime) -> Iterator[None]:
    """Within the block, capture's clock reads `at` at its start and runs on from there."""
    if at.tzinfo is None:
        raise ValueError("backdated() needs an aware datetime")
    token = _shift_ns.set(int(at.timestamp() * 1e9) - time.time_ns())
    try:
        yield
    finally:
        _shift_ns.reset(token)


def skip(seconds: float) -> None:
    """Move capture's clock `seconds` forward in the current context: the pause between a user's
    messages, replayed without waiting for it. Only inside `backdated`, whose end undoes it."""
    shift = _shift_ns.get()
    if shift is None:
        raise RuntimeError("clock.skip() outside clock.backdated(): the wall clock cannot be moved")
    _shift_ns.set(shift + int(seconds * 1e9))
