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

Importing the library takes about 0.5-0.7 s of CPU, so it is loaded only when a call needs it: on a
background thread as recording starts in a project with no price rows of its own (`warm_up`), else at
the first call no project row prices. The lookups are cached per provider and model name, in the
process and, when the recorder names a file (`use_lookups`), on disk per library version: a later
process (a pytest session, an eval) that prices only models looked up before never imports it.

A pytest session (`at_ingestion`) does not import it at all: a call no run waits for, whose price
would need the library loaded, is spooled with `price_source = AT_INGESTION`, and the ingester, a
process of its own, prices it there with the same lookup (`workbench.store.pricing`), keeping the
answer beside the store for the next session. The stored figures are the ones the recorder would
have written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

from workbench.models import LongContextTier, PriceSheet
from workbench.money import decimal_price

log = logging.getLogger("workbench.prices")

LIBRARY = "genai-prices"
# the library makes this logger at its import, which may run on a background thread (the spool's, or
# `warm_up`'s); made now, on the importing thread, the import adds nothing to logging's table of
# loggers, which pytest walks without logging's lock as each test phase starts ("dictionary changed
# size during iteration" failed a test otherwise)
logging.getLogger(LIBRARY)
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
# (provider, url, model) -> None (not in the library) or its dated sheets, [(start day or None, sheet)]
# in the library's order, kept on disk at `_lookups["path"]` (`use_lookups`)
_lookups: dict = {"path": None, "found": {}}
# a call's price_source until the ingester prices it (never stored: the ingester replaces it)
AT_INGESTION = "genai-prices: at ingestion"
_deferring = {"on": False}  # `at_ingestion()` was called: this process leaves the library to the ingester
_refusing = threading.local()  # inside `unloaded()`: a lookup needing the library raises instead


class LibraryNotLoaded(Exception):
    """A lookup inside `unloaded()` needed the library, which this process has not loaded."""


def at_ingestion(on: bool) -> None:
    """While on (a pytest session), this process leaves the library's lookups it has not kept to the
    ingester: nothing loads it in the background (`warm_up`), and the recorder spools such a call
    unpriced, marked `AT_INGESTION`, when nothing in the process reads its cost (`Recorder._call`)."""
    _deferring["on"] = on


def deferring() -> bool:
    return _deferring["on"]


@contextmanager
def unloaded() -> Iterator[None]:
    """Lookups inside answer from the kept lookups or the loaded library, else raise
    `LibraryNotLoaded` rather than import the library (on this thread only)."""
    _refusing.on = True
    try:
        yield
    finally:
        _refusing.on = False


def _snapshot():
    """The library's bundled snapshot and version, imported once; None when it cannot be read."""
    if "snapshot" in _state or "failed" in _state:
        return _state.get("snapshot")
    if getattr(_refusing, "on", False):
        raise LibraryNotLoaded
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
    """Import the library on a daemon thread, so the first call a run prices does not wait for it,
    unless earlier lookups kept on disk (`use_lookups`) may spare it."""
    if "snapshot" not in _state and "failed" not in _state and not _lookups["found"] and not _deferring["on"]:
        threading.Thread(target=_snapshot, name="workbench-prices", daemon=True).start()


def use_lookups(folder: Path) -> None:
    """Keep the library's answers (each model looked up, its dated sheets) in `folder`, one file per
    library version, and read those kept by earlier processes. A file that cannot be read or
    written is ignored: the library answers instead."""
    path, found = None, {}
    try:
        from importlib.metadata import version

        # one file per library version and per version of this module (which makes the sheets)
        made_by = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
        path = folder / f"prices-{version('genai-prices')}-{made_by}.json"
        if path.is_file():
            for entry in json.loads(path.read_text()):
                provider, url, model, sheets = entry
                found[(provider, url, model)] = None if sheets is None else [
                    (date.fromisoformat(start) if start else None, PriceSheet.model_validate(sheet) if sheet else None)
                    for start, sheet in sheets]
    except Exception as exc:  # noqa: BLE001 - a cache never breaks pricing: the library answers instead
        log.info("price lookups kept in %s not read (%s): the library answers", folder, exc)
        found = {}
    with _lock:
        _lookups.update(path=path, found=found)


def _keep(key: tuple, sheets: list[tuple[date | None, PriceSheet | None]] | None) -> None:
    """Add one lookup to the file (written whole, atomically, readable by its owner only)."""
    path = _lookups["path"]
    with _lock:
        _lookups["found"][key] = sheets
        entries = [[*key, None if value is None else [[start.isoformat() if start else None,
                                                       sheet.model_dump(mode="json") if sheet else None]
                                                      for start, sheet in value]]
                   for key, value in _lookups["found"].items()]
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(entries, handle)
        os.replace(temporary, path)
    except OSError as exc:
        log.info("price lookups not kept in %s (%s)", path, exc)


def _dated_sheets(provider: str | None, url: str | None, model: str) -> list[tuple[date | None, PriceSheet | None]] | None:
    """The library's sheets for a model, each with the day it starts (None: always), in its order;
    None when the library has no such model, or prices it by something else than the day (a time
    of day): such a model is looked up in the library each time."""
    found = _model_info(provider, url, model)
    if found is None:
        return None
    library_provider, info = found
    conditionals = info.prices if isinstance(info.prices, list) else None
    if conditionals is None:
        return [(None, _sheet(library_provider, info, info.prices))]
    if any(c.constraint is not None and type(c.constraint).__name__ != "StartDateConstraint" for c in conditionals):
        return None
    return [(getattr(c.constraint, "start_date", None), _sheet(library_provider, info, c.prices)) for c in conditionals]


def _sheet(library_provider, info, prices) -> PriceSheet | None:
    key = (id(info), id(prices))
    if key not in _sheets:
        _sheets[key] = sheet_of(library_provider.id, info, prices, _start_of(info, prices))
    return _sheets[key]


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
    when = at or datetime.now(timezone.utc)
    key = (provider, url, model)
    if key in _lookups["found"]:
        sheets = _lookups["found"][key]
        if sheets is None:
            return None
        # as the library's `get_prices`: the last price whose start day the call's UTC day reached
        day = (when.astimezone(timezone.utc) if when.tzinfo else when).date()
        return next((sheet for start, sheet in reversed(sheets) if start is None or day >= start), sheets[0][1])
    found = _model_info(provider, url, model)
    if found is None:
        if _snapshot() is not None:
            _keep(key, None)
        return None
    library_provider, info = found
    sheets = _dated_sheets(provider, url, model)
    if sheets is not None:
        _keep(key, sheets)
    return _sheet(library_provider, info, info.get_prices(when))


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
