"""Runs: `with workbench.run("name", **tags) as run:` attributes every call inside it, however
deeply nested, through a contextvar (so threads and asyncio tasks each keep their own), bills it
to the run and to every run around it, and stores a run that raised as failed with its bill."""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import json
import os
import threading
from contextvars import ContextVar, Token
from datetime import datetime
from dataclasses import field, make_dataclass

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from pydantic import BaseModel, ConfigDict

from workbench.ids import new_id
from workbench.capture import clock, semconv
from workbench.capture.route import RESUME_ENV, open_resume
from workbench.capture.tracing import masked_text, tracer
from workbench.money import format_costs, minor_units
from workbench.wire.call import Call
from workbench.wire.redact import mask_secrets

_current: ContextVar[Run | None] = ContextVar("workbench_run", default=None)
_BILLED_ATTR = "__workbench_billed__"


class CurrencyPart(BaseModel):
    """A bill's money in a currency other than its main one: exact, never added to another currency."""

    model_config = ConfigDict(defer_build=True)

    cost_micros: int = 0  # the live calls priced in it, exact
    calls: int = 0  # live calls priced in it (inside `Billed.calls`)
    replayed_cost_micros: int = 0  # what the replayed calls priced in it would have cost, exact
    replayed_calls: int = 0  # replayed calls priced in it (inside `Billed.replayed_calls`)


class Billed(BaseModel):
    """What a run was billed: money that left the account. Usage and exact cost over every live call
    that answered; replayed calls (answered from a cassette, never paid) are counted apart, with what
    they would have cost; calls nothing priced are counted, never taken as free. Money of two
    currencies is never added: the money fields are in `currency`, the currency of the run's first
    priced call, and every other currency's money is apart in `other_currencies`, each billed
    (rounded up) on its own."""

    model_config = ConfigDict(defer_build=True)  # see `workbench.models.PriceTier`

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_micros: int = 0  # exact, live calls in `currency`; unpriced calls add nothing here and are counted below
    currency: str = "USD"  # the main currency: the one the run's first priced call was priced in
    calls: int = 0  # live calls that answered with usage
    unsettled: int = 0  # calls started that never reported usage: counted, never estimated
    unpriced_calls: int = 0  # live calls that answered and that no price covers
    replayed_calls: int = 0  # calls answered from a cassette: not paid, not in the figures above
    replayed_cost_micros: int = 0  # what the priced ones would have cost, exact, in `currency`
    replayed_unpriced_calls: int = 0
    other_currencies: dict[str, CurrencyPart] = {}  # money priced in any other currency, by currency

    @property
    def cost(self) -> int:
        """The bill in minor units (cents) of `currency`: the exact cost rounded up once."""
        return minor_units(self.cost_micros)

    @classmethod
    def of_row(cls, row: dict) -> Billed | None:
        """The bill of a stored `runs` row (its `billed_*` columns); None when the run made no call."""
        if row.get("billed_calls") is None:
            return None
        other = row.get("billed_other_currencies")
        return cls(**{name: row.get(f"billed_{name}") or 0 for name in cls.model_fields
                      if f"billed_{name}" in row and name not in ("currency", "other_currencies")},
                   currency=row.get("billed_currency") or "USD", other_currencies=orjson.loads(other) if other else {})

    def by_currency(self) -> dict[str, CurrencyPart]:
        """Every currency's money, the main one first; a currency appears when a call was priced in it
        (the main one always, so a bill with nothing priced still names its currency)."""
        others = sum(part.calls for part in self.other_currencies.values())
        replayed_others = sum(part.replayed_calls for part in self.other_currencies.values())
        main = CurrencyPart(cost_micros=self.cost_micros, calls=self.calls - self.unpriced_calls - others,
                            replayed_cost_micros=self.replayed_cost_micros,
                            replayed_calls=self.replayed_calls - self.replayed_unpriced_calls - replayed_others)
        return {self.currency: main, **self.other_currencies}

    def __add__(self, other: Billed) -> Billed:
        """Two bills as one (an earlier run of a conversation and this one): counts summed, money
        summed per currency; the main currency is the first bill's, unless it priced nothing."""
        priced = self.calls - self.unpriced_calls + self.replayed_calls - self.replayed_unpriced_calls
        main = self.currency if priced else other.currency
        parts: dict[str, CurrencyPart] = {}
        for bill in (self, other):
            for currency, part in bill.by_currency().items():
                held = parts.setdefault(currency, CurrencyPart())
                for name in CurrencyPart.model_fields:
                    setattr(held, name, getattr(held, name) + getattr(part, name))
        mine = parts.pop(main, CurrencyPart())
        return Billed(**{name: getattr(self, name) + getattr(other, name) for name in Billed.model_fields
                         if name not in ("currency", "cost_micros", "replayed_cost_micros", "other_currencies")},
                      currency=main, cost_micros=mine.cost_micros, replayed_cost_micros=mine.replayed_cost_micros,
                      other_currencies={currency: part for currency, part in parts.items()
                                        if part.calls or part.replayed_calls})

    @property
    def full_cost_micros(self) -> int | None:
        """What every answered call cost or, replayed, would have cost: the figure to compare a run
        replayed from cassettes with one that paid. None when a call was unpriced, or when calls were
        priced in two currencies (no one figure is their sum)."""
        return _full_cost(self)

    def money(self, replayed: bool = False, rounded: bool = False) -> str:
        """The live calls' exact cost (`replayed`: what the replayed calls would have cost; `rounded`: the
        bill, each currency rounded up once) per currency, joined: `0.000246 USD + 0.0005 EUR`. A
        currency is named where a call was priced in it (the main one when none was)."""
        return format_costs(self.costs(replayed) or {self.currency: 0}, bill=rounded)

    def costs(self, replayed: bool = False) -> dict[str, int]:
        """The live (`replayed`: replayed) calls' money per currency a call was priced in."""
        field, counted = ("replayed_cost_micros", "replayed_calls") if replayed else ("cost_micros", "calls")
        return {currency: getattr(part, field) for currency, part in self.by_currency().items() if getattr(part, counted)}

    def __str__(self) -> str:
        """`3 live calls: 0.000246 USD exact, bill 0.01 USD, 1 unpriced; 2 replayed: would cost 0.0007 USD`;
        two currencies: `2 live calls: 0.000246 USD + 0.0005 EUR exact, bill 0.01 USD + 0.01 EUR`."""
        def calls(count: int, kind: str) -> str:
            return f"{count:,} {kind} call{'' if count == 1 else 's'}"

        if not self.calls:
            parts = ["nothing paid"]
        elif self.calls == self.unpriced_calls:
            parts = [f"{calls(self.calls, 'live')}: unpriced"]
        else:
            parts = [f"{calls(self.calls, 'live')}: {self.money()} exact, bill {self.money(rounded=True)}"
                     + (f", {self.unpriced_calls:,} unpriced" if self.unpriced_calls else "")]
        if self.unsettled:
            parts[0] += f"; {self.unsettled:,} unsettled"
        if self.replayed_calls:
            would = format_costs(self.costs(replayed=True), self.replayed_unpriced_calls)
            parts.append(f"{calls(self.replayed_calls, 'replayed')}: would cost {would}")
        return "; ".join(parts)


def _full_cost(billed) -> int | None:
    """`Billed.full_cost_micros` of a `Billed` or of a run's running `_Tally`."""
    if billed.unpriced_calls or billed.replayed_unpriced_calls or billed.other_currencies:
        return None
    return billed.cost_micros + billed.replayed_cost_micros


def _other_currency(billed, call: Call, replayed: bool) -> None:
    """Add to a running `_Tally` a priced call whose currency is not its main one (or the first priced
    call, whose currency becomes the main one); its counts are in already."""
    currency = call.currency or "USD"
    if billed.currency is None:  # the run's first priced call names its main currency
        billed.currency = currency
    if currency == billed.currency:
        if replayed:
            billed.replayed_cost_micros += call.cost_micros
        else:
            billed.cost_micros += call.cost_micros
        return
    part = billed.other_currencies.get(currency)
    if part is None:
        part = billed.other_currencies[currency] = CurrencyPart()
    if replayed:
        part.replayed_cost_micros += call.cost_micros
        part.replayed_calls += 1
    else:
        part.cost_micros += call.cost_micros
        part.calls += 1


# a run's running bill: `Billed`'s fields as plain slots (a model's checked attribute set would cost
# ten times as much on every call); its `currency` is None until a call is priced
_Tally = make_dataclass(
    "_Tally", [(name, info.annotation, field(default_factory=dict) if name == "other_currencies"
                else field(default=None if name == "currency" else info.default))
               for name, info in Billed.model_fields.items()],
    slots=True,
)


def current_run() -> Run | None:
    return _current.get()


class Run:
    # the models of its unpriced calls (an eval's no-verdict names them); replaced, never added to in
    # place: the shared empty default costs a run nothing when every call is priced
    unpriced_models: frozenset[str] = frozenset()
    sent: frozenset[str] = frozenset()  # the credential values its calls sent: the same way, for the same reason

    def __init__(self, name: str, kind: str, tags: dict, parent: Run | None, prompt: dict | None) -> None:
        self.run_id = new_id()
        # a name or tag is the app's own text and may hold a pasted key: masked as a call's text is,
        # before it reaches the span, the spool or the store
        # (through the spans' memory of short texts found clean: an eval's runs repeat their tag keys
        # and most names and values, case after case)
        self.name = masked_text(name)
        self.kind = kind
        self.tags = {masked_text(str(key)): masked_text(str(value)) for key, value in tags.items()}
        self.parent = parent
        self.prompt = prompt or (parent.prompt if parent else None) or {}
        self.status = "running"
        self.error_code: str | None = None
        self.error_type: str | None = None
        self.error_message: str | None = None
        self.started_at = clock.now()
        self.ended_at: datetime | None = None
        self.calls: list[Call] = []
        # keeps the calls of the runs inside it too: an eval case's, whose scorers read every call the
        # case made (`llm()` makes its calls in a run of its own); other runs keep only their own, so a
        # long-lived outer run holds no list of every call
        self.gathers = False
        self.span: trace.Span | None = None
        self.resumed_from_run_id: str | None = None
        # what answers this run's calls (and its inner runs') before the network: a resumed run's
        # earlier answers, set by replay (`workbench.replay.resume`)
        self.source: object | None = None
        self._billed = _Tally()
        self._attributed = 0  # calls billed here, from this run or a run inside it
        self._lock = threading.Lock()

    @property
    def billed(self) -> Billed:
        with self._lock:
            tally = self._billed
            # the parts copied: the tally goes on adding to its own
            return Billed(**{name: getattr(tally, name) for name in _Tally.__slots__
                             if name not in ("currency", "other_currencies")}, currency=tally.currency or "USD",
                          other_currencies={currency: part.model_copy() for currency, part in tally.other_currencies.items()})

    @property
    def full_cost_micros(self) -> int | None:
        """`billed.full_cost_micros`, without a `Billed` built for it (an eval reads it once a case)."""
        with self._lock:
            return _full_cost(self._billed)

    @property
    def currency(self) -> str:
        """The currency `full_cost_micros` is in: the one of the run's first priced call."""
        with self._lock:
            return self._billed.currency or "USD"

    @property
    def has_bill(self) -> bool:
        return self._attributed > 0

    def _charge(self, call: Call) -> None:
        with self._lock:
            billed = self._billed
            self._attributed += 1
            if call.settled and call.cost_micros is None:
                self.unpriced_models |= {call.model_served or call.model_requested or "an unnamed model"}
            if call.settled and call.replayed:  # never paid: counted apart, at what it would have cost
                billed.replayed_calls += 1
                if call.cost_micros is None:
                    billed.replayed_unpriced_calls += 1
                elif call.currency == billed.currency:
                    billed.replayed_cost_micros += call.cost_micros
                else:
                    _other_currency(billed, call, replayed=True)
            elif call.settled:
                usage = call.usage
                billed.input_tokens += usage.input_tokens
                billed.cache_read_tokens += usage.cache_read_tokens
                billed.cache_write_tokens += usage.cache_write_tokens
                billed.output_tokens += usage.output_tokens
                billed.reasoning_tokens += usage.reasoning_tokens
                billed.calls += 1
                if call.cost_micros is None:
                    billed.unpriced_calls += 1
                elif call.currency == billed.currency:  # the main currency's, the usual case: added here
                    billed.cost_micros += call.cost_micros
                else:
                    _other_currency(billed, call, replayed=False)
            elif call.http_status is None or call.http_status < 400:
                billed.unsettled += 1  # an HTTP error answered and was not billed

    def attribute(self, call: Call, sent: tuple[str, ...] = ()) -> None:
        """Bill `call` to this run and every run around it; `sent`, the credential values the call
        sent, are masked in their error messages (an SDK's error quoting the key its provider echoed)."""
        self.calls.append(call)
        run: Run | None = self
        while run is not None:
            run._charge(call)
            if sent and not run.sent.issuperset(sent):
                run.sent = run.sent.union(sent)
            if run.gathers and run is not self:
                run.calls.append(call)
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
            "resumed_from_run_id": self.resumed_from_run_id, "process_lock": _process_lock,
            **{
                f"billed_{name}": (getattr(billed, name) if bill else None)
                for name in (
                    "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
                    "reasoning_tokens", "cost_micros", "unpriced_calls", "calls", "unsettled", "replayed_calls",
                    "replayed_cost_micros", "replayed_unpriced_calls",
                )
            },
            "billed_currency": (billed.currency or "USD") if bill else None,
            # money priced in other currencies than `billed_currency`, never added to it (`Billed`)
            "billed_other_currencies": orjson.dumps(
                {currency: part.model_dump() for currency, part in list(billed.other_currencies.items())},
                option=orjson.OPT_SORT_KEYS).decode() if bill and billed.other_currencies else None,
        }


class RunScope:
    """What `workbench.run(...)` returns: a sync or async context manager, or a decorator that
    opens a fresh run on every call of the function it wraps."""

    def __init__(self, name: str, kind: str = "app", prompt: dict | None = None, resume: str | None = None,
                 **tags) -> None:
        self.name, self.kind, self.prompt, self.resume, self.tags = name, kind, prompt, resume, tags
        self._open: list[tuple[Run, Token, object]] = []

    def __enter__(self) -> Run:
        from workbench.capture.recorder import recorder

        run = Run(self.name, self.kind, self.tags, current_run(), self.prompt)
        if run.parent is None and recorder().settings.capture:
            if _process_lock_held is None:  # once per process (the store's folder costs a path resolve)
                _hold_process_lock(recorder().settings.work_dir)
            if self.resume is None and os.environ.get(RESUME_ENV):
                open_resume(run, None)
        if self.resume is not None:  # bad input raises here, before anything is recorded
            open_resume(run, self.resume)
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
            if run.error_code is None and isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
                run.error_code = "WB_ABORTED"  # cancelled mid-run: its bill still stands
            run.error_message = mask_secrets(str(exc), sorted(run.sent, key=len, reverse=True))[:2000]
            if run.has_bill:
                try:  # the outermost run's bill wins: it is the last to see the exception
                    setattr(exc, _BILLED_ATTR, run.billed)
                except (AttributeError, TypeError):
                    pass
            run.span.set_status(trace.Status(trace.StatusCode.ERROR, run.error_message[:200]))
            run.span.set_attribute(semconv.ERROR_TYPE, run.error_code or run.error_type)
        # the bill's main currency's money and that currency; every currency's when there are two or
        # more, and the unpriced calls: never a figure that leaves money out or shows unpriced as 0
        tally = run._billed
        money = ({} if tally.currency is None and tally.unpriced_calls  # nothing priced: no figure at all
                 else {semconv.COST_MICROS: tally.cost_micros, semconv.CURRENCY: tally.currency or "USD"})
        if tally.other_currencies and any(part.calls for part in tally.other_currencies.values()):
            money[semconv.COSTS] = orjson.dumps(run.billed.costs(), option=orjson.OPT_SORT_KEYS).decode()
        if tally.unpriced_calls:
            money[semconv.UNPRICED_CALLS] = tally.unpriced_calls
        run.span.set_attributes(money)  # one call: a span's lock taken once
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
                async with RunScope(self.name, self.kind, self.prompt, self.resume, **self.tags):
                    return await function(*args, **kwargs)

            return async_wrapper

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with RunScope(self.name, self.kind, self.prompt, self.resume, **self.tags):
                return function(*args, **kwargs)

        return wrapper


def run(name: str, kind: str = "app", prompt: dict | None = None, resume: str | None = None, **tags) -> RunScope:
    """Open a run: `with run("checkout", user="u1") as r: ...`, `async with`, or `@run("job")`.

    `resume=RUN_ID` (or its start): every call the earlier run (or the runs it resumed) answered is
    answered again from the store, marked replayed, until a request differs; see the README."""
    return RunScope(name, kind, prompt, resume, **tags)


# The lock this process holds while it lives, named on its runs' rows: a run stored as `running`
# whose lock is free was killed, and may be resumed (`workbench.replay.resume`). Taken at the first
# top-level run; never breaks the application (no lock: its runs name none).
_process_lock: str | None = None
_process_lock_held: object | None = None


def _hold_process_lock(work_dir) -> None:
    global _process_lock, _process_lock_held
    if _process_lock_held is not None:
        return
    try:
        from workbench.locks import hold

        path = work_dir / "locks" / "processes" / f"{new_id()}.lock"
        held = hold(path)
        if held is not None:  # named by its whole path: the process may record into other stores later
            _process_lock, _process_lock_held = str(path.resolve()), held
            owner = os.getpid()  # a forked child's exit leaves its parent's lock file alone
            atexit.register(lambda: os.getpid() == owner and path.unlink(missing_ok=True))  # killed: resume removes it
            return
    except Exception:  # noqa: BLE001 - recording never breaks the application
        pass
    _process_lock_held = False  # not tried again: its runs name no lock


def _forget_process_lock() -> None:
    """A forked child holds its parent's lock through the inherited file; it takes its own."""
    global _process_lock, _process_lock_held
    _process_lock = _process_lock_held = None


os.register_at_fork(after_in_child=_forget_process_lock)


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
