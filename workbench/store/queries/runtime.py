"""What the runtime writes besides calls: agent checkpoints and response-cache hits."""

from __future__ import annotations

import duckdb
import polars as pl

from workbench.store.queries._base import Filters, _frame
from workbench.store.queries.runs import has_tables


def last_checkpoint(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """The states (JSON text) that make up the run's latest checkpoint: its last full state, then
    every delta after it, oldest first; [] when the run has none."""
    if not has_tables(con, "checkpoints"):
        return []
    rows = _frame(con, """
        SELECT state FROM checkpoints
        WHERE run_id = $run_id AND turn >= coalesce(
            (SELECT max(turn) FROM checkpoints WHERE run_id = $run_id AND full_state), 0)
        ORDER BY turn, created_at""", {"run_id": run_id})
    return rows["state"].to_list()


def response_cache_hits(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Calls the gateway's response cache answered, by model and prompt: how many, the tokens they
    would have cost, and what the calls they re-served cost when they were paid (never added to
    what was paid). Filtered by date, model and prompt."""
    empty = {"model": pl.Utf8, "prompt_id": pl.Utf8, "prompt_version": pl.Utf8, "currency": pl.Utf8,
             "hits": pl.Int64, "input_tokens": pl.Int64, "output_tokens": pl.Int64, "saved_cost_micros": pl.Int64,
             "unpriced_hits": pl.Int64}
    if not has_tables(con, "response_cache_hits"):
        return pl.DataFrame(schema=empty)
    where, params = ["true"], {}
    if f.date_from is not None:
        where.append("h.occurred_at >= $date_from::TIMESTAMPTZ")
        params["date_from"] = f.date_from.isoformat()
    if f.date_to is not None:
        where.append("h.occurred_at < ($date_to::DATE + 1)::TIMESTAMPTZ")
        params["date_to"] = f.date_to.isoformat()
    for name, values, column in (("models", f.models, "h.model"), ("prompt_ids", f.prompt_ids, "h.prompt_id"),
                                 ("prompt_versions", f.prompt_versions, "h.prompt_version")):
        if values:
            params[name] = list(values)
            where.append(f"list_contains(${name}, {column})")
    return _frame(con, f"""
        SELECT h.model, h.prompt_id, h.prompt_version, h.currency, count(*) AS hits,
               coalesce(sum(h.input_tokens + h.cache_read_tokens + h.cache_write_tokens), 0)::BIGINT AS input_tokens,
               coalesce(sum(h.output_tokens), 0)::BIGINT AS output_tokens,
               coalesce(sum(h.saved_cost_micros), 0)::BIGINT AS saved_cost_micros,
               count(*) FILTER (WHERE h.saved_cost_micros IS NULL) AS unpriced_hits
        FROM response_cache_hits h WHERE {' AND '.join(where)}
        GROUP BY ALL ORDER BY saved_cost_micros DESC, hits DESC""", params)
