"""Prices the recorder left to the ingester (`workbench.prices.AT_INGESTION`): a pytest session does
not load the price library for calls no run waits for, and its ingester prices them here, before
insight reads the batch, as the recorder would have: the library's price in force when the call
started (`ModelRegistry.sheet_for` with no project row: the recorder found none), the call's model
row, and its span's `workbench.cost_micros` with its `workbench.currency`, placed where the recorder
places them."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import duckdb
import orjson
import polars as pl

from workbench.models import ModelRegistry, Usage, price_with
from workbench.prices import AT_INGESTION, use_lookups
from workbench.store.frames import table_frame
from workbench.store.records import TABLES

log = logging.getLogger("workbench.store")

# a span's cost attribute, which the recorder leaves to the ingester as `AT_INGESTION`, and its call's id
# (`workbench.capture.semconv.COST_MICROS`, `CALL_ID`)
_COST, _CURRENCY, _CALL_ID = "workbench.cost_micros", "workbench.currency", "workbench.call_id"
_lookups_read: set[Path] = set()


def priced_at_ingestion(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame],
                        work_dir: Path | None) -> dict[str, pl.DataFrame]:
    """`frames` with their calls marked `AT_INGESTION` priced (or unpriced: the library has no price
    for them), their model rows added, and their spans' cost attribute filled in (or dropped). The
    library's answers are kept in `work_dir` (`use_lookups`) for the next session."""
    calls = frames.get("call")
    pending = calls is not None and calls.height and (calls["price_source"] == AT_INGESTION).any()
    spans = frames.get("span")
    # a span may come in a later batch than its call: every batch's spans are looked at, by one native
    # search of their attribute texts; only those that hold the word are read as JSON
    marked_spans = (spans["attributes"].str.contains(AT_INGESTION, literal=True).arg_true().to_list()
                    if spans is not None and spans.height else [])
    if not pending and not marked_spans:
        return frames
    frames = dict(frames)
    costs: dict[str, tuple] = {}  # call_id: (cost_micros, currency)
    if pending:
        try:
            frames["call"], models, costs = _priced_calls(calls, work_dir)
        except Exception as exc:  # noqa: BLE001 - a price never keeps a record out of the store
            log.warning("workbench could not price calls at ingestion (stored unpriced): %s", exc, exc_info=True)
            frames["call"] = calls.with_columns(
                pl.when(pl.col("price_source") == AT_INGESTION).then(None).otherwise(pl.col("price_source"))
                .alias("price_source"))
            models = []
        if models:
            model_frame = table_frame(con, TABLES["model"][0], models)
            frames["model"] = pl.concat([frames["model"], model_frame]) if "model" in frames else model_frame
    if marked_spans:
        frames["span"] = _spans_with_costs(con, spans, marked_spans, costs)
    return frames


def _priced_calls(calls: pl.DataFrame, work_dir: Path | None) -> tuple[pl.DataFrame, list[dict], dict[str, tuple]]:
    if work_dir is not None and work_dir not in _lookups_read:
        _lookups_read.add(work_dir)
        use_lookups(work_dir)
    library = ModelRegistry()  # no project row: the library's price, as the recorder's fallback
    rows, models, costs, seen = [], [], {}, set()
    for row in calls.filter(pl.col("price_source") == AT_INGESTION).iter_rows(named=True):
        started = row["started_at"]  # the recorder's `isoformat()` of its UTC time: the same instant back
        started = datetime.fromisoformat(started) if isinstance(started, str) else started
        # what `sheet_for` reads of a `Call` (workbench.wire, which an ingester does not otherwise import)
        call = SimpleNamespace(model_requested=row["model_requested"], model_served=row["model_served"],
                               provider=row["provider"], url=row["url"],
                               started_at=started.replace(tzinfo=timezone.utc) if started and started.tzinfo is None
                               else started)
        sheet = library.sheet_for(call)
        if sheet is None:
            rows.append((row["call_id"], None, None, None))
            continue
        usage = Usage(**{name: row[name] or 0 for name in Usage.model_fields})
        priced = price_with(sheet, usage)
        rows.append((row["call_id"], priced.cost_micros, priced.currency, priced.price_source))
        costs[row["call_id"]] = (priced.cost_micros, priced.currency)
        if priced.price_source not in seen:
            seen.add(priced.price_source)
            models.append({"price_source": priced.price_source, "id": sheet.id, "provider": sheet.provider,
                           "spec": sheet.model_dump_json()})
    schema = {name: calls.schema[name] for name in ("call_id", "cost_micros", "currency", "price_source")}
    found = pl.DataFrame(rows, schema=schema, orient="row")
    return calls.update(found, on="call_id", include_nulls=True), models, costs


def _spans_with_costs(con: duckdb.DuckDBPyConnection, spans: pl.DataFrame, rows: list[int],
                      costs: dict[str, tuple]) -> pl.DataFrame:
    """The spans at `rows` (their attribute texts hold `AT_INGESTION`) with the cost attribute left
    to the ingester given their call's cost and, after it, its currency in its place, or dropped
    when the call stays unpriced. Their call precedes them in the spool: in this batch, or stored.
    The attributes are the recorder's orjson text: read and written again by orjson, the others
    stay as they were."""
    texts = spans["attributes"]
    left = {row: attributes for row in rows if (attributes := _attributes(texts[row])).get(_COST) == AT_INGESTION}
    earlier = [attributes.get(_CALL_ID) for attributes in left.values() if attributes.get(_CALL_ID) not in costs]
    if earlier:
        costs = {**costs, **{call_id: (micros, currency) for call_id, micros, currency in con.execute(
            "SELECT call_id, cost_micros, currency FROM calls WHERE call_id IN (SELECT unnest($ids))"
            " AND cost_micros IS NOT NULL", {"ids": earlier}).fetchall()}}
    if not left:
        return spans
    patched = texts.clone()
    patched.scatter(list(left), [orjson.dumps(_with_cost(attributes, costs.get(attributes.get(_CALL_ID)))).decode()
                                 for attributes in left.values()])
    return spans.with_columns(patched)


def _with_cost(attributes: dict, cost: tuple | None) -> dict:
    """The attributes with the left cost replaced in its place by the call's cost and currency (the
    recorder's order), or without it when the call stays unpriced."""
    if cost is None:
        return {key: value for key, value in attributes.items() if key != _COST}
    micros, currency = cost
    placed: dict = {}
    for key, value in attributes.items():
        if key == _COST:
            placed[_COST], placed[_CURRENCY] = micros, currency or "USD"
        else:
            placed[key] = value
    return placed


def _attributes(text: str) -> dict:
    """A span's attributes; none when its text is not a JSON object (then it is stored as it came)."""
    try:
        attributes = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return attributes if isinstance(attributes, dict) else {}
