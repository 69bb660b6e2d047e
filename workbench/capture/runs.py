"""Runs: `with workbench.run("name", **tags) as run:` attributes every call inside it, however
deeply nested, through a contextvar (so threads and asyncio tasks each keep their own), bills it
to the run and to every run around it, and stores a run that raised as failed with its bill."""

from __future__ import annotations

import functools
import inspect
import json
import threading
from contextvars import ContextVar, Token
from datetime import datetime
from dataclasses import field, make_dataclass

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from pydantic import BaseModel

from workbench.ids import new_id
from workbench.capture import clock, semconv
from workbench.capture.tracing import tracer
from workbench.money import minor_units
from workbench.wire.call import Call

_current: ContextVar[Run | None] = ContextVar("workbench_run", default=None)
_BILLED_ATTR = "__workbench_billed__"


class Billed(BaseModel):
    """What a run was billed: usage over every call that answered, its exact cost, the calls."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_micros: int = 0  # exact; unpriced calls add nothing here and are counted below
    currency: str = "USD"
    calls: int = 0  # calls that answered with usage
    unsettled: int = 0  # calls started that never reported usage: counted, never estimated
    unpriced_calls: int = 0

    @property
    def cost(self) -> int:
        """The cost in minor units (cents), rounded up once."""
        return minor_units(self.cost_micros)


# a run's running bill: `Billed`'s fields as plain slots (a model's checked attribute set would cost
# ten times as much on every call)
_Tally = make_dataclass(
    "_Tally", [(name, info.annotation, field(default=info.default)) for name, info in Billed.model_fields.items()],
    slots=True,
)


def current_run() -> Run | None:
    return _current.get()


class Run:
    def __init__(self, name: str, kind: str, tags: dict, parent: Run | None, prompt: dict | None) -> None:
        self.run_id = new_id()
        self.name = name
        self.kind = kind
        self.tags = {key: str(value) for key, value in tags.items()}
        self.parent = parent
        self.prompt = prompt or (parent.prompt if parent else None) or {}
        self.status = "running"
        self.error_code: str | None = None
        self.error_type: str | None = None
        self.error_message: str | None = None
        self.started_at = clock.now()
        self.ended_at: datetime | None = None
        self.calls: list[Call] = []
        self.span: trace.Span | None = None
        self._billed = _Tally()
        self._attributed = 0  # calls billed here, from this run or a run inside it
        self._lock = threading.Lock()

    @property
    def billed(self) -> Billed:
        with self._lock:
            return Billed(**{name: getattr(self._billed, name) for name in _Tally.__slots__})

    @property
    def has_bill(self) -> bool:
        return self._attributed > 0

    def _charge(self, call: Call) -> None:
        with self._lock:
            billed = self._billed
            self._attributed += 1
            if call.settled:
                usage = call.usage
                billed.input_tokens += usage.input_tokens
                billed.cache_read_tokens += usage.cache_read_tokens
                billed.cache_write_tokens += usage.cache_write_tokens
                billed.output_tokens += usage.output_tokens
                billed.reasoning_tokens += usage.reasoning_tokens
                billed.calls += 1
                if call.cost_micros is None:
                    billed.unpriced_calls += 1
                else:
                    billed.cost_micros += call.cost_micros
                    billed.currency = call.currency or billed.currency
            elif call.http_status is None or call.http_status < 400:
                billed.unsettled += 1  # an HTTP error answered and was not billed

    def attribute(self, call: Call) -> None:
        """Bill `call` to this run and every run around it."""
        self.calls.append(call)
        run: Run | None = self
        while run is not None:
            run._charge(call)
            run = run.parent

    def row(self) -> dict:
        billed = self._billed
        bill = self.has_bill
        context = self.span.get_span_context() if self.span is not None else None
        return {
            "run_id": self.run_id, "parent_run_id": self.parent.run_id if self.parent else None,
            "name": self.name, "kind": self.kind, "status": self.status, "error_code": self.error_code,
            "error_type": self.error_type, "error_message": self.error_message,
            "started_at": self.started_at.isoformat(), "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "tags": orjson.dumps(self.tags, option=orjson.OPT_SORT_KEYS).decode(),
            "trace_id": format(context.trace_id, "032x") if context else None,
            "span_id": format(context.span_id, "016x") if context else None,
            "prompt_id": self.prompt.get("prompt_id"), "prompt_version": self.prompt.get("prompt_version"),
            "prompt_hash": self.prompt.get("prompt_hash"),
            **{
                f"billed_{name}": (getattr(billed, name) if bill else None)
                for name in (
                    "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
                    "reasoning_tokens", "cost_micros", "unpriced_calls", "calls", "unsettled",
                )
            },
        }


class RunScope:
    """What `workbench.run(...)` returns: a sync or async context manager, or a decorator that
    opens a fresh run on every call of the function it wraps."""

    def __init__(self, name: str, kind: str = "app", prompt: dict | None = None, **tags) -> None:
        self.name, self.kind, self.prompt, self.tags = name, kind, prompt, tags
        self._open: list[tuple[Run, Token, object]] = []

    def __enter__(self) -> Run:
        from workbench.capture.recorder import recorder

        run = Run(self.name, self.kind, self.tags, current_run(), self.prompt)
        attributes = {semconv.RUN_ID: run.run_id, semconv.RUN_NAME: run.name, semconv.RUN_KIND: run.kind}
        if run.kind == "agent":
            span_name = f"invoke_agent {run.name}"
            attributes.update({semconv.OPERATION_NAME: "invoke_agent", semconv.AGENT_NAME: run.name})
        else:
            span_name = f"run {run.name}"
        run.span = tracer().start_span(span_name, attributes=attributes,
                                      start_time=int(run.started_at.timestamp() * 1e9))
        span_token = otel_context.attach(trace.set_span_in_context(run.span))
        self._open.append((run, _current.set(run), span_token))
        recorder().record_run(run)
        return run

    def __exit__(self, exc_type, exc, tb) -> None:
        from workbench.capture.recorder import recorder

        run, token, span_token = self._open.pop()
        run.ended_at = clock.now()
        if exc is None:
            run.status = "ok"
        else:
            run.status = "failed"
            run.error_type = type(exc).__name__
            run.error_code = getattr(exc, "code", None) if isinstance(getattr(exc, "code", None), str) else None
            run.error_message = str(exc)[:2000]
            if run.has_bill:
                try:  # the outermost run's bill wins: it is the last to see the exception
                    setattr(exc, _BILLED_ATTR, run.billed)
                except (AttributeError, TypeError):
                    pass
            run.span.set_status(trace.Status(trace.StatusCode.ERROR, run.error_message[:200]))
            run.span.set_attribute(semconv.ERROR_TYPE, run.error_code or run.error_type)
        run.span.set_attribute(semconv.COST_MICROS, run._billed.cost_micros)
        run.span.end(end_time=int(run.ended_at.timestamp() * 1e9))
        otel_context.detach(span_token)
        _current.reset(token)
        recorder().record_run(run)

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, function):
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_wrapper(*args, **kwargs):
                async with RunScope(self.name, self.kind, self.prompt, **self.tags):
                    return await function(*args, **kwargs)

            return async_wrapper

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with RunScope(self.name, self.kind, self.prompt, **self.tags):
                return function(*args, **kwargs)

        return wrapper


def run(name: str, kind: str = "app", prompt: dict | None = None, **tags) -> RunScope:
    """Open a run: `with run("checkout", user="u1") as r: ...`, `async with`, or `@run("job")`."""
    return RunScope(name, kind, prompt, **tags)


def billed_of(exc: BaseException) -> Billed | None:
    """The bill of the outermost run `exc` escaped from, or None when that run made no call."""
    return getattr(exc, _BILLED_ATTR, None)


def event(name: str, **attributes) -> None:
    """Record an application's own span event on the current span (e.g. `agent.compact` from its
    own agent loop). An `agent.compact` event also becomes a `compactions` row."""
    from workbench.capture.recorder import recorder

    clean = {
        key: value if isinstance(value, (str, bool, int, float)) else json.dumps(value, default=str)
        for key, value in attributes.items()
        if value is not None
    }
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(name, clean, timestamp=clock.now_ns())
    if name == semconv.EVENT_AGENT_COMPACT:
        recorder().record_compaction(current_run(), span, attributes)
