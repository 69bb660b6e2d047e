"""Overview and Failures: spend, runs and bills."""

from __future__ import annotations

from typing import Literal

import duckdb
import polars as pl

from workbench.store.queries._base import Filters, _MODEL, _UNPRICED, _q

# -- Overview ------------------------------------------------------------------------------------


def spend_cube(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Calls summed by UTC day, provider, model, prompt id and version, and currency: one scan of
    the calls that the Overview's figures roll up from (`rollup`), integers all the way. The day
    comes from the epoch (no time-zone conversion per row)."""
    return _q(con, f, f"""
        , cube AS (
            SELECT epoch_us(c.started_at) // 86400000000 AS day_n, c.provider, {_MODEL} AS model, c.prompt_id,
                   c.prompt_version, c.currency,
                   count(*) AS calls, count(*) FILTER (WHERE c.settled) AS settled,
                   count(*) FILTER (WHERE NOT coalesce(c.settled, false)) AS unsettled,
                   count(*) FILTER (WHERE c.http_status >= 400 OR c.error_type IS NOT NULL) AS errors,
                   count(*) FILTER (WHERE c.replayed) AS replayed_calls,
                   count(c.cost_micros) AS priced_calls, {_UNPRICED} AS unpriced_calls,
                   coalesce(sum(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens + c.output_tokens)
                       FILTER (WHERE c.settled AND c.cost_micros IS NULL), 0)::BIGINT AS unpriced_tokens,
                   coalesce(sum(c.input_tokens), 0)::BIGINT AS input_tokens,
                   coalesce(sum(c.cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
                   coalesce(sum(c.cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
                   coalesce(sum(c.output_tokens), 0)::BIGINT AS output_tokens,
                   coalesce(sum(c.cost_micros), 0)::BIGINT AS cost_micros
            FROM fc c GROUP BY ALL)
        SELECT (DATE '1970-01-01' + day_n::INTEGER) AS day, * EXCLUDE (day_n) FROM cube ORDER BY day, model""")


_CUBE_SUMS = ("calls", "settled", "unsettled", "errors", "replayed_calls", "priced_calls", "unpriced_calls",
              "unpriced_tokens", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
              "cost_micros")


def rollup(cube: pl.DataFrame, keys: tuple[str, ...], columns: tuple[str, ...] = _CUBE_SUMS) -> pl.DataFrame:
    """`spend_cube` summed over everything but `keys` (integer sums); a group with no priced call
    has a null cost (unpriced or unsettled: unknown, never zero), and the currency its priced calls had."""
    sums = [pl.col(name).sum() for name in columns]
    extra = [] if "currency" in keys else [pl.col("currency").drop_nulls().first().alias("currency")]
    if not keys:
        out = cube.select(sums) if not cube.is_empty() else pl.DataFrame({n: [0] for n in columns})
    else:
        out = cube.group_by(list(keys), maintain_order=True).agg(*extra, *sums)
    if "cost_micros" in columns and "priced_calls" in columns:
        out = out.with_columns(pl.when(pl.col("priced_calls") > 0).then(pl.col("cost_micros")).alias("cost_micros"))
    return out


def call_totals(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """One row: calls, settled, unsettled, errors, unpriced (settled, no price), tokens, replayed."""
    return rollup(spend_cube(con, f), ())


def spend_by_currency(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Priced spend per currency (a total never adds two currencies)."""
    return currency_totals(spend_cube(con, f))


def currency_totals(cube: pl.DataFrame) -> pl.DataFrame:
    return (rollup(cube.filter(pl.col("priced_calls") > 0), ("currency",), ("cost_micros", "priced_calls"))
            .sort("cost_micros", descending=True))


def spend_by_day(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Spend per UTC day, model, prompt id and version, currency (the page regroups it)."""
    return rollup(spend_cube(con, f), ("day", "model", "prompt_id", "prompt_version", "currency"),
                  ("calls", "cost_micros", "priced_calls", "unpriced_calls"))


def spend_by_model(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    return model_totals(spend_cube(con, f))


def model_totals(cube: pl.DataFrame) -> pl.DataFrame:
    return rollup(cube, ("provider", "model"), ("calls", "input_tokens", "cache_read_tokens", "cache_write_tokens",
                                                "output_tokens", "cost_micros", "priced_calls", "unpriced_calls")
                  ).sort(["cost_micros", "calls"], descending=True, nulls_last=True)


def spend_by_prompt(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    return prompt_totals(spend_cube(con, f))


def prompt_totals(cube: pl.DataFrame) -> pl.DataFrame:
    return rollup(cube, ("prompt_id", "prompt_version"), ("calls", "cost_micros", "priced_calls", "unpriced_calls")
                  ).sort(["cost_micros", "calls"], descending=True, nulls_last=True)


def run_totals(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Top-level runs by status; the failure rate is failed / (ok + failed)."""
    return _q(con, f, """
        SELECT count(*) AS runs, count(*) FILTER (WHERE r.status = 'failed') AS failed,
               count(*) FILTER (WHERE r.status = 'ok') AS ok, count(*) FILTER (WHERE r.status = 'running') AS running,
               (SELECT count(*) FROM fr WHERE parent_run_id IS NOT NULL) AS nested_runs
        FROM fr r WHERE r.parent_run_id IS NULL""")


def top_run_names(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 20) -> pl.DataFrame:
    """Top-level runs grouped by name, by billed cost (a bill covers the runs inside it)."""
    return _q(con, f, """
        SELECT r.name, count(*) AS runs, count(*) FILTER (WHERE r.status = 'failed') AS failed,
               coalesce(sum(r.billed_calls), 0)::BIGINT AS calls,
               coalesce(sum(r.billed_cost_micros), 0)::BIGINT AS cost_micros,
               coalesce(sum(r.billed_unpriced_calls), 0)::BIGINT AS unpriced_calls
        FROM fr r WHERE r.parent_run_id IS NULL GROUP BY r.name
        ORDER BY cost_micros DESC, runs DESC LIMIT $limit""", {"limit": limit})


def top_runs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 20) -> pl.DataFrame:
    """The most expensive top-level runs by their bill."""
    return _q(con, f, """
        SELECT r.run_id, r.name, r.status, r.started_at, r.billed_calls AS calls,
               r.billed_cost_micros AS cost_micros, r.billed_unpriced_calls AS unpriced_calls
        FROM fr r WHERE r.parent_run_id IS NULL AND r.billed_cost_micros IS NOT NULL
        ORDER BY r.billed_cost_micros DESC, r.run_id LIMIT $limit""", {"limit": limit})


# -- Failures ------------------------------------------------------------------------------------

_BILL = """coalesce(sum(r.billed_input_tokens), 0)::BIGINT AS input_tokens,
           coalesce(sum(r.billed_cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
           coalesce(sum(r.billed_cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
           coalesce(sum(r.billed_output_tokens), 0)::BIGINT AS output_tokens,
           coalesce(sum(r.billed_cost_micros), 0)::BIGINT AS cost_micros,
           coalesce(sum(r.billed_calls), 0)::BIGINT AS calls,
           coalesce(sum(r.billed_unsettled), 0)::BIGINT AS unsettled,
           coalesce(sum(r.billed_unpriced_calls), 0)::BIGINT AS unpriced_calls"""


def failure_totals(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Failed top-level runs and their summed bills, beside the total spend they are a share of:
    the bills of every top-level run plus the calls made outside any run."""
    return _q(con, f, f"""
        SELECT count(*) AS failed_runs, {_BILL},
               (SELECT count(*) FROM fr WHERE parent_run_id IS NULL) AS runs,
               ((SELECT coalesce(sum(billed_cost_micros), 0) FROM fr WHERE parent_run_id IS NULL)
                + (SELECT coalesce(sum(cost_micros), 0) FROM fc WHERE run_id IS NULL))::BIGINT AS total_cost_micros
        FROM fr r WHERE r.parent_run_id IS NULL AND r.status = 'failed'""")


def failed_runs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 1000) -> pl.DataFrame:
    """Failed runs, latest first, top-level and nested (`top_level` tells them apart: only
    top-level bills add up without counting a call twice)."""
    return _q(con, f, """
        SELECT r.run_id, r.name, r.parent_run_id IS NULL AS top_level, r.started_at, r.ended_at, r.error_code,
               r.error_type, r.error_message, r.prompt_id, r.prompt_version,
               r.billed_input_tokens AS input_tokens, r.billed_cache_read_tokens AS cache_read_tokens,
               r.billed_cache_write_tokens AS cache_write_tokens, r.billed_output_tokens AS output_tokens,
               r.billed_cost_micros AS cost_micros, r.billed_calls AS calls, r.billed_unsettled AS unsettled,
               r.billed_unpriced_calls AS unpriced_calls
        FROM fr r WHERE r.status = 'failed'
        ORDER BY r.started_at DESC, r.run_id LIMIT $limit""", {"limit": limit})


def failures_by(con: duckdb.DuckDBPyConnection, f: Filters, by: Literal["error_code", "prompt"]) -> pl.DataFrame:
    """Failed top-level runs and their bills, by error code or by prompt id and version."""
    # a failure with no Workbench code (an SDK's own exception) is grouped by its exception type
    keys = "coalesce(r.error_code, r.error_type) AS error_code" if by == "error_code" else "r.prompt_id, r.prompt_version"
    return _q(con, f, f"""
        SELECT {keys}, count(*) AS runs, {_BILL}
        FROM fr r WHERE r.parent_run_id IS NULL AND r.status = 'failed'
        GROUP BY ALL ORDER BY cost_micros DESC, runs DESC""")


