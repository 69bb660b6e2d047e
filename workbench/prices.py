"""Prices out of the box: the maintained `genai-prices` library, read offline, as price sheets.

A project row (`models.toml`, `register_model`) always wins; a model no project row covers is
priced from the library's snapshot shipped with the package (never fetched: the library updates only
when asked to), at the price in force on the call's date, else it stays unpriced.

The library's prices are `Decimal` dollars per million tokens; each becomes an exact integer
`(minor, scale)` (`workbench.money.decimal_price`), never a float. Its usage model differs from ours
in one way that matters: its `input_tokens` INCLUDES cache reads and writes, and a cache counter the
model has no price for stays in that input at the input rate. So a sheet built here states every
cache price: an absent read or write price is the input price, an absent one-hour write is the
five-minute one (or the input price when neither is given). Its tiers apply to the whole call once
the total input passes a threshold, as `long_context` tiers do. A model priced per request, per
character or for reasoning apart from output, or with no input price, is left unpriced: its bill would need counters calls
do not carry, and a partial price would be wrong without saying so.

Importing the library takes about 0.7 s of CPU, so it is loaded only when a call needs it: on a
background thread as recording starts in a project with no price rows of its own (`warm_up`), else at
the first call no project row prices. The lookups are cached per provider and model name.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import date, datetime, timezone
from decimal import Decimal

from workbench.models import LongContextTier, PriceSheet
from workbench.money import decimal_price

log = logging.getLogger("workbench.prices")

LIBRARY = "genai-prices"
# price keys whose usage calls never report (audio, images, web searches...): they add nothing to a
# call's bill here, as in the library when their counters are zero
_TOKEN_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_1h_mtok")
# keys a text call is billed for that the four counters cannot express: such a model stays unpriced
_UNREPRESENTABLE = ("requests_kcount", "input_mchars", "input_text_messages_kcount", "output_reasoning_mtok",
                    "output_citation_mtok", "cache_write_5m_mtok")

_lock = threading.Lock()
_state: dict = {}  # "snapshot", "version", or "failed"
_found: dict[tuple[str | None, str | None, str], object] = {}  # (provider, url, model) -> ModelInfo | None
_sheets: dict[tuple[int, int], PriceSheet | None] = {}  # (id(ModelInfo), id(ModelPrice)) -> sheet


def _snapshot():
    """The library's bundled snapshot and version, imported once; None when it cannot be read."""
    if "snapshot" in _state or "failed" in _state:
        return _state.get("snapshot")
    with _lock:
        if "snapshot" not in _state and "failed" not in _state:
            try:
                from importlib.metadata import version

                from genai_prices import data_snapshot

                _state["version"] = version("genai-prices")
                _state["snapshot"] = data_snapshot.get_snapshot()
            except Exception as exc:  # noqa: BLE001 - a missing library leaves calls unpriced, never broken
                _state["failed"] = True
                log.warning("the price library %s could not be loaded (%s): calls no project row prices "
                            "stay unpriced", LIBRARY, exc)
    return _state.get("snapshot")


def warm_up() -> None:
    """Import the library on a daemon thread, so the first call a run prices does not wait for it."""
    if "snapshot" not in _state and "failed" not in _state:
        threading.Thread(target=_snapshot, name="workbench-prices", daemon=True).start()


def library_version() -> str | None:
    return _state.get("version") if _snapshot() is not None else None


def _origin() -> str:
    return f"{LIBRARY} {_state['version']}"


def _model_info(provider: str | None, url: str | None, model: str):
    key = (provider, url, model)
    if key in _found:
        return _found[key]
    snapshot = _snapshot()
    info = None
    if snapshot is not None:
        # the host-derived provider first, then the URL against the library's own patterns; with
        # neither (a look-up by name alone, `workbench models`), the library's own name matching
        tries = [(provider, None), (None, url)] if provider or url else [(None, None)]
        for provider_id, api_url in tries:
            if not (provider_id or api_url) and (provider or url):
                continue
            try:
                info = snapshot.find_provider_model(model, None, provider_id, api_url)
                break
            except LookupError:
                continue
    _found[key] = info
    return info


def library_sheet(model: str | None, provider: str | None = None, url: str | None = None,
                  at: datetime | None = None) -> PriceSheet | None:
    """The library's prices for `model` served by `provider` (or at `url`), in force at `at` (now
    when None), as a sheet; None when the library does not price it exactly."""
    if not model:
        return None
    found = _model_info(provider, url, model)
    if found is None:
        return None
    library_provider, info = found
    when = at or datetime.now(timezone.utc)
    prices = info.get_prices(when)
    key = (id(info), id(prices))
    if key not in _sheets:
        _sheets[key] = sheet_of(library_provider.id, info, prices, _start_of(info, prices))
    return _sheets[key]


def _start_of(info, prices) -> date | None:
    """The day a dated price took effect (None for an undated one)."""
    for conditional in info.prices if isinstance(info.prices, list) else ():
        if conditional.prices is prices:
            constraint = conditional.constraint
            return getattr(constraint, "start_date", None)
    return None


def _tiers(value) -> tuple[Decimal, list[tuple[int, Decimal]]]:
    if value is None or isinstance(value, Decimal):
        return value, []
    return value.base, [(tier.start, tier.price) for tier in value.tiers]


def sheet_of(provider_id: str, info, prices, start: date | None) -> PriceSheet | None:
    """One library price (`ModelPrice`) as a sheet, or None when it cannot be stated exactly."""
    given = {key: value for key, value in prices.__dict__.items() if not key.startswith("_") and value is not None}
    if any(key in given for key in _UNREPRESENTABLE) or "input_mtok" not in given:
        return None
    given.setdefault("output_mtok", Decimal(0))  # an embedding model: the library charges no output
    tiers = {key: _tiers(given.get(key)) for key in _TOKEN_KEYS}
    starts = sorted({start_at for _, steps in tiers.values() for start_at, _ in steps})

    def at_threshold(key: str, threshold: int | None) -> Decimal | None:
        """The key's price for a call whose total input passed `threshold` (None: the base)."""
        base, steps = tiers[key]
        price = base
        for start_at, step in steps:
            if threshold is not None and threshold >= start_at:
                price = step
        return price

    def decimals(threshold: int | None) -> dict[str, Decimal]:
        input_ = at_threshold("input_mtok", threshold)
        write = at_threshold("cache_write_mtok", threshold)
        write_1h = at_threshold("cache_write_1h_mtok", threshold)
        return {
            "input": input_, "output": at_threshold("output_mtok", threshold),
            "cache_read": at_threshold("cache_read_mtok", threshold) if tiers["cache_read_mtok"][0] is not None
            else input_,
            "cache_write_5m": write if write is not None else input_,
            "cache_write_1h": write_1h if write_1h is not None else (write if write is not None else input_),
        }

    levels = [decimals(None), *(decimals(start_at) for start_at in starts)]
    scale = max(decimal_price(value)[1] for level in levels for value in level.values())

    def integers(level: dict[str, Decimal]) -> dict[str, int]:
        out = {}
        for name, value in level.items():
            minor, own = decimal_price(value)
            out[name] = minor * 10 ** (scale - own)
        return out

    return PriceSheet(
        id=info.id, provider=provider_id, currency="USD", scale=scale, **integers(levels[0]),
        long_context=[LongContextTier(above_input_tokens=start_at, **integers(level))
                      for start_at, level in zip(starts, levels[1:]) if start_at > 0],
        source=f"{LIBRARY} {_state.get('version', '?')}: {provider_id}/{info.id}",
        as_of=start, origin=_origin() if "version" in _state else LIBRARY,
    )


def library_prices() -> Iterator[tuple[str, object, object, date | None]]:
    """Every (provider id, model info, model price, start day) the library holds."""
    snapshot = _snapshot()
    if snapshot is None:
        return
    for provider in snapshot.providers:
        for info in provider.models:
            if isinstance(info.prices, list):
                for conditional in info.prices:
                    yield provider.id, info, conditional.prices, getattr(conditional.constraint, "start_date", None)
            else:
                yield provider.id, info, info.prices, None
