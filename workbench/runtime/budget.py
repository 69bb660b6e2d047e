"""Budgets that refuse, never truncate: input tokens per call, tokens per run, cost per call, cost
per run. A cost is in one currency: a call priced in another is refused, never left uncounted.

Every runtime run (`llm()`, an `Agent` run, or `budget_scope(...)`) keeps a ledger; runs nest, and a
call is charged to every ledger around it, so a tool that calls `llm()` spends its agent's budget.
Before each call the gateway reserves the call's worst case (estimated input + `max_tokens`, priced
as the dearest input it could be billed as) in every ledger: it debits first, then checks, under a
lock, so concurrent calls cannot both pass on the same remaining room. After the call the
reservation is replaced by what the provider reported; a call that failed releases it (an HTTP
error is not billed). An answer that reported no usage is charged to the ledgers an ESTIMATE, never
zero (zero would hand its whole reservation back to the budget), while the run's bill counts it
unsettled: the bill is what the provider said, the ledger what the run may still spend."""

from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

from pydantic import BaseModel, ConfigDict, model_validator

from workbench.errors import WorkbenchError
from workbench.money import format_costs, format_exact
from workbench.runtime.options import count, invalid


class Budget(BaseModel):
    """Limits; None is no limit. Costs are exact integer micro-minor units (1_000_000 = one cent),
    like every `cost_micros` in the store. `tokens_in` bounds one call's input (its estimate,
    before it is sent); `tokens_per_run` every token of every call of the run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens_in: int | None = None
    tokens_per_run: int | None = None
    cost_per_call_micros: int | None = None
    cost_per_run_micros: int | None = None
    # the currency the costs are in; None: the currency of the first call a cost limit counts. A call
    # priced in another currency is refused (`WB_BUDGET_CURRENCY`): no rate converts it exactly, and a
    # limit that skipped it would pass money it never counted
    currency: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _screen(cls, data):
        # screened here, under the caller's names, as WB_ codes (not pydantic's uncoded errors)
        if isinstance(data, dict):
            for name, value in data.items():
                if name not in cls.model_fields:
                    raise invalid(f"Budget.{name}", value, f"one of {', '.join(cls.model_fields)}")
                if name == "currency":
                    if value is not None and not (isinstance(value, str) and len(value) == 3 and value.isalpha()
                                                  and value.isupper()):
                        raise invalid("Budget.currency", value, "a currency's ISO 4217 code, such as 'USD' or 'EUR'")
                else:
                    count(f"Budget.{name}", value, 1, optional=True)
        return data


_NO_LIMITS = Budget()  # frozen: one for every scope without a budget (a Budget is built through a validator)


class Ledger:
    """What one run has spent and holds reserved, against its budget."""

    def __init__(self, budget: Budget | None, name: str) -> None:
        self.budget = budget or _NO_LIMITS
        self.name = name
        self.spent_tokens = 0
        self.spent_costs: dict[str, int] = {}  # money spent, per currency it was priced in
        self.reserved_tokens = 0
        self.reserved_micros = 0
        self.currency = self.budget.currency  # the costs' currency, else fixed by the first call counted
        # a cost limit counts one currency (the budget is frozen: decided once)
        self.limits_cost = self.budget.cost_per_call_micros is not None or self.budget.cost_per_run_micros is not None
        self._lock = threading.Lock()

    @property
    def spent_micros(self) -> int:
        """The money spent in `currency`, the one the cost limits count (every other is refused)."""
        return self.spent_costs.get(self.currency, 0) if self.currency else 0

    def spent(self) -> tuple[int, dict[str, int]]:
        """(tokens, money per currency) spent: what a checkpoint keeps, for `restore`."""
        with self._lock:
            return self.spent_tokens, dict(self.spent_costs)

    def restore(self, tokens: int, costs: dict[str, int]) -> None:
        """What the run spent before (a resumed or continued run), per currency. A cost limit counts it
        in its own currency: money spent in another is refused (`WB_BUDGET_CURRENCY`), never counted
        as if it were in the limit's."""
        self.spent_tokens = tokens
        if not costs:  # a run from its start (every llm() call): nothing to check
            return
        self.spent_costs = {currency: micros for currency, micros in costs.items() if micros}
        if self.currency is None and len(self.spent_costs) == 1:
            self.currency = next(iter(self.spent_costs))
        other = sorted(currency for currency in self.spent_costs if currency != self.currency)
        if other and self.limits_cost:
            counts = self.currency or "one currency"
            raise WorkbenchError(
                "WB_BUDGET_CURRENCY",
                f"run {self.name!r} already spent {format_costs(self.spent_costs, exact=True)} before it went "
                f"on, but its cost budget counts {counts}: no exact rate converts one into the other, so "
                "nothing is sent",
                f"price the run's models in {', '.join(other)} again (models.toml), give the budget that "
                f"currency (Budget(currency={other[0]!r}, ...)), or bound the run by tokens (tokens_per_run)",
            )

    def reserve(self, tokens: int, micros: int, what: str, input_tokens: int = 0, currency: str = "USD") -> None:
        budget = self.budget
        if self.currency is None:
            if self.limits_cost:  # under the lock: two first calls in two currencies cannot both pass
                with self._lock:
                    self.currency = self.currency or currency
            else:
                self.currency = currency
        if self.limits_cost and currency != self.currency:
            raise WorkbenchError(
                "WB_BUDGET_CURRENCY",
                f"{what} is priced in {currency}, but the cost budget of run {self.name!r} counts "
                f"{self.currency}: no exact rate converts one into the other, so the call is not made",
                f"price the run's models in {self.currency} in models.toml, give the budget the call's "
                f"currency (Budget(currency={currency!r}, ...)) in a run of its own, or bound the run by "
                "tokens (tokens_per_run)",
            )
        if budget.tokens_in is not None and input_tokens > budget.tokens_in:
            raise WorkbenchError(
                "WB_BUDGET_EXCEEDED",
                f"{what} needs about {input_tokens:,} input tokens, over the tokens in (per call) budget of "
                f"{budget.tokens_in:,} of run {self.name!r}",
                "raise Budget(tokens_in=...), or shorten the prompt, the tool results (max_tool_result_chars) "
                "or the kept turns (Compaction(keep_turns=...))",
            )
        if budget.cost_per_call_micros is not None and micros > budget.cost_per_call_micros:
            raise WorkbenchError(
                "WB_BUDGET_EXCEEDED",
                f"{what} could cost up to {format_exact(micros, currency)} (its worst case), over the cost per "
                f"call budget of {format_exact(budget.cost_per_call_micros, currency)} of run {self.name!r}",
                "raise Budget(cost_per_call_micros=...), or lower max_tokens (the worst case is the "
                "estimated input plus max_tokens)",
            )
        with self._lock:
            self.reserved_tokens += tokens  # debit first, then check: concurrent calls see each other
            self.reserved_micros += micros
            scope = limit = used = None
            if budget.tokens_per_run is not None and self.spent_tokens + self.reserved_tokens > budget.tokens_per_run:
                scope, limit, used, need = "tokens per run", budget.tokens_per_run, self.spent_tokens, tokens
                unit = lambda value: f"{value:,} tokens"  # noqa: E731
            elif budget.cost_per_run_micros is not None and self.spent_micros + self.reserved_micros > budget.cost_per_run_micros:
                scope, limit, used, need = "cost per run", budget.cost_per_run_micros, self.spent_micros, micros
                unit = lambda value: format_exact(value, currency)  # noqa: E731
            if scope is not None:
                held = (self.reserved_tokens if scope.startswith("tokens") else self.reserved_micros) - need
                self.reserved_tokens -= tokens
                self.reserved_micros -= micros
        if scope is not None:
            remaining = max(limit - used - held, 0)
            raise WorkbenchError(
                "WB_BUDGET_EXCEEDED",
                f"{what} needs up to {unit(need)} (its worst case) but the {scope} budget of run "
                f"{self.name!r} has {unit(remaining)} left of {unit(limit)} ({unit(used)} spent, "
                f"{unit(held)} held by calls in flight)",
                f"raise Budget({'tokens_per_run' if scope.startswith('tokens') else 'cost_per_run_micros'}=...), "
                "or lower max_tokens (the worst case is the estimated input plus max_tokens)",
            )

    def settle(self, reserved_tokens: int, reserved_micros: int, tokens: int, micros: int, currency: str = "USD") -> None:
        with self._lock:
            self.reserved_tokens -= reserved_tokens
            self.reserved_micros -= reserved_micros
            self.spent_tokens += tokens
            if micros:
                self.spent_costs[currency] = self.spent_costs.get(currency, 0) + micros


_ledgers: ContextVar[tuple[Ledger, ...]] = ContextVar("workbench_ledgers", default=())


@contextlib.contextmanager
def budget_scope(budget: Budget | None, name: str = "budget",
                 spent: tuple[int, dict[str, int]] = (0, {})) -> Iterator[Ledger]:
    """Spend inside the block against `budget` (and against every scope around it). `spent`
    (tokens, money per currency) is what the run already spent before (a resumed or continued run)."""
    ledger = Ledger(budget, name)
    ledger.restore(*spent)
    token = _ledgers.set((*_ledgers.get(), ledger))
    try:
        yield ledger
    finally:
        _ledgers.reset(token)


@dataclass
class Reservation:
    ledgers: tuple[Ledger, ...]
    tokens: int
    micros: int
    currency: str = "USD"  # the call's, which its cost is priced in
    done: bool = False

    def settle(self, tokens: int, micros: int) -> None:
        if not self.done:
            self.done = True
            for ledger in self.ledgers:
                ledger.settle(self.tokens, self.micros, tokens, micros, self.currency)

    def release(self) -> None:
        self.settle(0, 0)


def reserve(tokens: int, micros: int, what: str, extra: Budget | None = None, input_tokens: int = 0,
            currency: str = "USD") -> Reservation:
    """Reserve a call's worst case (`micros`, in the `currency` its model is priced in) in every ledger
    in scope (and check `extra`'s per-call limits); all or nothing."""
    if extra is not None and (extra.cost_per_call_micros is not None or extra.tokens_in is not None):
        per_call = Budget(cost_per_call_micros=extra.cost_per_call_micros, tokens_in=extra.tokens_in,
                          currency=extra.currency)
        Ledger(per_call, "gateway").reserve(0, micros, what, input_tokens, currency)
    taken: list[Ledger] = []
    try:
        for ledger in _ledgers.get():
            ledger.reserve(tokens, micros, what, input_tokens, currency)
            taken.append(ledger)
    except WorkbenchError:
        for ledger in taken:
            ledger.settle(tokens, micros, 0, 0)
        raise
    return Reservation(tuple(taken), tokens, micros, currency)
