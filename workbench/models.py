"""The model registry: which provider model names a row covers, its limits and its dated prices.

No vendor price ships in code. Rows come from the user's `models.toml` (see the example one at the
repository root) or from `register_model(...)`. A model no row matches is unpriced — never free.
"""

from __future__ import annotations

import fnmatch
import threading
import tomllib
from datetime import date
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workbench.errors import WorkbenchError
from workbench.money import ceil_div


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
    """Prices in integer minor units per million tokens (divided by 10**scale)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: int = Field(ge=0)
    output: int = Field(ge=0)
    cache_read: int | None = Field(default=None, ge=0)  # absent: 0.1 x input
    cache_write_5m: int | None = Field(default=None, ge=0)  # absent: 1.25 x input
    cache_write_1h: int | None = Field(default=None, ge=0)  # absent: the 5-minute write price


class LongContextTier(PriceTier):
    """Prices that apply to the whole call once its total input exceeds `above_input_tokens`."""

    above_input_tokens: int = Field(gt=0)


class ModelSpec(PriceTier):
    id: str
    provider: str
    patterns: list[str] = Field(default_factory=list)  # fnmatch globs over served/requested names
    context_window: int = Field(gt=0)
    max_output: int = Field(gt=0)
    currency: str = "USD"
    scale: int = Field(default=0, ge=0, le=6)
    long_context: LongContextTier | None = None
    # the shortest prefix the provider caches for this model (absent: its documented default)
    cache_min_tokens: int | None = Field(default=None, ge=0)
    source: str  # where the price was read
    as_of: date  # when it was read

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
    price_source: str  # the model row's id and the date of its price


def _tier_cost(tier: PriceTier, usage: Usage, scale: int) -> int:
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
    return ceil_div(numerator, 20 * 10**scale)


class ModelRegistry:
    """Rows in registration order; the last registered row that matches a name wins."""

    def __init__(self) -> None:
        self._rows: list[ModelSpec] = []
        self._lock = threading.Lock()

    def register(self, spec: ModelSpec) -> ModelSpec:
        with self._lock:
            self._rows = [row for row in self._rows if row.id != spec.id] + [spec]
        return spec

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

    def price(self, name: str | None, usage: Usage) -> Priced | None:
        row = self.find(name)
        return None if row is None else price_with(row, usage)

    def load_toml(self, path: Path) -> list[ModelSpec]:
        return [self.register(spec) for spec in read_models_toml(path)]


def price_with(spec: ModelSpec, usage: Usage) -> Priced:
    tier: PriceTier = spec
    if spec.long_context is not None and usage.total_input > spec.long_context.above_input_tokens:
        tier = spec.long_context
    return Priced(
        cost_micros=_tier_cost(tier, usage, spec.scale),
        currency=spec.currency,
        price_source=f"{spec.id}@{spec.as_of.isoformat()}",
    )


def read_models_toml(path: Path) -> list[ModelSpec]:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise WorkbenchError(
            "WB_MODELS_INVALID", f"cannot read {path}: {exc}", f"fix the TOML syntax of {path}"
        ) from exc
    specs = []
    for index, row in enumerate(data.get("model", [])):
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
