"""Prices the recorder left to the ingester (`workbench.prices.AT_INGESTION`): a pytest session does
not load the price library for calls no run waits for, and its ingester prices them here, before
insight reads the batch, as the recorder would have: the library's price in force when the call
started (`ModelRegistry.sheet_for` with no project row: the recorder found none), the call's model
row, and its span's `workbench.cost_micros` with its `workbench.currency`, placed where the recorder
places them."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import duckdb
import polars as pl

from workbench.models import ModelRegistry, Usage, price_with
from workbench.prices import AT_INGESTION, use_lookups
from workbench.store.frames import table_frame
from workbench.store.records import TABLES

log = logging.getLogger("workbench.store")

# a span's cost attribute the recorder left to the ingester (`workbench.capture.semconv.COST_MICROS`)
_MARK = f'"workbench.cost_micros":"{AT_INGESTION}"'
_lookups_read: set[Path] = set()


def priced_at_ingestion(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame],
                        work_dir: Path | None) -> dict[str, pl.DataFrame]:
    """`frames` with their calls marked `AT_INGESTION` priced (or unpriced: the library has no price
    for them), their model rows added, and their spans' cost attribute filled in (or dropped). The
    library's answers are kept in `work_dir` (`use_lookups`) for the next session."""
    calls = frames.get("call")
    pending = calls is not None and calls.height and (calls["price_source"] == AT_INGESTION).any()
    spans = frames.get("span")
    marked_spans = spans is not None and spans.height and spans["attributes"].str.contains(_MARK, literal=True).any()
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
        frames["span"] = _spans_with_costs(con, spans, costs)
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


def _spans_with_costs(con: duckdb.DuckDBPyConnection, spans: pl.DataFrame, costs: dict[str, tuple]) -> pl.DataFrame:
    """The spans' left cost attribute (`_MARK`) given their call's cost and its currency in its place,
    or dropped when the call stays unpriced. Their call precedes them in the spool: in this batch, or
    stored."""
    marked = spans["attributes"].str.contains(_MARK, literal=True)
    call_ids = spans["attributes"].str.extract(r'"workbench\.call_id":"([0-9a-f]+)"')
    earlier = [call_id for call_id in call_ids.filter(marked).to_list() if call_id not in costs]
    if earlier:
        costs = {**costs, **{call_id: (micros, currency) for call_id, micros, currency in con.execute(
            "SELECT call_id, cost_micros, currency FROM calls WHERE call_id IN (SELECT unnest($ids))"
            " AND cost_micros IS NOT NULL", {"ids": earlier}).fetchall()}}

    def with_cost(attributes: str, call_id: str | None) -> str:
        if _MARK not in attributes:
            return attributes
        if call_id in costs:
            micros, currency = costs[call_id]
            return attributes.replace(_MARK, f'"workbench.cost_micros":{micros},'
                                             f'"workbench.currency":{json.dumps(currency or "USD")}')
        return attributes.replace("," + _MARK, "")  # never the first attribute

    patched = [with_cost(text, call_id) for text, call_id in zip(spans["attributes"].to_list(), call_ids.to_list())]
    return spans.with_columns(pl.Series("attributes", patched, dtype=spans.schema["attributes"]))
