"""Every breakdown a cost auditor asks for: spend by model, provider, prompt and version, day, week or
month, run name, or any tag key, with the latency of the same calls beside it; a top-N with
"everything else" summed into one row, so the rows shown still add up to the total.

Each call belongs to exactly one group, so the groups add up to the total to the micro-unit:
- `run` is the name of the call's top-level run (the run its bill belongs to); `(no run)` outside runs;
- a tag key takes the value of the call's own run, else of the nearest run around it that has the
  key; `(none)` when no run around the call has it;
- a call with no price has no currency: it is counted on the row of the main currency (the most
  common one among the calls shown), so a group is one row unless its priced calls differ in currency.

Money follows the spend cube (`spend_cube`): live calls are paid, replayed calls are counted apart with
what they would have cost. Latency is over live calls (a replay answers from a file): median, 95th
and 99th percentile of the time to first byte and of the duration, in milliseconds.

A breakdown by model, provider, prompt or time that the daily rollup can answer (`rolled_up`: whole
UTC days, call-level filters) takes its sums from it, the same integers; its latency percentiles are
always exact, read from the calls (three columns: on ten million calls, half the breakdown's cost).
"""

from __future__ import annotations


import duckdb
import polars as pl

from workbench.store.queries._base import _DAY, _LIVE, _MODEL, Filters, _q, _rq, rolled_up, scoped
from workbench.store.queries.spend import CALL_MONEY, unknown_when_unpriced

OTHERS = "everything else"
TIME_KEYS = ("day", "week", "month")
# a breakdown name -> the columns it groups by (anything else is a tag key)
BUILT_IN: dict[str, tuple[str, ...]] = {
    "model": ("provider", "model"), "provider": ("provider",), "prompt": ("prompt_id", "prompt_version"),
    "day": ("day",), "week": ("week",), "month": ("month",), "run": ("run",),
}
SUMS = ("calls", "unsettled", "replayed_calls", "priced_calls", "unpriced_calls", "input_tokens",
        "cache_read_tokens", "cache_write_tokens", "output_tokens", "cost_micros", "replayed_priced_calls",
        "replayed_unpriced_calls", "replayed_cost_micros")
LATENCY = ("ttfb_p50_ms", "ttfb_p95_ms", "ttfb_p99_ms", "duration_p50_ms", "duration_p95_ms", "duration_p99_ms")

_ROOTS = """
    , _roots(run_id, top) AS (
        SELECT run_id, run_id FROM runs WHERE parent_run_id IS NULL OR parent_run_id NOT IN (SELECT run_id FROM runs)
        UNION ALL SELECT r.run_id, t.top FROM runs r JOIN _roots t ON r.parent_run_id = t.run_id)
    , _group AS (SELECT t.run_id, r.name AS value FROM _roots t JOIN runs r ON r.run_id = t.top)"""
_TAG = """
    , _group(run_id, value) AS (
        SELECT run_id, value FROM run_tags WHERE key = $tag_key
        UNION ALL SELECT r.run_id, g.value FROM runs r JOIN _group g ON r.parent_run_id = g.run_id
        LEFT JOIN run_tags own ON own.run_id = r.run_id AND own.key = $tag_key WHERE own.run_id IS NULL)"""
# (a tag flows down from each run that has the key to the runs inside it that do not)


def key_columns(by: str) -> tuple[str, ...]:
    """The columns a breakdown groups by: `model` is provider and model, `prompt` is id and version, a
    tag key is one column named after it (`tag:<key>` when the name is taken)."""
    if by in BUILT_IN:
        return BUILT_IN[by]
    key = by.removeprefix("tag:")
    return (key if key not in (*SUMS, *LATENCY, "currency", "tag_value") else f"tag:{key}",)


def tag_keys(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every tag key a run in the store carries, for `--by` to name the ones that exist."""
    return [key for (key,) in con.execute("SELECT DISTINCT key FROM run_tags ORDER BY key").fetchall()]


def _main_currency(con: duckdb.DuckDBPyConnection, f: Filters, rolled: bool) -> str:
    """The most common currency among the priced calls `f` selects (ties: the first by name)."""
    count = "sum(c.calls)" if rolled else "count(*)"
    main = scoped(con, f, "main_currency", lambda: (_rq if rolled else _q)(
        con, f, f"SELECT c.currency FROM fc c WHERE c.currency IS NOT NULL GROUP BY c.currency "
                f"ORDER BY {count} DESC, c.currency LIMIT 1"))
    return main["currency"][0] if main.height else "USD"


def spend_by(con: duckdb.DuckDBPyConnection, f: Filters, by: str, raw: bool = False) -> pl.DataFrame:
    """Spend and latency grouped by `by` (a name of `BUILT_IN`, else a tag key; `tag:KEY` forces a tag),
    most expensive first (time keys: in time order). Its sums from the daily rollup when it can
    answer `f` and `by` (`rolled_up`), unless `raw`: the same figures."""
    rolled = not raw and by in _ROLLED_KEYS and rolled_up(con, f)
    frame = _raw_spend_by(con, f, by, _main_currency(con, f, rolled), rolled)
    if "tag_value" in frame.columns:
        frame = frame.rename({"tag_value": key_columns(by)[0]})
    frame = frame.with_columns(
        *(pl.col("_ttfb").list.get(i, null_on_oob=True).round(1).alias(name) for i, name in enumerate(LATENCY[:3])),
        *(pl.col("_duration").list.get(i, null_on_oob=True).round(1).alias(name) for i, name in enumerate(LATENCY[3:])),
    ).drop("_ttfb", "_duration")
    frame = unknown_when_unpriced(frame)
    if by in TIME_KEYS:
        return frame.sort(by)
    return frame.sort(["cost_micros", "calls", *key_columns(by)], descending=[True, True, *[False] * len(key_columns(by))],
                      nulls_last=True)


# the breakdowns the daily rollup has the keys of: (key on the calls, key on the rollup's rows), both `c`
_ROLLED_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "model": (("c.provider", "c.provider"), (_MODEL, "c.model")), "provider": (("c.provider", "c.provider"),),
    "prompt": (("c.prompt_id", "c.prompt_id"), ("c.prompt_version", "c.prompt_version")),
    "day": ((_DAY, "(DATE '1970-01-01' + c.day_n)"),),
    **{key: ((f"date_trunc('{key}', {_DAY})::DATE", f"date_trunc('{key}', DATE '1970-01-01' + c.day_n)::DATE"),)
       for key in ("week", "month")},
}


def _raw_spend_by(con: duckdb.DuckDBPyConnection, f: Filters, by: str, main_currency: str, rolled: bool
                  ) -> pl.DataFrame:
    """`spend_by`'s frame, its latency as lists. `rolled`: its sums come from the daily rollup (the
    same integers) and only the latency percentiles are read from the calls."""
    extra, params, join = "", {"main_currency": main_currency}, ""
    ttfb = "(epoch_us(c.first_byte_at) - epoch_us(c.started_at)) / 1000.0"
    duration = "(epoch_us(c.ended_at) - epoch_us(c.started_at)) / 1000.0"
    latency = f"""quantile_cont({ttfb}, [0.5, 0.95, 0.99]) FILTER (WHERE {_LIVE} AND c.first_byte_at IS NOT NULL) AS _ttfb,
               quantile_cont({duration}, [0.5, 0.95, 0.99]) FILTER (WHERE {_LIVE} AND c.ended_at IS NOT NULL) AS _duration"""
    if rolled:
        names = key_columns(by)
        sums = _rq(con, f, f"""
            SELECT {', '.join(f'{rkey} AS {name}' for (_, rkey), name in zip(_ROLLED_KEYS[by], names))},
                   coalesce(c.currency, $main_currency) AS currency,
                   {', '.join(f'sum(c.{name})::BIGINT AS {name}' for name in SUMS)}
            FROM fc c GROUP BY ALL""", params)
        percentiles = _q(con, f, f"""
            SELECT {', '.join(f'{ckey} AS {name}' for (ckey, _), name in zip(_ROLLED_KEYS[by], names))},
                   coalesce(c.currency, $main_currency) AS currency, {latency}
            FROM fc c WHERE {_LIVE} GROUP BY ALL""", params)
        return sums.join(percentiles, on=[*names, "currency"], how="left", nulls_equal=True)
    if by in ("model", "provider", "prompt"):
        keys = {"model": f"c.provider AS provider, {_MODEL} AS model", "provider": "c.provider AS provider",
                "prompt": "c.prompt_id AS prompt_id, c.prompt_version AS prompt_version"}[by]
    elif by in TIME_KEYS:
        keys = f"{_DAY} AS day" if by == "day" else f"date_trunc('{by}', {_DAY})::DATE AS {by}"
    else:
        extra = _ROOTS if by == "run" else _TAG
        params.update({} if by == "run" else {"tag_key": by.removeprefix("tag:")})
        keys = f"coalesce(g.value, '{'(no run)' if by == 'run' else '(none)'}') AS tag_value"
        join = "LEFT JOIN _group g ON g.run_id = c.run_id"
    return _q(con, f, f"""{extra}
        SELECT {keys}, coalesce(c.currency, $main_currency) AS currency,
               count(*) AS calls, count(*) FILTER (WHERE NOT coalesce(c.settled, false)) AS unsettled,
               {CALL_MONEY},
               {latency}
        FROM fc c {join} GROUP BY ALL""", params)


def top_n(frame: pl.DataFrame, keys: tuple[str, ...], n: int) -> pl.DataFrame:
    """The first `n` rows of a breakdown, and every other row summed into one `everything else` row
    (per currency), so the rows still add up to the total; its latency is not a sum, so it is left empty."""
    if frame.height <= n:
        return frame
    shown = frame.head(n).with_columns(pl.col(key).cast(pl.Utf8) for key in keys)
    rest = frame.slice(n)
    others = rest.group_by("currency", maintain_order=True).agg(pl.col(name).sum() for name in SUMS if name in rest.columns)
    others = unknown_when_unpriced(others.with_columns(pl.lit(OTHERS).alias(key) for key in keys))
    return pl.concat([shown, others.select([name for name in shown.columns if name in others.columns])],
                     how="diagonal_relaxed")
