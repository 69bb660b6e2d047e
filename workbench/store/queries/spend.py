"""Overview and Failures: spend, runs and bills."""

from __future__ import annotations

from typing import Literal

import duckdb
import polars as pl

from workbench.store import rollup as daily
from workbench.store.queries._base import Filters, _LIVE, _MODEL, _q, _rq, _rrq, rolled_up, runs_rolled_up, scoped

# -- Overview ------------------------------------------------------------------------------------


# what every spend figure sums over calls `c`: live calls paid (their usage too), replayed calls apart
CALL_MONEY = f"""count(*) FILTER (WHERE c.replayed) AS replayed_calls,
    count(c.cost_micros) FILTER (WHERE {_LIVE}) AS priced_calls,
    count(*) FILTER (WHERE {_LIVE} AND c.settled AND c.cost_micros IS NULL) AS unpriced_calls,
    coalesce(sum(c.input_tokens) FILTER (WHERE {_LIVE}), 0)::BIGINT AS input_tokens,
    coalesce(sum(c.cache_read_tokens) FILTER (WHERE {_LIVE}), 0)::BIGINT AS cache_read_tokens,
    coalesce(sum(c.cache_write_tokens) FILTER (WHERE {_LIVE}), 0)::BIGINT AS cache_write_tokens,
    coalesce(sum(c.output_tokens) FILTER (WHERE {_LIVE}), 0)::BIGINT AS output_tokens,
    coalesce(sum(c.cost_micros) FILTER (WHERE {_LIVE}), 0)::BIGINT AS cost_micros,
    count(c.cost_micros) FILTER (WHERE c.replayed) AS replayed_priced_calls,
    count(*) FILTER (WHERE c.replayed AND c.settled AND c.cost_micros IS NULL) AS replayed_unpriced_calls,
    coalesce(sum(c.cost_micros) FILTER (WHERE c.replayed), 0)::BIGINT AS replayed_cost_micros"""


def spend_cube(con: duckdb.DuckDBPyConnection, f: Filters, raw: bool = False) -> pl.DataFrame:
    """Calls summed by UTC day, provider, model, prompt id and version, and currency: one scan of
    the calls that the Overview's figures roll up from (`rollup`), integers all the way. The day
    comes from the epoch (no time-zone conversion per row).

    Money that was paid and calls that were replayed are never added together: `cost_micros`,
    `priced_calls`, `unpriced_calls` and the token counters cover live calls (what left the
    account); `replayed_cost_micros` is what the replayed calls would have cost.

    Summed from the daily rollup when it can answer `f` (`rolled_up`), else (a run name or tag) from
    the per-run rollup when it can (`runs_rolled_up`), unless `raw`: the same figures."""
    if not raw and rolled_up(con, f):
        return _rq(con, f, f"""
            SELECT (DATE '1970-01-01' + c.day_n) AS day, c.provider, c.model, c.prompt_id, c.prompt_version, c.currency,
                   {', '.join(f'sum(c.{name})::BIGINT AS {name}' for name in daily.CUBE)}
            FROM fc c GROUP BY ALL ORDER BY day, model""")
    if not raw and runs_rolled_up(con, f):
        # once within a scope: the breakdowns a page shows beside it regroup it (`ledger.spend_by`)
        return scoped(con, f, "run_cube", lambda: _run_cube(con, f))
    return _q(con, f, f"""
        , cube AS (
            SELECT epoch_us(c.started_at) // 86400000000 AS day_n, c.provider, {_MODEL} AS model, c.prompt_id,
                   c.prompt_version, c.currency,
                   count(*) AS calls, count(*) FILTER (WHERE c.settled) AS settled,
                   count(*) FILTER (WHERE NOT coalesce(c.settled, false)) AS unsettled,
                   count(*) FILTER (WHERE c.http_status >= 400 OR c.error_type IS NOT NULL) AS errors,
                   coalesce(sum(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens + c.output_tokens)
                       FILTER (WHERE {_LIVE} AND c.settled AND c.cost_micros IS NULL), 0)::BIGINT AS unpriced_tokens,
                   {CALL_MONEY}
            FROM fc c GROUP BY ALL)
        SELECT (DATE '1970-01-01' + day_n::INTEGER) AS day, * EXCLUDE (day_n) FROM cube ORDER BY day, model""")


# the spend cube's measures (`daily.CUBE`, in its order) from the per-run rollup's rows summed per key
# and `replayed` (`_run_cube`), which tells their live measures from their replayed ones (`daily.RUNS`)
_LIVE_ROWS, _REPLAYED_ROWS = ~pl.col("replayed"), pl.col("replayed")
RUN_CUBE: dict[str, pl.Expr] = {
    "calls": pl.col("calls").sum(), "settled": pl.col("settled").sum(),
    "unsettled": (pl.col("calls") - pl.col("settled")).sum(), "errors": pl.col("errors").sum(),
    "unpriced_tokens": pl.col("unpriced_tokens").filter(_LIVE_ROWS).sum(),
    "replayed_calls": pl.col("calls").filter(_REPLAYED_ROWS).sum(),
    "priced_calls": pl.col("priced").filter(_LIVE_ROWS).sum(),
    "unpriced_calls": pl.col("unpriced").filter(_LIVE_ROWS).sum(),
    **{name: pl.col(name).filter(_LIVE_ROWS).sum()
       for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")},
    "cost_micros": pl.col("live_cost_micros").sum(),
    "replayed_priced_calls": pl.col("priced").filter(_REPLAYED_ROWS).sum(),
    "replayed_unpriced_calls": pl.col("unpriced").filter(_REPLAYED_ROWS).sum(),
    "replayed_cost_micros": pl.col("replayed_cost_micros").sum(),
}
_RUN_SUMS = ("calls", "settled", "errors", "unpriced_tokens", "priced", "unpriced", "input_tokens", "cache_read_tokens",
             "cache_write_tokens", "output_tokens", "live_cost_micros", "replayed_cost_micros")
_RUN_CUBE_KEYS = ("day", "provider", "model", "prompt_id", "prompt_version", "currency")


def _run_cube(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """The spend cube of the per-run rollup's rows `f` selects: plain sums per key and `replayed` in SQL,
    its live and replayed rows merged per key here (the same integers: each measure a sum of the rows of
    one kind or of both; the sums each filtered by `replayed` in SQL cost a fifth more of the read)."""
    rows = _rrq(con, f, f"""
        SELECT (DATE '1970-01-01' + c.day_n) AS day, c.provider, c.model, c.prompt_id, c.prompt_version, c.currency,
               c.replayed, {', '.join(f'sum(c.{name})::BIGINT AS {name}' for name in _RUN_SUMS)}
        FROM fc c GROUP BY ALL""")
    return (rows.group_by(_RUN_CUBE_KEYS).agg(expr.alias(name) for name, expr in RUN_CUBE.items())
            .sort(["day", "model"], nulls_last=True))


CUBE_SUMS = ("calls", "settled", "unsettled", "errors", "replayed_calls", "priced_calls", "unpriced_calls",
             "unpriced_tokens", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
             "cost_micros", "replayed_priced_calls", "replayed_unpriced_calls", "replayed_cost_micros")
_MONEY = ("calls", "replayed_calls", "cost_micros", "priced_calls", "unpriced_calls", "replayed_cost_micros",
          "replayed_priced_calls", "replayed_unpriced_calls")


def unknown_when_unpriced(frame: pl.DataFrame) -> pl.DataFrame:
    """A group whose every answered call went unpriced has an unknown cost (null), never zero; the
    same for what its replayed calls would have cost."""
    out = frame
    for cost, priced, unpriced in (("cost_micros", "priced_calls", "unpriced_calls"),
                                   ("replayed_cost_micros", "replayed_priced_calls", "replayed_unpriced_calls")):
        if {cost, priced, unpriced} <= set(frame.columns):
            out = out.with_columns(pl.when((pl.col(priced) == 0) & (pl.col(unpriced) > 0)).then(None)
                                   .otherwise(pl.col(cost)).alias(cost))
    return out


def rollup(cube: pl.DataFrame, keys: tuple[str, ...], columns: tuple[str, ...] = CUBE_SUMS) -> pl.DataFrame:
    """`spend_cube` summed over everything but `keys` (integer sums), with the currency its priced
    calls had; a group whose answered calls all went unpriced has a null cost (`unknown_when_unpriced`)."""
    sums = [pl.col(name).sum() for name in columns]
    extra = [] if "currency" in keys else [pl.col("currency").drop_nulls().first().alias("currency")]
    if not keys:
        out = cube.select(sums) if not cube.is_empty() else pl.DataFrame({n: [0] for n in columns})
    else:
        out = cube.group_by(list(keys), maintain_order=True).agg(*extra, *sums)
    return unknown_when_unpriced(out)


def unpriced_models(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """The models of live calls that answered and that nothing priced, with how many calls each."""
    return _q(con, f, f"""
        SELECT c.provider, {_MODEL} AS model, count(*) AS calls FROM fc c
        WHERE {_LIVE} AND c.settled AND c.cost_micros IS NULL GROUP BY ALL ORDER BY calls DESC, model""")


def call_totals(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """One row: calls, settled, unsettled, errors, unpriced (settled, no price), tokens, replayed.
    No money: one figure would add currencies (the money per currency: `spend_by_currency`)."""
    return rollup(spend_cube(con, f), (), tuple(name for name in CUBE_SUMS if not name.endswith("_micros")))


def spend_by_currency(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Priced spend per currency (a total never adds two currencies)."""
    return currency_totals(spend_cube(con, f))


def currency_totals(cube: pl.DataFrame) -> pl.DataFrame:
    """Live spend and what replayed calls would have cost, per currency (a total never adds two)."""
    priced = cube.filter((pl.col("priced_calls") > 0) | (pl.col("replayed_priced_calls") > 0))
    return (rollup(priced, ("currency",), ("cost_micros", "priced_calls", "replayed_cost_micros",
                                           "replayed_priced_calls"))
            .with_columns(pl.col("cost_micros").fill_null(0), pl.col("replayed_cost_micros").fill_null(0))
            .sort("cost_micros", descending=True))


def spend_by_day(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Spend per UTC day, model, prompt id and version, currency (the page regroups it)."""
    return day_totals(spend_cube(con, f))


def day_totals(cube: pl.DataFrame) -> pl.DataFrame:
    """By day, model, prompt version and currency, in that order (the cube's rows tie on day and model)."""
    keys = ("day", "model", "prompt_id", "prompt_version", "currency")
    return rollup(cube, keys, _MONEY).sort(keys, nulls_last=True)


def spend_by_model(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    return model_totals(spend_cube(con, f))


def model_totals(cube: pl.DataFrame) -> pl.DataFrame:
    return rollup(cube, ("provider", "model"), ("input_tokens", "cache_read_tokens", "cache_write_tokens",
                                                "output_tokens", *_MONEY)
                  ).sort(["cost_micros", "calls"], descending=True, nulls_last=True)


def spend_by_prompt(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    return prompt_totals(spend_cube(con, f))


def prompt_totals(cube: pl.DataFrame) -> pl.DataFrame:
    return rollup(cube, ("prompt_id", "prompt_version"), _MONEY
                  ).sort(["cost_micros", "calls"], descending=True, nulls_last=True)


def run_totals(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Top-level runs by status; the failure rate is failed / (ok + failed)."""
    if not (f.run_level or f.call_level):  # counted alone: the Overview's headline, painted first, reads no bill
        return _q(con, f, """
            SELECT count(*) FILTER (WHERE r.parent_run_id IS NULL) AS runs,
                   count(*) FILTER (WHERE r.parent_run_id IS NULL AND r.status = 'failed') AS failed,
                   count(*) FILTER (WHERE r.parent_run_id IS NULL AND r.status = 'ok') AS ok,
                   count(*) FILTER (WHERE r.parent_run_id IS NULL AND r.status = 'running') AS running,
                   count(*) FILTER (WHERE r.parent_run_id IS NOT NULL) AS nested_runs
            FROM fr r""")
    groups, top = _run_groups(con, f), pl.col("top_level")
    counted = [("runs", top), *((status, top & (pl.col("status") == status)) for status in ("failed", "ok", "running")),
               ("nested_runs", ~top)]
    return groups.select(pl.col("runs").filter(keep).sum().alias(name) for name, keep in counted)


def top_run_names(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 20) -> pl.DataFrame:
    """Top-level runs grouped by name and currency, by billed cost (a bill covers the runs inside it)."""
    names = _run_groups(con, f).filter(pl.col("top_level")).group_by("name", "currency").agg(
        pl.col("runs").sum(), pl.col("runs").filter(pl.col("status") == "failed").sum().alias("failed"),
        *(pl.col(name).sum() for name in _MONEY_PARTS[1:]),
        (pl.col("calls") - pl.col("unpriced_calls")).sum().alias("priced_calls"),
        (pl.col("replayed_calls") - pl.col("replayed_unpriced_calls")).sum().alias("replayed_priced_calls"))
    return unknown_when_unpriced(names.sort(["cost_micros", "runs", "name", "currency"],
                                            descending=[True, True, False, False], nulls_last=True).head(limit))


def _run_groups(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """The runs `f` selects, top-level or nested, their bills summed per name, status and currency:
    one read that the top run names regroup, and under a run name, tag or call-level filter the run
    totals too, once within a scope (the Overview's headline and tables share it: `scope`'s `kept`):
    each read of the runs picks those out of every run (~80 ms at 1,000,000 runs)."""
    return scoped(con, f, "run_groups", lambda: _q(con, f, f"""
        , sums AS ({bill_sums("fr", "true", "r.parent_run_id IS NULL AS top_level, r.name, r.status", _MONEY_PARTS)})
        SELECT r.top_level, r.name, r.status, r.currency,
               {", ".join(f"r.{name}::BIGINT AS {name}" for name in _MONEY_PARTS)}
        FROM sums r"""))


def top_runs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 20) -> pl.DataFrame:
    """The most expensive top-level runs by their bill (by its main currency's money): a row per run
    and currency its calls were priced in."""
    def read(runs: str) -> pl.DataFrame:
        return _q(con, f, f"""
            , top AS MATERIALIZED (SELECT * FROM fr r WHERE r.parent_run_id IS NULL AND r.billed_cost_micros IS NOT NULL
                      ORDER BY {_COSTLIEST} LIMIT $limit), bills AS ({bills("top")})
            SELECT r.run_id, r.name, r.status, r.started_at, {RUN_MONEY}
            FROM bills r
            ORDER BY r.billed_cost_micros DESC, r.run_id, r.main DESC, r.currency""", {"limit": limit}, runs=runs)

    # first among the costliest runs of the store alone: under a run name or tag, picking the selected
    # runs out of every run cost ~70 ms of ~100 at 1,000,000 runs. The costliest of the selected runs
    # are among them when `limit` of them are selected (every other selected run costs less), else all
    # the runs are read
    out = read(f"(SELECT * FROM runs r WHERE r.parent_run_id IS NULL AND r.billed_cost_micros IS NOT NULL "
               f"ORDER BY {_COSTLIEST} LIMIT {_PICKED_PER_SHOWN * limit})") if f.run_level or f.call_level else None
    if out is None or out["run_id"].n_unique() < limit:
        out = read("runs")
    return unknown_when_unpriced(out)


_COSTLIEST = "r.billed_cost_micros DESC, r.run_id"  # the top runs' order
_PICKED_PER_SHOWN = 50  # the costliest runs of the store read first per top run shown (see `top_runs`)


# -- Failures ------------------------------------------------------------------------------------


# each sum of a bill (`bills`' rows) over runs `r`: from the run's columns for its main currency, and
# from an entry `e` of its `billed_other_currencies` for another (null: nothing in that currency)
_OTHERS = "coalesce(list_sum(CAST(json_extract(r.billed_other_currencies, '$.*.{}') AS BIGINT[])), 0)"
_BILL_PARTS = {
    "runs": ("count(*)", None),
    **{name: (f"sum(r.billed_{name})", None)
       for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "unsettled")},
    "calls": ("sum(CASE WHEN r.billed_other_currencies IS NULL THEN r.billed_calls "
              f"ELSE r.billed_calls - {_OTHERS.format('calls')} END)", "sum((e.value->>'calls')::INTEGER)"),
    "cost_micros": ("sum(r.billed_cost_micros)", "sum((e.value->>'cost_micros')::BIGINT)"),
    "unpriced_calls": ("sum(r.billed_unpriced_calls)", None),
    "replayed_calls": ("sum(CASE WHEN r.billed_other_currencies IS NULL THEN r.billed_replayed_calls "
                       f"ELSE r.billed_replayed_calls - {_OTHERS.format('replayed_calls')} END)",
                       "sum((e.value->>'replayed_calls')::INTEGER)"),
    "replayed_cost_micros": ("sum(r.billed_replayed_cost_micros)", "sum((e.value->>'replayed_cost_micros')::BIGINT)"),
    "replayed_unpriced_calls": ("sum(r.billed_replayed_unpriced_calls)", None),
}
_MONEY_PARTS = ("runs", "calls", "cost_micros", "unpriced_calls", "replayed_calls", "replayed_cost_micros",
                "replayed_unpriced_calls")


def bills(runs: str) -> str:
    """The bills of `runs` (a relation of `runs` rows) as a row per run and currency (`Billed`), each
    with its run's columns: the row of its main currency carries the run's usage, unsettled and
    unpriced calls and the calls priced in it; another currency's row its money and the calls priced
    in it, so the rows of a run sum to its bill and a sum over them, grouped by currency, never adds
    two currencies. (The run's columns ride along: joining the rows back to the runs cost more than
    the sums themselves. `runs` is read twice: a few picked runs are best MATERIALIZED first.)"""
    others = _OTHERS + "::BIGINT"
    return f"""
        SELECT r.*, coalesce(r.billed_currency, 'USD') AS currency, true AS main,
               r.billed_input_tokens AS input_tokens, r.billed_cache_read_tokens AS cache_read_tokens,
               r.billed_cache_write_tokens AS cache_write_tokens, r.billed_output_tokens AS output_tokens,
               r.billed_unsettled AS unsettled,
               CASE WHEN r.billed_other_currencies IS NULL THEN r.billed_calls
                    ELSE r.billed_calls - {others.format("calls")} END AS calls,
               r.billed_cost_micros AS cost_micros, r.billed_unpriced_calls AS unpriced_calls,
               CASE WHEN r.billed_other_currencies IS NULL THEN r.billed_replayed_calls
                    ELSE r.billed_replayed_calls - {others.format("replayed_calls")} END AS replayed_calls,
               r.billed_replayed_cost_micros AS replayed_cost_micros,
               r.billed_replayed_unpriced_calls AS replayed_unpriced_calls
        FROM {runs} r
        UNION ALL
        SELECT r.*, e.key, false, 0, 0, 0, 0, 0, (e.value->>'calls')::INTEGER, (e.value->>'cost_micros')::BIGINT, 0,
               (e.value->>'replayed_calls')::INTEGER, (e.value->>'replayed_cost_micros')::BIGINT, 0
        FROM {runs} r, json_each(r.billed_other_currencies) e WHERE r.billed_other_currencies IS NOT NULL"""


def bill_sums(runs: str, where: str = "true", keys: str = "", names: tuple[str, ...] = tuple(_BILL_PARTS)) -> str:
    """The bills of the runs of `runs` (a relation of `runs` rows) that `where` selects, summed per
    `keys` (select-list items over `r`, if any) and currency: the sums `names` of `bills`' rows
    grouped so, `runs` counting the runs whose main currency it is. One read of the runs' own
    columns; the other currencies' money (null for nearly every run) is unnested from the few
    groups' lists of it. (`bills` carries every run's columns through a union and reads `runs`
    twice: at 1,000,000 runs, more than the sums.)"""
    lead = f"{keys}, " if keys else ""
    main = ", ".join(f"{_BILL_PARTS[name][0]} AS {name}" for name in names)
    other = ", ".join(_BILL_PARTS[name][1] or "0" for name in names)
    return f"""
        WITH main AS (
            SELECT {lead}r.billed_currency AS currency, {main},
                   list(r.billed_other_currencies) FILTER (WHERE r.billed_other_currencies IS NOT NULL) AS others
            FROM {runs} r WHERE {where} GROUP BY ALL)
        -- a bill written before currencies were named (null) is in dollars; named after the sums (a
        -- sixth of their cost named per run), so a currency can have two rows here
        SELECT * EXCLUDE (others) REPLACE (coalesce(currency, 'USD') AS currency) FROM main
        UNION ALL
        SELECT m.* EXCLUDE (currency, others, {", ".join(names)}), e.key, {other}
        FROM main m, unnest(m.others) o(bill), json_each(o.bill) e GROUP BY ALL"""


# a bill's money, from its rows `r` (`bills`): live calls paid, and replayed calls with what they would
# have cost, never added
RUN_MONEY = """r.currency, r.calls, r.cost_micros, r.calls - r.unpriced_calls AS priced_calls, r.unpriced_calls,
           r.replayed_calls, r.replayed_cost_micros, r.replayed_calls - r.replayed_unpriced_calls AS replayed_priced_calls,
           r.replayed_unpriced_calls"""


def outside_runs_spend(con: duckdb.DuckDBPyConnection, f: Filters, raw: bool = False) -> pl.DataFrame:
    """What the live calls `f` selects that were made outside any run cost, per currency (micro-minor
    units): from the per-run rollup when it can answer `f` (`runs_rolled_up`), unless `raw`: the same figures."""
    if not raw and runs_rolled_up(con, f):
        return _rrq(con, f, "SELECT c.currency, sum(c.live_cost_micros)::BIGINT AS micros FROM fc c "
                    "WHERE c.run_id IS NULL AND c.live_cost_micros IS NOT NULL GROUP BY c.currency ORDER BY c.currency")
    return _q(con, f, f"SELECT c.currency, sum(c.cost_micros)::BIGINT AS micros FROM fc c "
              f"WHERE c.run_id IS NULL AND {_LIVE} AND c.cost_micros IS NOT NULL GROUP BY c.currency ORDER BY c.currency")


def failure_totals(con: duckdb.DuckDBPyConnection, f: Filters, raw: bool = False) -> pl.DataFrame:
    """Failed top-level runs and their summed bills, beside the total spend they are a share of (the
    bills of every top-level run plus the live calls made outside any run, `outside_runs_spend`): a
    row per currency, most runs first. The counts are on each run's main currency's row (`bills`), so
    they sum over the rows; the money never adds two currencies."""
    spent = _q(con, f, f"""
        SELECT r.currency, sum(r.runs)::BIGINT AS runs, coalesce(sum(r.cost_micros), 0)::BIGINT AS total_cost_micros
        FROM ({bill_sums("fr", "r.parent_run_id IS NULL", names=("runs", "cost_micros"))}) r GROUP BY r.currency""")
    failed = _regrouped(_failed_bills(con, f), ["currency"]).rename({"runs": "failed_runs"})
    frame = spent.join(failed, on="currency", how="left").select(
        "currency", "failed_runs", *_SUMS, "runs", "total_cost_micros")
    outside = outside_runs_spend(con, f, raw)
    frame = (frame.join(outside, on="currency", how="full", coalesce=True)
             .with_columns(pl.exclude("currency", "micros").fill_null(0))
             .with_columns((pl.col("total_cost_micros") + pl.col("micros").fill_null(0)).alias("total_cost_micros"))
             .drop("micros"))
    if frame.is_empty():  # nothing stored: one row of zeros
        frame = pl.DataFrame({name: [None if name == "currency" else 0] for name in frame.columns},
                             schema=frame.schema)
    return unknown_when_unpriced(frame.sort(["runs", "total_cost_micros", "currency"], descending=[True, True, False]))


def failed_runs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 1000) -> pl.DataFrame:
    """Failed runs, latest first, top-level and nested (`top_level` tells them apart: only
    top-level bills add up without counting a call twice): a row per run and currency its calls
    were priced in (`bills`)."""
    return unknown_when_unpriced(_q(con, f, f"""
        , failed AS MATERIALIZED (SELECT * FROM fr r WHERE r.status = 'failed' ORDER BY r.started_at DESC, r.run_id LIMIT $limit),
          bills AS ({bills("failed")})
        SELECT r.run_id, r.name, r.parent_run_id IS NULL AS top_level, r.started_at, r.ended_at, r.error_code,
               r.error_type, r.error_message, r.prompt_id, r.prompt_version, r.input_tokens, r.cache_read_tokens,
               r.cache_write_tokens, r.output_tokens, r.unsettled, {RUN_MONEY}
        FROM bills r
        ORDER BY r.started_at DESC, r.run_id, r.main DESC, r.currency""", {"limit": limit}))


def failures_by(con: duckdb.DuckDBPyConnection, f: Filters, by: Literal["error_code", "prompt"]) -> pl.DataFrame:
    """Failed top-level runs and their bills, by error code or by prompt id and version, and currency."""
    keys = ["error_code"] if by == "error_code" else ["prompt_id", "prompt_version"]
    out = _regrouped(_failed_bills(con, f), [*keys, "currency"]).select(*keys, "currency", "runs", *_SUMS)
    return unknown_when_unpriced(out.sort(["cost_micros", "runs", "currency", *keys],
                                          descending=[True, True] + [False] * (1 + len(keys)), nulls_last=True))


# what `_regrouped` gives, in its order: the bills' sums (`bill_sums`) and the calls priced
_SUMS = (*list(_BILL_PARTS)[1:], "priced_calls", "replayed_priced_calls")


def _failed_bills(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """The failed top-level runs' bills summed per error code (a failure with no Workbench code, an
    SDK's own exception: its type), prompt and currency: one read that the Failures page's totals and
    groups regroup (`_regrouped`), once within a scope (three reads of the failed runs before)."""
    return scoped(con, f, "failed_bills", lambda: _q(con, f, f"""
        SELECT r.error_code, r.prompt_id, r.prompt_version, r.currency,
               {", ".join(f"sum(r.{name})::BIGINT AS {name}" for name in _BILL_PARTS)}
        FROM ({bill_sums("fr", "r.parent_run_id IS NULL AND r.status = 'failed'",
                         "coalesce(r.error_code, r.error_type) AS error_code, r.prompt_id, r.prompt_version")}) r
        GROUP BY ALL"""))


def _regrouped(groups: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """`_failed_bills` summed per `keys`, with the calls priced."""
    return groups.group_by(keys).agg(pl.col(name).sum() for name in _BILL_PARTS).with_columns(
        (pl.col("calls") - pl.col("unpriced_calls")).alias("priced_calls"),
        (pl.col("replayed_calls") - pl.col("replayed_unpriced_calls")).alias("replayed_priced_calls"))
