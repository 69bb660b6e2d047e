"""Every named query the dashboard and the CLI reports read, parameterized, returning polars frames.

No SQL lives anywhere else. Each query takes an open connection and a `Filters`; money comes back as
integer micro-minor units (sums cast to BIGINT, so nothing travels as a float) and is rounded up to
the minor unit only when it is formatted (`workbench.money`).

How the filters apply:
- calls: the date is the call's start (UTC days); provider, model (served, else requested), prompt
  id and version, live or replayed are the call's own columns; a run name or tag matches a call
  whose run, or any run around it, has that name or tag.
- runs: the date is the run's start; a run name or tag matches the run and every run inside it; a
  call-level filter (provider, model, prompt, live or replayed) keeps the runs that contain a
  matching call, however deeply nested. Bills are per run, never split by model.
- compactions: the date is when it happened; every other filter goes through the compaction's run
  (a compaction outside any run only shows when no run or call filter is set).

`read(db, spool_dir, fn)` is the one way the dashboard reads: ingest pending spools (fail-open),
open read-only, run `fn`, close. Nothing holds the store between reads.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

import duckdb
import polars as pl

log = logging.getLogger(__name__)
T = TypeVar("T")
# the common denominator of cache savings: prices x 20 keep the 0.1x and 1.25x defaults integral,
# and 10**6 covers every price scale (0..6)
_SAVINGS_DENOMINATOR = 20 * 10**6
_MODEL = "coalesce(c.model_served, c.model_requested)"


class StoreMissing(Exception):
    """There is no store file (and nothing spooled to make one) at the path."""


@dataclass(frozen=True)
class Filters:
    """What every page can be narrowed by. Empty tuples and None mean "all"."""

    date_from: date | None = None
    date_to: date | None = None  # inclusive
    providers: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    prompt_ids: tuple[str, ...] = ()
    prompt_versions: tuple[str, ...] = ()
    run_names: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # "key=value"; every one must match
    source: Literal["all", "live", "replayed"] = "all"

    @property
    def call_level(self) -> bool:
        return bool(self.providers or self.models or self.prompt_ids or self.prompt_versions or self.source != "all")

    @property
    def run_level(self) -> bool:
        return bool(self.run_names or self.tags)


@dataclass
class _Sql:
    """A query's WITH clause, built from the filters, and its named parameters."""

    filters: Filters
    params: dict[str, Any] = field(default_factory=dict)

    def _dates(self, column: str) -> list[str]:
        out = []
        if self.filters.date_from is not None:
            self.params["date_from"] = datetime.combine(self.filters.date_from, time(), timezone.utc)
            out.append(f"{column} >= $date_from")
        if self.filters.date_to is not None:
            self.params["date_to"] = datetime.combine(self.filters.date_to + timedelta(days=1), time(), timezone.utc)
            out.append(f"{column} < $date_to")
        return out

    def _call_level(self) -> list[str]:
        f, out = self.filters, []
        for name, values, column in (
            ("providers", f.providers, "c.provider"), ("models", f.models, _MODEL),
            ("prompt_ids", f.prompt_ids, "c.prompt_id"), ("prompt_versions", f.prompt_versions, "c.prompt_version"),
        ):
            if values:
                self.params[name] = list(values)
                out.append(f"list_contains(${name}, {column})")
        if f.source != "all":
            out.append(f"coalesce(c.replayed, false) = {'true' if f.source == 'replayed' else 'false'}")
        return out

    def _selected_runs(self) -> str:
        """The runs a name or tag picks, and every run inside them."""
        f, preds = self.filters, []
        if f.run_names:
            self.params["run_names"] = list(f.run_names)
            preds.append("list_contains($run_names, name)")
        for index, tag in enumerate(f.tags):
            key, _, value = tag.partition("=")
            self.params[f"tag_k{index}"], self.params[f"tag_v{index}"] = key, value
            preds.append(f"run_id IN (SELECT run_id FROM run_tags WHERE key = $tag_k{index} AND value = $tag_v{index})")
        return (
            f"sel_runs(run_id) AS (SELECT run_id FROM runs WHERE {' AND '.join(preds)} "
            "UNION SELECT r.run_id FROM runs r JOIN sel_runs s ON r.parent_run_id = s.run_id)"
        )

    def _hit_runs(self) -> str:
        """The runs holding a call that matches the call-level filters, and every run around them."""
        return ("hit_runs(run_id) AS (SELECT DISTINCT c.run_id FROM calls c WHERE c.run_id IS NOT NULL AND "
                + " AND ".join(self._call_level())
                + " UNION SELECT r.parent_run_id FROM runs r JOIN hit_runs h ON r.run_id = h.run_id"
                " WHERE r.parent_run_id IS NOT NULL)")

    def with_(self, prepared: bool = False) -> str:
        """`WITH fc (filtered calls), fr (filtered runs), fx (filtered compactions)`. `prepared`: the
        run sets are already in the temp tables `_wb_sel_runs` and `_wb_hit_runs` (see `scope`)."""
        f = self.filters
        ctes = []
        sel, hit = ("_wb_sel_runs", "_wb_hit_runs") if prepared else ("sel_runs", "hit_runs")
        call_preds = self._dates("c.started_at") + self._call_level()
        run_preds = self._dates("r.started_at")
        x_preds = self._dates("x.occurred_at")
        if f.run_level:
            if not prepared:
                ctes.append(self._selected_runs())
            call_preds.append(f"c.run_id IN (SELECT run_id FROM {sel})")
            run_preds.append(f"r.run_id IN (SELECT run_id FROM {sel})")
            x_preds.append(f"x.run_id IN (SELECT run_id FROM {sel})")
        if f.call_level:
            if not prepared:
                ctes.append(self._hit_runs())
            run_preds.append(f"r.run_id IN (SELECT run_id FROM {hit})")
            x_preds.append(f"x.run_id IN (SELECT run_id FROM {hit})")
        ctes.append(f"fc AS (SELECT * FROM calls c WHERE {' AND '.join(call_preds) or 'true'})")
        ctes.append(f"fr AS (SELECT * FROM runs r WHERE {' AND '.join(run_preds) or 'true'})")
        ctes.append(f"fx AS (SELECT * FROM compactions x WHERE {' AND '.join(x_preds) or 'true'})")
        return "WITH RECURSIVE " + ",\n".join(ctes) + "\n"


_SCOPES: dict[int, Filters] = {}


@contextmanager
def scope(con: duckdb.DuckDBPyConnection, f: Filters) -> Iterator[None]:
    """Within it, the queries on `con` with filters `f` read the run sets those filters need from
    temp tables computed once, instead of each query computing them again (a page runs several)."""
    built = _Sql(f)
    if f.run_level:
        _frame_exec(con, f"CREATE OR REPLACE TEMP TABLE _wb_sel_runs AS WITH RECURSIVE {built._selected_runs()} "
                    "SELECT run_id FROM sel_runs", built.params)
    if f.call_level:
        _frame_exec(con, f"CREATE OR REPLACE TEMP TABLE _wb_hit_runs AS WITH RECURSIVE {built._hit_runs()} "
                    "SELECT run_id FROM hit_runs", built.params)
    _SCOPES[id(con)] = f
    try:
        yield
    finally:
        _SCOPES.pop(id(con), None)


def _frame_exec(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> None:
    used = set(re.findall(r"\$(\w+)", sql))
    con.execute(sql, {key: value for key, value in params.items() if key in used} or None)


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None) -> pl.DataFrame:
    used = set(re.findall(r"\$(\w+)", sql))
    params = {key: value for key, value in (params or {}).items() if key in used}
    return con.sql(sql, params=params or None).pl()


def _q(con: duckdb.DuckDBPyConnection, f: Filters, body: str, extra: dict[str, Any] | None = None) -> pl.DataFrame:
    built = _Sql(f)
    head = built.with_(prepared=_SCOPES.get(id(con)) == f)
    return _frame(con, head + body, {**built.params, **(extra or {})})


_DAY = "(DATE '1970-01-01' + (epoch_us(c.started_at) // 86400000000)::INTEGER)"  # the UTC day
_COST = "sum(c.cost_micros)::BIGINT"
_UNPRICED = "count(*) FILTER (WHERE c.settled AND c.cost_micros IS NULL)"


# -- the store as a whole ------------------------------------------------------------------------


def store_counts(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """How much the store holds, unfiltered: to tell an empty store from an empty filter."""
    return _frame(con, "SELECT (SELECT count(*) FROM calls) AS calls, (SELECT count(*) FROM runs) AS runs, "
                  "(SELECT count(*) FROM compactions) AS compactions")


def filter_options(con: duckdb.DuckDBPyConnection, limit: int = 500) -> dict[str, list]:
    """The values each filter can take, and the dates the store spans."""
    calls = _frame(con, f"""
        SELECT list(DISTINCT c.provider ORDER BY c.provider) FILTER (WHERE c.provider IS NOT NULL) AS providers,
               list(DISTINCT {_MODEL} ORDER BY {_MODEL}) FILTER (WHERE {_MODEL} IS NOT NULL) AS models,
               list(DISTINCT c.prompt_id ORDER BY c.prompt_id) FILTER (WHERE c.prompt_id IS NOT NULL) AS prompt_ids,
               list(DISTINCT c.prompt_version ORDER BY c.prompt_version)
                   FILTER (WHERE c.prompt_version IS NOT NULL) AS prompt_versions,
               min({_DAY}) AS first_day, max({_DAY}) AS last_day
        FROM calls c""").row(0, named=True)
    names = _frame(con, "SELECT name FROM runs WHERE name IS NOT NULL GROUP BY name ORDER BY count(*) DESC, name "
                   "LIMIT $limit", {"limit": limit})["name"].to_list()
    tags = _frame(con, "SELECT key || '=' || value AS tag FROM run_tags GROUP BY ALL ORDER BY count(*) DESC, tag "
                  "LIMIT $limit", {"limit": limit})["tag"].to_list()
    return {**{key: value or [] for key, value in calls.items()}, "run_names": sorted(names), "tags": sorted(tags)}


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


# -- Compaction ----------------------------------------------------------------------------------


def compaction_totals(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    return _q(con, f, """
        SELECT count(*) AS events, count(*) FILTER (WHERE x.outcome IS DISTINCT FROM 'ok') AS failed,
               count(DISTINCT x.run_id) AS runs,
               coalesce(sum(x.tokens_before), 0)::BIGINT AS tokens_before,
               coalesce(sum(x.tokens_after), 0)::BIGINT AS tokens_after,
               coalesce(sum(x.summarised_turns), 0)::BIGINT AS summarised_turns,
               coalesce(sum(x.kept_turns), 0)::BIGINT AS kept_turns,
               coalesce(sum(x.cost_micros), 0)::BIGINT AS cost_micros,
               count(*) FILTER (WHERE x.cost_micros IS NULL) AS unpriced
        FROM fx x""")


def compactions_by_day(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    return _q(con, f, """
        SELECT DATE '1970-01-01' + (epoch_us(x.occurred_at) // 86400000000)::INTEGER AS day,
               coalesce(x.outcome, 'unknown') AS outcome,
               count(*) AS events, coalesce(sum(x.tokens_before), 0)::BIGINT AS tokens_before,
               coalesce(sum(x.tokens_after), 0)::BIGINT AS tokens_after,
               coalesce(sum(x.cost_micros), 0)::BIGINT AS cost_micros
        FROM fx x GROUP BY ALL ORDER BY day, outcome""")


def compaction_events(con: duckdb.DuckDBPyConnection, f: Filters, failed_only: bool = False,
                      limit: int = 500) -> pl.DataFrame:
    """The latest compactions (or only those whose outcome is not `ok`), with their run's name."""
    where = "WHERE x.outcome IS DISTINCT FROM 'ok'" if failed_only else ""
    return _q(con, f, f"""
        SELECT x.occurred_at, x.run_id, r.name AS run_name, x.turn, x.outcome, x.tokens_before, x.tokens_after,
               x.limit_tokens, x.summarised_turns, x.kept_turns, x.model, x.cost_micros, x.compaction_id
        FROM fx x LEFT JOIN runs r USING (run_id) {where}
        ORDER BY x.occurred_at DESC, x.compaction_id LIMIT $limit""", {"limit": limit})


def compaction_top_runs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 20) -> pl.DataFrame:
    return _q(con, f, """
        SELECT x.run_id, any_value(r.name) AS run_name, count(*) AS compactions,
               count(*) FILTER (WHERE x.outcome IS DISTINCT FROM 'ok') AS failed,
               coalesce(sum(x.tokens_before - x.tokens_after), 0)::BIGINT AS tokens_removed,
               coalesce(sum(x.cost_micros), 0)::BIGINT AS cost_micros
        FROM fx x LEFT JOIN runs r USING (run_id) WHERE x.run_id IS NOT NULL GROUP BY x.run_id
        ORDER BY compactions DESC, tokens_removed DESC, x.run_id LIMIT $limit""", {"limit": limit})


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


# -- Evals ---------------------------------------------------------------------------------------


def has_tables(con: duckdb.DuckDBPyConnection, *names: str) -> bool:
    found = _frame(con, "SELECT count(DISTINCT table_name) AS n FROM information_schema.tables "
                   "WHERE list_contains($names, table_name)", {"names": list(names)})
    return found["n"][0] == len(names)


def evals_available(con: duckdb.DuckDBPyConnection) -> bool:
    return has_tables(con, "eval_runs", "eval_results")


def eval_history(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 2000) -> pl.DataFrame:
    """Eval runs (latest last) with their verdict, scores and cost per case."""
    built = _Sql(f)
    preds = built._dates("e.started_at")
    for name, values, column in (("prompt_ids", f.prompt_ids, "e.prompt_id"),
                                 ("prompt_versions", f.prompt_versions, "e.prompt_version"),
                                 ("models", f.models, "e.model")):
        if values:
            built.params[name] = list(values)
            preds.append(f"list_contains(${name}, {column})")
    if f.source != "all":
        preds.append("e.mode " + ("= 'replay'" if f.source == "replayed" else "IS DISTINCT FROM 'replay'"))
    return _frame(con, f"""
        SELECT e.eval_run_id, e.suite, e.prompt_id, e.prompt_version, e.prompt_hash, e.model, e.mode, e.git_commit,
               e.started_at, e.mean_score, e.baseline_mean, e.verdict, e.cost_micros,
               coalesce(k.cases, 0) AS cases, coalesce(k.passed, 0) AS passed,
               CASE WHEN k.cases > 0 THEN (e.cost_micros // k.cases)::BIGINT END AS cost_per_case_micros
        FROM eval_runs e LEFT JOIN (
            SELECT eval_run_id, count(*) AS cases, count(*) FILTER (WHERE passed) AS passed
            FROM eval_results GROUP BY eval_run_id) k USING (eval_run_id)
        WHERE {' AND '.join(preds) or 'true'}
        ORDER BY e.started_at, e.eval_run_id LIMIT $limit""", {**built.params, "limit": limit})


def eval_cases(con: duckdb.DuckDBPyConnection, eval_run_id: str) -> pl.DataFrame:
    """One eval run's cases, the largest drop first."""
    return _frame(con, """
        SELECT case_id, score, baseline_score, delta, passed, cost_micros, run_id, output
        FROM eval_results WHERE eval_run_id = $id ORDER BY delta NULLS LAST, case_id""", {"id": eval_run_id})


# -- Run explorer --------------------------------------------------------------------------------


def run_choices(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 300) -> pl.DataFrame:
    """The latest top-level runs, to pick one to explore."""
    return _q(con, f, """
        SELECT r.run_id, r.name, r.status, r.started_at, r.billed_cost_micros AS cost_micros, r.billed_calls AS calls
        FROM fr r WHERE r.parent_run_id IS NULL ORDER BY r.started_at DESC, r.run_id LIMIT $limit""", {"limit": limit})


_SUBTREE = """WITH RECURSIVE tree(run_id, depth) AS (
    SELECT run_id, 0 FROM runs WHERE run_id = $run_id
    UNION ALL SELECT r.run_id, t.depth + 1 FROM runs r JOIN tree t ON r.parent_run_id = t.run_id WHERE t.depth < 50)
"""


def run_tree(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """The run and every run inside it, with their depth, bills and tags; empty when the id is unknown."""
    return _frame(con, _SUBTREE + """
        , tags AS (SELECT g.run_id, list(g.key || '=' || g.value ORDER BY g.key) AS tag_list FROM run_tags g
                   WHERE list_contains((SELECT list(run_id) FROM tree), g.run_id) GROUP BY g.run_id)
        SELECT t.depth, r.*, tags.tag_list
        FROM tree t JOIN runs r USING (run_id) LEFT JOIN tags USING (run_id) ORDER BY r.started_at, t.depth""",
                  {"run_id": run_id})


def _subtree_ids(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    return _frame(con, _SUBTREE + "SELECT run_id FROM tree", {"run_id": run_id})["run_id"].to_list()


def run_calls(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """Every call of the run and of the runs inside it, in order, with its bodies. The run ids and
    call ids are looked up as lists (index lookups), never by joining the whole calls table."""
    calls = _frame(con, """
        SELECT c.call_id, c.run_id, c.started_at, c.ended_at, c.wire, c.provider,
               coalesce(c.model_served, c.model_requested) AS model, c.http_status, c.stop_reason, c.error_type,
               c.error_message, c.settled, c.replayed, c.input_tokens, c.cache_read_tokens, c.cache_write_tokens,
               c.output_tokens, c.reasoning_tokens, c.cost_micros, c.currency, c.price_source, c.tool_names,
               c.span_id, c.prompt_id, c.prompt_version
        FROM calls c WHERE list_contains($ids, c.run_id) ORDER BY c.started_at, c.call_id""",
                   {"ids": _subtree_ids(con, run_id)})
    bodies = _frame(con, """
        SELECT call_id, request_json, response_json, output_text, tool_calls FROM call_bodies
        WHERE list_contains($ids, call_id)""", {"ids": calls["call_id"].to_list()})
    return calls.join(bodies, on="call_id", how="left", maintain_order="left")


def run_detail(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """One run's row (empty when the id is unknown)."""
    return _frame(con, "SELECT * FROM runs WHERE run_id = $run_id", {"run_id": run_id})


def run_exchanges(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """The HTTP exchanges of the run and the runs inside it, in order, as recorded (for export)."""
    calls = _frame(con, """
        SELECT c.call_id, c.run_id, c.started_at, c.method, c.url, c.stream, c.http_status, c.wire,
               coalesce(c.model_served, c.model_requested) AS model, c.replayed
        FROM calls c WHERE list_contains($ids, c.run_id) ORDER BY c.started_at, c.call_id""",
                   {"ids": _subtree_ids(con, run_id)})
    bodies = _frame(con, "SELECT call_id, request_json, response_json FROM call_bodies WHERE list_contains($ids, call_id)",
                    {"ids": calls["call_id"].to_list()})
    return calls.join(bodies, on="call_id", how="left", maintain_order="left")


def run_spans(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """The spans of the run's trace (or, without a trace id, of the run and the runs inside it)."""
    return _frame(con, """
        SELECT s.span_id, s.parent_span_id, s.name, s.kind, s.run_id, s.start_time, s.end_time, s.status_code,
               s.status_message
        FROM spans s
        WHERE list_contains($ids, s.run_id) OR s.trace_id = (SELECT trace_id FROM runs WHERE run_id = $run_id)
        ORDER BY s.start_time, s.span_id""", {"run_id": run_id, "ids": _subtree_ids(con, run_id)})


def run_compactions(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    return _frame(con, """
        SELECT x.occurred_at, x.run_id, x.turn, x.outcome, x.tokens_before, x.tokens_after, x.summarised_turns,
               x.kept_turns, x.model, x.cost_micros
        FROM compactions x WHERE list_contains($ids, x.run_id) ORDER BY x.occurred_at""",
                  {"ids": _subtree_ids(con, run_id)})


# -- pages and the read path ---------------------------------------------------------------------


def overview_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    with scope(con, f):
        cube = spend_cube(con, f)
        return {"calls": rollup(cube, ()), "currency": currency_totals(cube), "runs": run_totals(con, f),
                "by_day": rollup(cube, ("day", "model", "prompt_id", "prompt_version", "currency"),
                                 ("calls", "cost_micros", "priced_calls", "unpriced_calls")),
                "by_model": model_totals(cube), "by_prompt": prompt_totals(cube),
                "top_names": top_run_names(con, f), "top_runs": top_runs(con, f)}


def cache_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    with scope(con, f):
        groups = cache_savings(con, f, ("prompt_id", "prompt_version", "model"))
        return {"totals": cache_totals(groups), "by_prompt_model": groups, "unstable": unstable_prefix_runs(con, f)}


def compaction_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    with scope(con, f):
        return {"totals": compaction_totals(con, f), "by_day": compactions_by_day(con, f),
                "failed": compaction_events(con, f, failed_only=True), "top_runs": compaction_top_runs(con, f),
                "events": compaction_events(con, f)}


def failures_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    with scope(con, f):
        return {"totals": failure_totals(con, f), "runs": failed_runs(con, f),
                "by_error": failures_by(con, f, "error_code"), "by_prompt": failures_by(con, f, "prompt")}


def evals_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    if not evals_available(con):
        return {}
    return {"history": eval_history(con, f)}


def explorer_page(con: duckdb.DuckDBPyConnection, f: Filters, run_id: str | None = None) -> dict[str, pl.DataFrame]:
    with scope(con, f):
        out = {"choices": run_choices(con, f)}
    if run_id:
        out.update(tree=run_tree(con, run_id), calls=run_calls(con, run_id), spans=run_spans(con, run_id),
                   compactions=run_compactions(con, run_id))
    return out


PAGES: dict[str, Callable[..., dict[str, pl.DataFrame]]] = {
    "overview": overview_page, "prompt_cache": cache_page, "compaction": compaction_page,
    "failures": failures_page, "evals": evals_page, "run_explorer": explorer_page,
}


def ingest_pending(db: Path, spool_dir: Path | None, wait: bool = False) -> int:
    """Ingest what recorders have spooled (`wait`: behind another process that is ingesting; the
    dashboard never waits, a command does); never raises."""
    if spool_dir is None:
        return 0
    try:
        from workbench.store.ingest import ingest_spools

        return ingest_spools(Path(db), Path(spool_dir), wait=wait)
    except Exception as exc:  # noqa: BLE001 - reading must not fail because ingestion did
        log.warning("could not ingest spools from %s: %s", spool_dir, exc)
        return 0


def read(db: Path | str, spool_dir: Path | str | None, fn: Callable[[duckdb.DuckDBPyConnection], T],
         wait_s: float = 5.0, ingest_wait: bool = False) -> T:
    """Ingest pending spools, open the store read-only, run `fn`, close. `StoreMissing` when there
    is no store file; `WorkbenchError` (WB_STORE_LOCKED, WB_STORE_INVALID) when it cannot be read."""
    from workbench.store.db import open_store

    db = Path(db)
    ingest_pending(db, Path(spool_dir) if spool_dir else None, wait=ingest_wait)
    if not db.exists():
        raise StoreMissing(str(db))
    with open_store(db, read_only=True, wait_s=wait_s) as con:
        return fn(con)


__all__ = [
    "Filters", "PAGES", "StoreMissing", "cache_savings", "cache_totals", "call_totals", "compaction_events",
    "compaction_top_runs", "compaction_totals", "compactions_by_day", "currency_totals", "eval_cases",
    "eval_history", "evals_available", "failed_runs", "failure_totals", "failures_by", "filter_options",
    "has_tables", "ingest_pending", "model_prices", "model_totals", "prompt_totals", "read", "rollup",
    "run_calls", "run_choices", "run_compactions", "run_detail", "run_exchanges", "run_spans", "run_totals",
    "run_tree", "scope", "spend_by_currency", "spend_by_day", "spend_by_model", "spend_by_prompt", "spend_cube",
    "store_counts", "top_run_names", "top_runs", "unstable_prefix_runs"
]


# -- eval cases from captured traffic (`workbench eval cases-from-runs`) ----------------------------


def prompt_runs_for_cases(con: duckdb.DuckDBPyConnection, prompt_id: str, since: datetime | date | None = None,
                          limit: int | None = None) -> pl.DataFrame:
    """The finished runs of one prompt (kind `llm` or `eval_case`) that carry their variables (the
    `vars` tag) and made a settled call, with that last settled call's output: one row per run,
    the latest `limit` of them, oldest first. A run with a selected run inside it (an eval case
    around its `llm()` run) gives way to the inner one, so no case is written twice."""
    since_at = datetime.combine(since, time.min, tzinfo=timezone.utc) if type(since) is date else since
    return _frame(con, """
        WITH cand AS (
            SELECT r.run_id, r.parent_run_id, r.kind, r.prompt_version, r.prompt_hash, r.started_at, t.value AS vars
            FROM runs r JOIN run_tags t ON t.run_id = r.run_id AND t.key = 'vars'
            WHERE r.prompt_id = $prompt_id AND r.kind IN ('llm', 'eval_case') AND r.status = 'ok'
              AND ($since::TIMESTAMPTZ IS NULL OR r.started_at >= $since::TIMESTAMPTZ)),
        leaf AS (
            SELECT * FROM cand WHERE run_id NOT IN (SELECT parent_run_id FROM cand WHERE parent_run_id IS NOT NULL)),
        last_call AS (
            SELECT c.run_id, b.output_text, b.tool_calls,
                   row_number() OVER (PARTITION BY c.run_id ORDER BY c.started_at DESC, c.call_id DESC) AS n
            FROM calls c JOIN call_bodies b USING (call_id)
            WHERE c.settled AND c.run_id IN (SELECT run_id FROM leaf)),
        picked AS (
            SELECT l.run_id, l.kind, l.prompt_version, l.prompt_hash, l.started_at, l.vars, k.output_text, k.tool_calls
            FROM leaf l JOIN last_call k ON k.run_id = l.run_id AND k.n = 1
            ORDER BY l.started_at DESC, l.run_id DESC LIMIT $limit)
        SELECT * FROM picked ORDER BY started_at, run_id""",
        {"prompt_id": prompt_id, "since": since_at, "limit": limit if limit is not None else 2**62})
