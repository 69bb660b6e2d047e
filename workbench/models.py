"""The model registry: which provider model names a row covers, its limits and its dated prices.

Rows come from the user's `models.toml` (see the example one at the repository root) or from
`register_model(...)`: a negotiated or private price, and the only rows the runtime routes by. For
pricing, a model no row covers falls back to the price library shipped with the package
(`workbench.prices`); a model neither prices is unpriced — never free.
"""

from __future__ import annotations

import fnmatch
import threading
import tomllib
from datetime import date
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workbench.errors import WorkbenchError
from workbench.money import ceil_div, minor_digits


class Usage(BaseModel):
    """Four disjoint token counters plus two informative ones already inside them."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0  # uncached input only
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0  # every cache write, 5-minute and 1-hour
    output_tokens: int = 0  # reasoning included
    reasoning_tokens: int = 0  # informative: inside output_tokens
    cache_write_1h_tokens: int = 0  # informative: inside cache_write_tokens

    @property
    def total_input(self) -> int:
        """Input as OpenTelemetry counts it: cached and cache-written tokens included."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields})


class PriceTier(BaseModel):
    """Prices per million tokens: integer `minor` amounts at the sheet's `scale` (see `workbench.money`)."""

    # defer_build (here and on `Exchange`, `Billed`): the validator is built at the first validation,
    # not at import; a replay session validates no `PriceTier` nor `ModelSpec` (only `PriceSheet`s)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    input: int = Field(ge=0)
    output: int = Field(ge=0)
    cache_read: int | None = Field(default=None, ge=0)  # absent: 0.1 x input
    cache_write_5m: int | None = Field(default=None, ge=0)  # absent: 1.25 x input
    cache_write_1h: int | None = Field(default=None, ge=0)  # absent: the 5-minute write price

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, value, info):
        # TOML's `true` is not a count: pydantic would read it as 1 (a price of one cent); only the
        # capability switches are booleans
        if isinstance(value, bool) and cls.model_fields[info.field_name].annotation is not bool:
            raise ValueError(f"{info.field_name} = {str(value).lower()} is a boolean, not a number")
        return value


class LongContextTier(PriceTier):
    """Prices that apply to the whole call once its total input exceeds `above_input_tokens`."""

    above_input_tokens: int = Field(gt=0)


class PriceSheet(PriceTier):
    """What prices a call: a model's prices, their currency and scale, the tiers above a context
    length, and where they come from. A project row (`ModelSpec`) and a row of the price library
    (`workbench.prices`) are both price sheets."""

    id: str
    provider: str
    currency: str = "USD"
    # decimal places of the major unit the prices are written in; absent: the currency's minor unit
    # (2 for USD: cents), so `input = 75, scale = 3` is $0.075 per million tokens
    scale: int | None = Field(default=None, ge=0, le=24)
    long_context: list[LongContextTier] = Field(default_factory=list)  # each prices the whole call above it
    source: str  # where the price was read
    as_of: date | None = None  # when it was read (a library price: the day it took effect, if dated)
    origin: str | None = None  # a price library and its version; None: the project's own row

    @field_validator("long_context", mode="before")
    @classmethod
    def _one_tier_or_many(cls, value):
        if value is None:
            return []
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _defaults(self) -> PriceSheet:
        if self.scale is None:
            object.__setattr__(self, "scale", minor_digits(self.currency))
        object.__setattr__(self, "long_context", sorted(self.long_context, key=lambda tier: tier.above_input_tokens))
        return self

    @property
    def price_source(self) -> str:
        """Which row priced a call: `gpt-4o-mini@2025-08-01` (the project's), or the library's
        `genai-prices 0.2.3:openai/gpt-4o-mini`."""
        if self.origin:
            dated = f"@{self.as_of.isoformat()}" if self.as_of else ""
            return f"{self.origin}:{self.provider}/{self.id}{dated}"
        return f"{self.id}@{self.as_of.isoformat() if self.as_of else 'undated'}"

    def tier_for(self, usage: Usage) -> PriceTier:
        """The tier whose threshold the call's total input passed last, else the base prices."""
        chosen: PriceTier = self
        for tier in self.long_context:
            if usage.total_input > tier.above_input_tokens:
                chosen = tier
        return chosen


class ModelSpec(PriceSheet):
    """A row of the project's registry: a price sheet, the names it covers and the model's limits."""

    patterns: list[str] = Field(default_factory=list)  # fnmatch globs over served/requested names
    context_window: int = Field(gt=0)
    max_output: int = Field(gt=0)
    as_of: date  # a project row is always dated
    # capabilities: what the runtime may send this model. A parameter it does not take is withheld
    # (sampling) or refused before the call (reasoning, inputs), never sent to earn a 400.
    family: str | None = None  # the capability ladder it is a rung on (registration order, most capable first)
    sampling: list[Literal["temperature", "seed"]] = Field(default_factory=list)  # absent: neither is sent
    reasoning_effort: bool = False  # takes an effort control (reasoning_effort / output_config.effort)
    thinking: bool = False  # takes an extended-thinking switch
    forced_tool_choice: bool = True  # accepts a forced tool choice (llm()'s respond tool)
    # the shortest prefix the provider caches (absent: its documented default, `cache_minimum`); the
    # runtime marks nothing below a row's own value
    cache_min_tokens: int | None = Field(default=None, ge=0)
    input_kinds: list[Literal["text", "image", "document"]] = Field(default_factory=lambda: ["text"])

    @model_validator(mode="after")
    def _match_own_id(self) -> ModelSpec:
        if self.id not in self.patterns:
            object.__setattr__(self, "patterns", [self.id, *self.patterns])
        return self

    def matches(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)


class Priced(BaseModel):
    cost_micros: int
    currency: str
    price_source: str  # the row that priced it (see `PriceSheet.price_source`)


def _tier_cost(tier: PriceTier, usage: Usage, scale: int, currency: str) -> int:
    # Prices are multiplied by 20 so the 0.1x read and 1.25x write defaults stay integers (2 and
    # 25); the one division rounds up, and only below a micro-minor unit.
    read = tier.cache_read * 20 if tier.cache_read is not None else tier.input * 2
    write_5m = tier.cache_write_5m * 20 if tier.cache_write_5m is not None else tier.input * 25
    write_1h = tier.cache_write_1h * 20 if tier.cache_write_1h is not None else write_5m
    numerator = (
        usage.input_tokens * tier.input * 20
        + usage.output_tokens * tier.output * 20
        + usage.cache_read_tokens * read
        + (usage.cache_write_tokens - usage.cache_write_1h_tokens) * write_5m
        + usage.cache_write_1h_tokens * write_1h
    )
    shift = minor_digits(currency) - scale
    return ceil_div(numerator * 10**shift, 20) if shift >= 0 else ceil_div(numerator, 20 * 10**-shift)


class ModelRegistry:
    """Rows in registration order; the last registered row that matches a name wins."""

    def __init__(self, library: bool = True) -> None:
        self._rows: list[ModelSpec] = []
        self._lock = threading.Lock()
        self.library = library  # fall back to the price library (`workbench.prices`) for pricing

    def register(self, spec: ModelSpec) -> ModelSpec:
        """Add a row; a row of the same id is replaced where it stands (it keeps its rung)."""
        with self._lock:
            ids = [row.id for row in self._rows]
            if spec.id in ids:
                self._rows = [spec if row.id == spec.id else row for row in self._rows]
            else:
                self._rows = [*self._rows, spec]
        return spec

    def more_capable_than(self, name: str | None) -> ModelSpec | None:
        """The next rung up `name`'s ladder: the row registered just before it in its family (rows
        without a family are one family). None at the top, or for a model no row matches."""
        row = self.find(name)
        if row is None:
            return None
        rungs = [other for other in self._rows if other.family == row.family]
        index = next(i for i, other in enumerate(rungs) if other.id == row.id)
        return rungs[index - 1] if index > 0 else None

    def clear(self) -> None:
        with self._lock:
            self._rows = []

    def rows(self) -> list[ModelSpec]:
        return list(self._rows)

    def find(self, name: str | None) -> ModelSpec | None:
        if not name:
            return None
        for row in reversed(self._rows):
            if row.id == name:
                return row
        for row in reversed(self._rows):
            if row.matches(name):
                return row
        return None

    def get(self, name: str | None) -> ModelSpec:
        row = self.find(name)
        if row is None:
            known = ", ".join(row.id for row in self._rows) or "none"
            raise WorkbenchError(
                "WB_MODEL_UNKNOWN",
                f"model {name!r} is not registered (registered: {known})",
                f"add a [[model]] row for {name!r} to models.toml, or call workbench.register_model(...)",
            )
        return row

    def sheet_for(self, call) -> PriceSheet | None:
        """What prices a `Call`: the project's row for its served model, else its requested one,
        else the price library's price for either, in force when the call started; None: unpriced."""
        row = self.find(call.model_served) or self.find(call.model_requested)
        if row is not None or not self.library:
            return row
        from workbench.prices import library_sheet

        return (library_sheet(call.model_served, call.provider, call.url, call.started_at)
                or library_sheet(call.model_requested, call.provider, call.url, call.started_at))

    def price(self, name: str | None, usage: Usage) -> Priced | None:
        row = self.find(name)
        return None if row is None else price_with(row, usage)

    def load_toml(self, path: Path) -> list[ModelSpec]:
        return [self.register(spec) for spec in read_models_toml(path)]


def cost_with(sheet: PriceSheet, usage: Usage) -> int:
    """`price_with(sheet, usage).cost_micros`, without the `Priced` (a budget's worst case, per call)."""
    return _tier_cost(sheet.tier_for(usage), usage, sheet.scale, sheet.currency)


def price_with(sheet: PriceSheet, usage: Usage) -> Priced:
    return Priced(cost_micros=cost_with(sheet, usage), currency=sheet.currency, price_source=sheet.price_source)


def read_models_toml(path: Path) -> list[ModelSpec]:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise WorkbenchError(
            "WB_MODELS_INVALID", f"cannot read {path}: {exc}", f"fix the TOML syntax of {path}"
        ) from exc
    rows = data.get("model", [])
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise WorkbenchError(
            "WB_MODELS_INVALID", f"{path}: `model` is a {type(rows).__name__}, not an array of [[model]] tables",
            f"write each model of {path} as a [[model]] table (see the example models.toml)",
        )
    specs = []
    for index, row in enumerate(rows):
        try:
            specs.append(ModelSpec.model_validate(row))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise WorkbenchError(
                "WB_MODELS_INVALID",
                f"{path}: [[model]] row {index} ({row.get('id', '?')}): {where}: {first['msg']}",
                f"correct the field {where!r} of that row in {path}",
            ) from exc
    return specs


registry = ModelRegistry()
_loaded: set[Path] = set()


def load_registry(path: Path | None = None) -> ModelRegistry:
    """The process-wide registry with the project's models.toml loaded into it (once per file).
    `path` None means the `models` setting; a missing default file leaves the registry as it is."""
    from workbench.config import settings

    explicit = path is not None
    path = Path(path if explicit else settings().models).resolve()
    if path not in _loaded and (explicit or path.is_file()):
        registry.load_toml(path)
        _loaded.add(path)
    return registry


def register_model(**fields) -> ModelSpec:
    """Add or replace a row of the process-wide registry (`id` replaces a row of the same id)."""
    try:
        spec = ModelSpec.model_validate(fields)
    except ValidationError as exc:
        raise WorkbenchError(
            "WB_MODELS_INVALID",
            f"register_model({fields.get('id', '?')!r}): {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}",
            "pass id, provider, context_window, max_output, input, output, source and as_of",
        ) from exc
    return registry.register(spec)


def price(model: str | None, usage: Usage) -> Priced | None:
    """The cost of `usage` on `model`, or None when no row prices it (unpriced, never zero)."""
    return registry.price(model, usage)
