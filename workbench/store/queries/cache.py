"""Prompt cache: reads, hit rate and the money they saved net of the write premium."""

from __future__ import annotations

import json
import logging

import duckdb
import polars as pl

from workbench.store.queries._base import Filters, _MODEL, _SAVINGS_DENOMINATOR, _frame, _q

log = logging.getLogger(__name__)

# -- Prompt cache --------------------------------------------------------------------------------


def _price_columns(spec: dict, prefix: str) -> dict[str, int | None]:
    """One tier's prices x 20 (so the 0.1x read and 1.25x write defaults stay integral)."""
    base = spec["input"] * 20
    read = spec.get("cache_read")
    write_5m = spec.get("cache_write_5m")
    write_5m20 = write_5m * 20 if write_5m is not None else spec["input"] * 25
    write_1h = spec.get("cache_write_1h")
    return {
        f"{prefix}in20": base,
        f"{prefix}read20": read * 20 if read is not None else spec["input"] * 2,
        f"{prefix}w5m20": write_5m20,
        f"{prefix}w1h20": write_1h * 20 if write_1h is not None else write_5m20,
    }


def model_prices(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The price rows calls were priced by (the `models` table, as recorded), one per price_source,
    as integer columns x 20, with the long-context tier beside the base one."""
    rows = []
    for source, spec_json in _frame(con, "SELECT price_source, spec FROM models").iter_rows():
        try:
            spec = json.loads(spec_json)
            row = {"price_source": source, "scale": int(spec.get("scale") or 0),
                   "currency": spec.get("currency", "USD"), **_price_columns(spec, "")}
            long = spec.get("long_context")
            row.update({"lc_above": long["above_input_tokens"], **_price_columns(long, "lc_")} if long else
                       {"lc_above": None, "lc_in20": None, "lc_read20": None, "lc_w5m20": None, "lc_w1h20": None})
            rows.append(row)
        except (TypeError, ValueError, KeyError) as exc:
            log.warning("unreadable model row %s: %s", source, exc)
    schema = {"price_source": pl.Utf8, "scale": pl.Int64, "currency": pl.Utf8, "in20": pl.Int64, "read20": pl.Int64,
              "w5m20": pl.Int64, "w1h20": pl.Int64, "lc_above": pl.Int64, "lc_in20": pl.Int64,
              "lc_read20": pl.Int64, "lc_w5m20": pl.Int64, "lc_w1h20": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def cache_savings(con: duckdb.DuckDBPyConnection, f: Filters, by: tuple[str, ...] = ()) -> pl.DataFrame:
    """Cache use and the money it saved, grouped by any of `prompt_id`, `prompt_version`, `model`,
    `provider` (none: one row). Over settled calls:
    - read_share = cache_read / (input + cache_read + cache_write), token-weighted;
    - hit rate = hit_calls / calls (calls that read anything from the cache);
    - read_savings_micros = sum(cache_read x (input price - read price)),
      write_premium_micros = sum(cache_write x (write price - input price)) (5-minute and 1-hour
      writes each at their price), net_savings_micros = the difference; each computed exactly over
      the common denominator, rounded toward zero to the micro-minor unit once, at the end.
    Calls with no price row are counted in `unpriced_calls` and left out of the money."""
    allowed = {"prompt_id": "c.prompt_id", "prompt_version": "c.prompt_version", "model": _MODEL,
               "provider": "c.provider"}
    keys = [f"{allowed[name]} AS {name}" for name in by]
    names = "".join(f"{name}, " for name in by)
    prices = model_prices(con)
    # savings are linear in tokens: sum tokens per group and price row first (integer adds per call),
    # then price the few sums. A long-context tier splits a price row by the call's total input.
    long = prices["lc_above"].is_not_null().any()
    tier_flag = ("(p.lc_above IS NOT NULL AND c.input_tokens + c.cache_read_tokens + c.cache_write_tokens > p.lc_above)"
                 if long else "false")
    join = "LEFT JOIN _wb_prices p ON p.price_source = c.price_source" if long else ""
    con.register("_wb_prices", prices.to_arrow())
    try:
        def tier(column: str) -> str:
            return f"CASE WHEN t.long_tier THEN p.lc_{column} ELSE p.{column} END"

        norm = "(10::HUGEINT ** (6 - p.scale))::HUGEINT"
        read = f"t.cache_read_tokens::HUGEINT * ({tier('in20')} - {tier('read20')}) * {norm}"
        write = (f"((t.cache_write_tokens - t.cache_write_1h_tokens)::HUGEINT * ({tier('w5m20')} - {tier('in20')})"
                 f" + t.cache_write_1h_tokens::HUGEINT * ({tier('w1h20')} - {tier('in20')})) * {norm}")
        return _q(con, f, f"""
            , per_price AS (
                SELECT {"".join(k + ", " for k in keys)}c.price_source, {tier_flag} AS long_tier,
                       count(*) AS calls, count(*) FILTER (WHERE c.cache_read_tokens > 0) AS hit_calls,
                       coalesce(sum(c.input_tokens), 0)::BIGINT AS input_tokens,
                       coalesce(sum(c.cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
                       coalesce(sum(c.cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
                       coalesce(sum(c.cache_write_1h_tokens), 0)::BIGINT AS cache_write_1h_tokens
                FROM fc c {join} WHERE c.settled GROUP BY ALL),
            agg AS (
                SELECT {names}sum(t.calls)::BIGINT AS calls, sum(t.hit_calls)::BIGINT AS hit_calls,
                       sum(t.input_tokens)::BIGINT AS input_tokens, sum(t.cache_read_tokens)::BIGINT AS cache_read_tokens,
                       sum(t.cache_write_tokens)::BIGINT AS cache_write_tokens,
                       coalesce(sum(t.calls) FILTER (WHERE p.price_source IS NULL), 0)::BIGINT AS unpriced_calls,
                       any_value(p.currency) AS currency, sum({read}) AS read_num, sum({write}) AS write_num
                FROM per_price t LEFT JOIN _wb_prices p ON p.price_source = t.price_source
                {'GROUP BY ALL' if by else ''})
            SELECT * EXCLUDE (read_num, write_num),
                   coalesce(read_num // {_SAVINGS_DENOMINATOR}, 0)::BIGINT AS read_savings_micros,
                   coalesce(write_num // {_SAVINGS_DENOMINATOR}, 0)::BIGINT AS write_premium_micros,
                   (coalesce(read_num // {_SAVINGS_DENOMINATOR}, 0)
                    - coalesce(write_num // {_SAVINGS_DENOMINATOR}, 0))::BIGINT AS net_savings_micros
            FROM agg ORDER BY net_savings_micros DESC, calls DESC""")
    finally:
        con.unregister("_wb_prices")


def cache_totals(groups: pl.DataFrame) -> pl.DataFrame:
    """`cache_savings` groups summed to one row (the total is the sum of the rows shown)."""
    columns = ["calls", "hit_calls", "input_tokens", "cache_read_tokens", "cache_write_tokens", "unpriced_calls",
               "read_savings_micros", "write_premium_micros", "net_savings_micros"]
    if groups.is_empty():
        return pl.DataFrame({**{name: [0] for name in columns}, "currency": [None]},
                            schema_overrides={"currency": pl.Utf8})
    return groups.select(*(pl.col(name).sum() for name in columns),
                         pl.col("currency").drop_nulls().first().alias("currency"))


def unstable_prefix_runs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 200) -> pl.DataFrame:
    """Runs of two or more settled calls whose first call wrote the cache and whose later calls read
    nothing from it: the prefix moved between turns, so every write was paid for and never used."""
    return _q(con, f, """
        , per_run AS (
            SELECT c.run_id, count(*) AS calls, min(epoch_us(c.started_at)) AS t0,
                   min(epoch_us(c.started_at)) FILTER (WHERE c.cache_write_tokens > 0) AS first_write_t,
                   max(epoch_us(c.started_at)) FILTER (WHERE c.cache_read_tokens > 0) AS last_read_t,
                   sum(c.cache_write_tokens)::BIGINT AS write_tokens, sum(c.cost_micros)::BIGINT AS cost_micros,
                   any_value(coalesce(c.model_served, c.model_requested)) AS model
            FROM fc c WHERE c.settled AND c.run_id IS NOT NULL GROUP BY c.run_id)
        SELECT p.run_id, r.name, r.started_at, p.model, p.calls, p.write_tokens, p.cost_micros,
               count(*) OVER () AS total_runs
        FROM per_run p LEFT JOIN runs r USING (run_id)
        WHERE p.calls >= 2 AND p.first_write_t = p.t0 AND coalesce(p.last_read_t, p.t0) <= p.t0
        ORDER BY p.write_tokens DESC, p.run_id LIMIT $limit""", {"limit": limit})


