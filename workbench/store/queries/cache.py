"""Prompt cache: reads, hit rate and the money they saved net of the write premium."""

from __future__ import annotations

import json
import logging
from collections import Counter
from fractions import Fraction

import duckdb
import polars as pl

from workbench.models import PriceSheet
from workbench.money import minor_digits
from workbench.store import rollup
from workbench.store.queries._base import Filters, _MODEL, _frame, _q, _rq, _rrq, rolled_up, runs_rolled_up, scoped

log = logging.getLogger(__name__)

# -- Prompt cache --------------------------------------------------------------------------------


def model_prices(con: duckdb.DuckDBPyConnection) -> dict[str, PriceSheet]:
    """The price sheets calls were priced by (the `models` table, as recorded), by price_source."""
    sheets = {}
    for source, spec_json in _frame(con, "SELECT price_source, spec FROM models").iter_rows():
        try:
            spec = json.loads(spec_json)
            sheets[source] = PriceSheet.model_validate({k: v for k, v in spec.items() if k in PriceSheet.model_fields})
        except (TypeError, ValueError) as exc:
            log.warning("unreadable model row %s: %s", source, exc)
    return sheets


def _savings(sheet: PriceSheet, tier_index: int, row: dict) -> tuple[Fraction, Fraction]:
    """What cache reads saved and what cache writes cost above plain input, exactly, in micro-minor
    units, at one tier of one sheet (prices x 20 keep the 0.1x and 1.25x defaults integral)."""
    tier = sheet.long_context[tier_index - 1] if tier_index else sheet
    in20 = tier.input * 20
    read20 = tier.cache_read * 20 if tier.cache_read is not None else tier.input * 2
    w5m20 = tier.cache_write_5m * 20 if tier.cache_write_5m is not None else tier.input * 25
    w1h20 = tier.cache_write_1h * 20 if tier.cache_write_1h is not None else w5m20
    unit = Fraction(10 ** minor_digits(sheet.currency), 20 * 10**sheet.scale)
    one_hour = row["cache_write_1h_tokens"]
    read = row["cache_read_tokens"] * (in20 - read20) * unit
    write = ((row["cache_write_tokens"] - one_hour) * (w5m20 - in20) + one_hour * (w1h20 - in20)) * unit
    return read, write


def cache_savings(con: duckdb.DuckDBPyConnection, f: Filters, by: tuple[str, ...] = (), raw: bool = False
                  ) -> pl.DataFrame:
    """Cache use and the money it saved, grouped by any of `prompt_id`, `prompt_version`, `model`,
    `provider` (none: one row). Over the settled calls the filters select:
    - read_share = cache_read / (input + cache_read + cache_write), token-weighted;
    - hit rate = hit_calls / calls (calls that read anything from the cache);
    - over live calls only (money that was paid): read_savings_micros = sum(cache_read x (input price -
      read price)), write_premium_micros = sum(cache_write x (write price - input price)) (5-minute and
      1-hour writes each at their price), net_savings_micros = the difference; each exact, at the tier
      each call was priced at, truncated toward zero to the micro-minor unit once per group.
    Live calls with no price are counted in `unpriced_calls` and left out of the money; replayed calls
    are counted in `replayed_calls` (they saved nothing: they were never paid for).
    From the daily rollup when it can answer `f` (`rolled_up`), else under a run name or tag from the
    per-run one (`rollup.CACHE_RUNS`, as `runs_rolled_up`), when no price sheet has long-context tiers
    (a call's tier depends on its own size), unless `raw`: the same figures."""
    sheets = model_prices(con)
    # savings are linear in tokens: sum tokens per group, price row and tier first (integer adds per
    # call), then price those few sums in Python, exactly
    tiered = {source: [tier.above_input_tokens for tier in sheet.long_context]
              for source, sheet in sheets.items() if sheet.long_context}
    daily = not raw and not tiered and rolled_up(con, f)
    # a run name or tag: the selected runs' rows of the per-run rollup are a sixth of their calls at
    # 10,000,000 calls, and fewer columns (cache savings under a tag: 0.44 -> 0.19 s of CPU)
    per_run = (not raw and not tiered and not daily and f.run_level and runs_rolled_up(con, f)
               and scoped(con, f, "cache_runs_whole", lambda: rollup.whole(con, rollup.CACHE_RUNS)))
    allowed = {"prompt_id": "c.prompt_id", "prompt_version": "c.prompt_version",
               "model": "c.model" if daily or per_run else _MODEL, "provider": "c.provider"}
    keys = "".join(f"{allowed[name]} AS {name}, " for name in by)
    if daily or per_run:
        sums = f"""
            SELECT {keys}c.price_source, 0 AS tier, c.replayed, sum(c.settled)::BIGINT AS calls,
                   sum(c.hit_calls)::BIGINT AS hit_calls, sum(c.settled_input_tokens)::BIGINT AS input_tokens,
                   sum(c.settled_cache_read_tokens)::BIGINT AS cache_read_tokens,
                   sum(c.settled_cache_write_tokens)::BIGINT AS cache_write_tokens,
                   sum(c.settled_cache_write_1h_tokens)::BIGINT AS cache_write_1h_tokens
            FROM fc c WHERE c.settled > 0 GROUP BY ALL"""
        per_price = _rq(con, f, sums) if daily else _rrq(con, f, sums, spec=rollup.CACHE_RUNS)
        return _savings_frame(per_price, sheets, by)
    if tiered:
        con.register("_wb_tiers", pl.DataFrame({"price_source": list(tiered), "thresholds": list(tiered.values())},
                                               schema={"price_source": pl.Utf8, "thresholds": pl.List(pl.Int64)}
                                               ).to_arrow())
        tier = ("coalesce(len(list_filter(p.thresholds, lambda t: c.input_tokens + c.cache_read_tokens "
                "+ c.cache_write_tokens > t)), 0)")
        join = "LEFT JOIN _wb_tiers p ON p.price_source = c.price_source"
    else:
        tier, join = "0", ""
    try:
        per_price = _q(con, f, f"""
            SELECT {keys}c.price_source, {tier} AS tier, coalesce(c.replayed, false) AS replayed,
                   count(*) AS calls, count(*) FILTER (WHERE c.cache_read_tokens > 0) AS hit_calls,
                   coalesce(sum(c.input_tokens), 0)::BIGINT AS input_tokens,
                   coalesce(sum(c.cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
                   coalesce(sum(c.cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
                   coalesce(sum(c.cache_write_1h_tokens), 0)::BIGINT AS cache_write_1h_tokens
            FROM fc c {join} WHERE c.settled GROUP BY ALL""")
    finally:
        if tiered:
            con.unregister("_wb_tiers")
    return _savings_frame(per_price, sheets, by)


_COUNTS = ("calls", "hit_calls", "input_tokens", "cache_read_tokens", "cache_write_tokens", "replayed_calls",
           "unpriced_calls")
_MONEY = ("read_savings_micros", "write_premium_micros", "net_savings_micros")


def _savings_frame(per_price: pl.DataFrame, sheets: dict[str, PriceSheet], by: tuple[str, ...]) -> pl.DataFrame:
    """Settled calls' sums per group, price row, tier and live or replayed, priced into the groups'
    savings: a row per group and currency (a sum never adds two), calls with no price on the row of
    the main currency (the one most calls were priced in; ties: the first by name), as the ledger does."""
    currencies = [sheets[source].currency if source in sheets else None for source in per_price["price_source"]]
    priced = Counter()
    for currency, calls in zip(currencies, per_price["calls"]):
        if currency is not None:
            priced[currency] += calls
    main = min(priced, key=lambda currency: (-priced[currency], currency), default="USD")
    groups: dict[tuple, dict] = {}
    for row, currency in zip(per_price.iter_rows(named=True), currencies):
        currency = currency or main
        group = groups.setdefault((*(row[name] for name in by), currency), {
            **{name: row[name] for name in by}, "calls": 0, "hit_calls": 0, "input_tokens": 0,
            "cache_read_tokens": 0, "cache_write_tokens": 0, "replayed_calls": 0, "unpriced_calls": 0,
            "currency": currency, "read": Fraction(0), "write": Fraction(0)})
        for name in ("calls", "hit_calls", "input_tokens", "cache_read_tokens", "cache_write_tokens"):
            group[name] += row[name]
        sheet = sheets.get(row["price_source"]) if row["price_source"] else None
        if row["replayed"]:
            group["replayed_calls"] += row["calls"]
        elif sheet is None:
            group["unpriced_calls"] += row["calls"]
        else:
            read, write = _savings(sheet, row["tier"], row)
            group["read"] += read
            group["write"] += write
    rows = []
    for group in groups.values():
        read, write = int(group.pop("read")), int(group.pop("write"))
        rows.append({**group, "read_savings_micros": read, "write_premium_micros": write,
                     "net_savings_micros": read - write})
    schema = {**{name: pl.Utf8 for name in by}, **{name: pl.Int64 for name in _COUNTS}, "currency": pl.Utf8,
              **{name: pl.Int64 for name in _MONEY}}
    # ties cut by the group's names: the groups come in the calls' order, which a read does not fix
    return pl.DataFrame(rows, schema=schema).sort(
        ["net_savings_micros", "calls", *by, "currency"], descending=[True, True, *(False for _ in by), False],
        nulls_last=True)


def cache_totals(groups: pl.DataFrame) -> pl.DataFrame:
    """`cache_savings` groups summed per currency (a total never adds two), the currency with the
    most calls first; one row of zeros when there are none."""
    if groups.is_empty():
        return pl.DataFrame({**{name: [0] for name in (*_COUNTS, *_MONEY)}, "currency": [None]},
                            schema_overrides={"currency": pl.Utf8})
    return (groups.group_by("currency").agg(*(pl.col(name).sum() for name in (*_COUNTS, *_MONEY)))
            .sort(["calls", "currency"], descending=[True, False]))


def unstable_prefix_runs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 200, raw: bool = False
                         ) -> pl.DataFrame:
    """Runs of two or more settled calls whose first call wrote the cache and whose later calls read
    nothing from it: the prefix moved between turns, so every write was paid for and never used.
    `model` is the run's model (the first by name when its calls used several). Merged per run from
    the per-run rollup when it can answer `f` (`runs_rolled_up`), unless `raw`: the same figures."""
    unstable = """
        SELECT p.run_id, r.name, r.started_at, p.model, p.calls, p.write_tokens, p.cost_micros,
               count(*) OVER () AS total_runs
        FROM per_run p LEFT JOIN runs r USING (run_id)
        WHERE p.calls >= 2 AND p.first_write_t = p.t0 AND coalesce(p.last_read_t, p.t0) <= p.t0
        ORDER BY p.write_tokens DESC, p.run_id LIMIT $limit"""
    if not raw and runs_rolled_up(con, f):
        # only the runs with a row that could hold their first call are merged (a row whose first
        # call wrote and that read nothing after it): an unstable run's first call is the first of
        # one of its rows, which then is such a row (418 -> 226 ms of CPU at 10,000,000 calls)
        return _rrq(con, f, """
            , starts AS (
                SELECT DISTINCT c.run_id FROM fc c
                WHERE c.settled > 0 AND c.run_id IS NOT NULL AND c.first_write_at = c.first_at
                      AND coalesce(c.last_read_at, c.first_at) <= c.first_at),
            per_run AS (
                SELECT c.run_id, sum(c.settled)::BIGINT AS calls, min(c.first_at) AS t0,
                       min(c.first_write_at) AS first_write_t, max(c.last_read_at) AS last_read_t,
                       sum(c.write_tokens)::BIGINT AS write_tokens, sum(c.cost_micros)::BIGINT AS cost_micros,
                       min(c.model) AS model
                FROM fc c WHERE c.settled > 0 AND c.run_id IN (SELECT run_id FROM starts) GROUP BY c.run_id)""" + unstable, {"limit": limit})
    return _q(con, f, f"""
        , per_run AS (
            SELECT c.run_id, count(*) AS calls, min(epoch_us(c.started_at)) AS t0,
                   min(epoch_us(c.started_at)) FILTER (WHERE c.cache_write_tokens > 0) AS first_write_t,
                   max(epoch_us(c.started_at)) FILTER (WHERE c.cache_read_tokens > 0) AS last_read_t,
                   sum(c.cache_write_tokens)::BIGINT AS write_tokens, sum(c.cost_micros)::BIGINT AS cost_micros,
                   min({_MODEL}) AS model
            FROM fc c WHERE c.settled AND c.run_id IS NOT NULL GROUP BY c.run_id)""" + unstable, {"limit": limit})
