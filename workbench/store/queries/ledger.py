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
UTC days, call-level filters) takes its sums from it, the same integers. By model, provider, prompt
or month, on a store of more than `EXACT_LATENCY_UP_TO` live calls, its latency percentiles come
from the monthly latency rollups (`rollup.TTFB`, `rollup.DURATION`), each within
`rollup.LATENCY_ERROR` of the exact one, and its rows say so (`latency_approx`): ranking every call
costs ~0.1 s per million calls and column, 4 s on ten million. Every other breakdown, filter and
smaller store reads exact percentiles from the calls.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime, time, timedelta, timezone

import duckdb
import polars as pl

from workbench.store import rollup
from workbench.store.queries._base import (_DAY, _LIVE, _MODEL, Filters, _frame, _q, _rq, _Sql, in_scope,
                                           rolled_up, runs_rolled_up, scoped)
from workbench.store.queries.spend import CALL_MONEY, spend_cube, unknown_when_unpriced

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
    return (key if key not in (*SUMS, *LATENCY, "latency_approx", "currency", "tag_value") else f"tag:{key}",)


def tag_keys(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every tag key a run in the store carries, for `--by` to name the ones that exist."""
    return [key for (key,) in con.execute("SELECT DISTINCT key FROM run_tags ORDER BY key").fetchall()]


def _main_currency(con: duckdb.DuckDBPyConnection, f: Filters, raw: bool) -> str:
    """The most common currency among the priced calls `f` selects (ties: the first by name), counted
    from the daily or the per-run rollup when one can answer `f`, unless `raw`: the same currency."""
    if not raw and not rolled_up(con, f) and runs_rolled_up(con, f):  # the per-run rollup's rows, as the
        # spend cube a page reads once sums them
        counts = (spend_cube(con, f).filter(pl.col("currency").is_not_null()).group_by("currency")
                  .agg(pl.col("calls").sum()).sort(["calls", "currency"], descending=[True, False]))
        return counts["currency"][0] if counts.height else "USD"
    read = _rq if not raw and rolled_up(con, f) else _q
    count = "count(*)" if read is _q else "sum(c.calls)"
    main = scoped(con, f, f"main_currency_{read.__name__}", lambda: read(
        con, f, f"SELECT c.currency FROM fc c WHERE c.currency IS NOT NULL GROUP BY c.currency "
                f"ORDER BY {count} DESC, c.currency LIMIT 1"))
    return main["currency"][0] if main.height else "USD"


def spend_by(con: duckdb.DuckDBPyConnection, f: Filters, by: str, raw: bool = False) -> pl.DataFrame:
    """Spend and latency grouped by `by` (a name of `BUILT_IN`, else a tag key; `tag:KEY` forces a tag),
    most expensive first (time keys: in time order). Its sums from the daily rollup when it can
    answer `f` and `by` (`rolled_up`), unless `raw`: the same figures; then, by model, provider,
    prompt or month on a large store (`latency_rolled_up`), its latency from the latency buckets
    (`latency_approx` true: each percentile within `rollup.LATENCY_ERROR` of the exact one), else exact."""
    rolled = not raw and by in _ROLLED_KEYS and (rolled_up(con, f) or runs_rolled_up(con, f))
    frame = _raw_spend_by(con, f, by, _main_currency(con, f, raw), rolled)
    bucketed = rolled and by in _BUCKETED_KEYS and latency_rolled_up(con, f)
    if "tag_value" in frame.columns:
        frame = frame.rename({"tag_value": key_columns(by)[0]})
    frame = frame.with_columns(
        *(pl.col("_ttfb").list.get(i, null_on_oob=True).round(1).alias(name) for i, name in enumerate(LATENCY[:3])),
        *(pl.col("_duration").list.get(i, null_on_oob=True).round(1).alias(name) for i, name in enumerate(LATENCY[3:])),
        pl.lit(bucketed).alias("latency_approx"),
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


# the same keys on the spend cube's rows (`spend_cube`)
_CUBE_KEYS: dict[str, tuple[pl.Expr, ...]] = {
    "model": (pl.col("provider"), pl.col("model")), "provider": (pl.col("provider"),),
    "prompt": (pl.col("prompt_id"), pl.col("prompt_version")), "day": (pl.col("day"),),
    "week": (pl.col("day").dt.truncate("1w").alias("week"),),  # Monday, as `date_trunc('week', ...)`
    "month": (pl.col("day").dt.truncate("1mo").alias("month"),),
}


def _raw_spend_by(con: duckdb.DuckDBPyConnection, f: Filters, by: str, main_currency: str, rolled: bool
                  ) -> pl.DataFrame:
    """`spend_by`'s frame, its latency as lists. `rolled`: its sums come from the daily rollup, or for
    a run name or tag from the per-run rollup (the same integers), and only the latency percentiles
    are read from the calls (apart: ranking them in the sums' query costs several times as much)."""
    extra, params, join = "", {"main_currency": main_currency}, ""
    ttfb = "(epoch_us(c.first_byte_at) - epoch_us(c.started_at)) / 1000.0"
    duration = "(epoch_us(c.ended_at) - epoch_us(c.started_at)) / 1000.0"
    latency = f"""quantile_cont({ttfb}, [0.5, 0.95, 0.99]) FILTER (WHERE {_LIVE} AND c.first_byte_at IS NOT NULL) AS _ttfb,
               quantile_cont({duration}, [0.5, 0.95, 0.99]) FILTER (WHERE {_LIVE} AND c.ended_at IS NOT NULL) AS _duration"""
    if rolled:
        names = key_columns(by)
        if rolled_up(con, f):
            sums = _rq(con, f, f"""
                SELECT {', '.join(f'{rkey} AS {name}' for (_, rkey), name in zip(_ROLLED_KEYS[by], names))},
                       coalesce(c.currency, $main_currency) AS currency,
                       {', '.join(f'sum(c.{name})::BIGINT AS {name}' for name in SUMS)}
                FROM fc c GROUP BY ALL""", params)
        else:  # the spend cube of the per-run rollup's rows, regrouped (a page reads those rows once)
            sums = (spend_cube(con, f).with_columns(pl.col("currency").fill_null(main_currency))
                    .group_by([*_CUBE_KEYS[by], "currency"], maintain_order=True)
                    .agg(pl.col(name).sum() for name in SUMS))
        if by in _BUCKETED_KEYS and latency_rolled_up(con, f):
            percentiles = _bucketed_latency(con, f, by, params)
        elif by in _SHARED_LATENCY and in_scope(con, f):
            shared = scoped(con, f, f"shared_latency_{main_currency}",
                            lambda: _shared_latency(con, f, ttfb, duration, params))
            percentiles = shared.filter(pl.col(f"_set_{by}") == 0).select(*names, "currency", "_ttfb", "_duration")
        else:
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


# the breakdowns the Overview always shows: within a page's scope, the latency percentiles of both are
# ranked in one scan of the live calls `f` selects (under a run name or tag, picking those calls out of
# every call is most of each ranking's cost)
_SHARED_LATENCY = ("model", "prompt")


def _shared_latency(con: duckdb.DuckDBPyConnection, f: Filters, ttfb: str, duration: str, params: dict
                    ) -> pl.DataFrame:
    """The latency lists of every `_SHARED_LATENCY` breakdown, one grouping set each: a row of
    breakdown `by` has `_set_<by>` 0, its keys and currency; the same groups and values as one query each.
    (The keys are computed under other names first: `model` is also a column of the calls.) The
    calls are live ones, and a latency without its time stamp is null, which a quantile leaves out:
    no FILTER as in `_raw_spend_by` (evaluated per grouping set, it cost ~15% of the query)."""
    latency = (f"quantile_cont({ttfb}, [0.5, 0.95, 0.99]) AS _ttfb, "
               f"quantile_cont({duration}, [0.5, 0.95, 0.99]) AS _duration")
    keys = {name: ckey for by in _SHARED_LATENCY for (ckey, _), name in zip(_ROLLED_KEYS[by], key_columns(by))}
    sets = ", ".join(f"({', '.join([*(f'_k_{name}' for name in key_columns(by)), '_k_currency'])})"
                     for by in _SHARED_LATENCY)
    return _q(con, f, f"""
        SELECT {', '.join(f'_k_{name} AS {name}' for name in keys)}, _k_currency AS currency,
               {', '.join(f'GROUPING(_k_{key_columns(by)[0]}) AS _set_{by}' for by in _SHARED_LATENCY)}, {latency}
        FROM (SELECT c.*, {', '.join(f'{ckey} AS _k_{name}' for name, ckey in keys.items())},
                     coalesce(c.currency, $main_currency) AS _k_currency
              FROM fc c WHERE {_LIVE}) c
        GROUP BY GROUPING SETS ({sets})""", params)


# the breakdowns the latency rollups have the keys of: (key on the calls, key on the rollup's rows), both `c`
_BUCKETED_KEYS = {**{key: _ROLLED_KEYS[key] for key in ("model", "provider", "prompt")},
                  "month": ((f"date_trunc('month', {_DAY})::DATE", "c.month"),)}


def latency_rolled_up(con: duckdb.DuckDBPyConnection, f: Filters) -> bool:
    """Whether the latency percentiles of the calls `f` selects are read from the latency rollups
    (`rollup.TTFB`, `rollup.DURATION`): what `rolled_up` asks, rollups that count every stored call,
    and a store of more than `EXACT_LATENCY_UP_TO` live calls (fewer are ranked exactly, fast)."""
    return rolled_up(con, f) and scoped(con, f, "latency_bucketed", lambda: _too_many_to_rank(con))


# up to this many live calls in the store, ranking them is fast (~0.1 s a million, per column), so the
# percentiles are exact; past it, they are read from the latency buckets
EXACT_LATENCY_UP_TO = 1_000_000


def _too_many_to_rank(con: duckdb.DuckDBPyConnection) -> bool:
    if not all(rollup.whole(con, spec) for spec in (rollup.TTFB, rollup.DURATION)):
        return False
    live = con.execute(f"SELECT coalesce(sum(calls), 0) FROM {rollup.DURATION.table} WHERE bucket IS NOT NULL")
    return live.fetchall()[0][0] > EXACT_LATENCY_UP_TO


def _full_months(f: Filters) -> tuple[date | None, date | None]:
    """The first day of the first and of the last-plus-one whole UTC month within `f`'s dates (None:
    unbounded); the days of `f` outside them are read from the calls."""
    start = end = None
    if f.date_from is not None:
        day = f.date_from.astimezone(timezone.utc).date() if isinstance(f.date_from, datetime) else f.date_from
        start = day if day.day == 1 else (day.replace(day=1) + timedelta(days=32)).replace(day=1)
    if f.date_to is not None:
        end = (date(f.date_to.year, f.date_to.month, f.date_to.day) + timedelta(days=1)).replace(day=1)
    return start, end


def _bucketed_latency(con: duckdb.DuckDBPyConnection, f: Filters, by: str, params: dict) -> pl.DataFrame:
    """`spend_by`'s latency columns from the latency rollups: the whole months `f` selects read from
    them, the days of partial months counted into the same buckets from the calls; each percentile
    interpolated between the buckets of its two ranks as `quantile_cont` does between the latencies,
    so it is within `rollup.LATENCY_ERROR` of the exact one."""
    names = key_columns(by)
    built = _Sql(replace(f, source="all", date_from=None, date_to=None))
    rolled_preds, raw_preds = built.call_predicates(model="c.model"), built.call_predicates()
    start, end = _full_months(f)
    since = (f.date_from if isinstance(f.date_from, datetime) else datetime.combine(f.date_from, time(), timezone.utc)
             ) if f.date_from is not None else None
    until = datetime.combine(f.date_to + timedelta(days=1), time(), timezone.utc) if f.date_to is not None else None
    if f.source == "replayed":  # replayed calls have no latency: the exact query finds none either
        months, edges = ["false"], []
    elif start is not None and end is not None and start >= end:  # no whole month: every day from the calls
        months, edges = ["false"], [(since, until)]
    else:
        months = [*(["c.month >= $month_from"] if start else []), *(["c.month < $month_to"] if end else [])]
        edges = [*([(since, _utc(start))] if start and since < _utc(start) else []),
                 *([(_utc(end), until)] if end and _utc(end) < until else [])]
    extra = {**built.params, **params, "month_from": start, "month_to": end}
    for index, (low, high) in enumerate(edges):
        extra[f"edge_from{index}"], extra[f"edge_to{index}"] = low, high
    frames = []
    for spec, moment, column in ((rollup.TTFB, "first_byte_at", "_ttfb"), (rollup.DURATION, "ended_at", "_duration")):
        raw_keys = ", ".join(f"{ckey} AS {name}" for (ckey, _), name in zip(_BUCKETED_KEYS[by], names))
        parts = [f"""SELECT {', '.join(f'{rkey} AS {name}' for (_, rkey), name in zip(_BUCKETED_KEYS[by], names))},
                            c.currency, c.bucket, c.calls
                     FROM {spec.table} c WHERE {' AND '.join(['c.bucket IS NOT NULL', *months, *rolled_preds])}"""]
        parts += [f"""SELECT {raw_keys}, c.currency, {rollup.latency_bucket(moment)} AS bucket, count(*) AS calls
                      FROM calls c WHERE {' AND '.join([
                          f'c.started_at >= $edge_from{index}', f'c.started_at < $edge_to{index}',
                          f'{_LIVE} AND c.{moment} IS NOT NULL', *raw_preds])} GROUP BY ALL"""
                  for index in range(len(edges))]
        keys = ", ".join([*names, "currency"])

        def at(share: float, rank: str) -> str:
            return rollup.bucket_ms(f"min(bucket) FILTER (WHERE upto > {rank}((total - 1) * {share}))")

        percentiles = ", ".join(
            f"{at(share, 'floor')} + ((any_value(total) - 1) * {share} - floor((any_value(total) - 1) * {share}))"
            f" * ({at(share, 'ceil')} - {at(share, 'floor')})" for share in (0.5, 0.95, 0.99))
        frames.append(_frame(con, f"""
            WITH hist AS (
                SELECT {', '.join(names)}, coalesce(currency, $main_currency) AS currency, bucket, sum(calls) AS n
                FROM ({' UNION ALL '.join(parts)}) GROUP BY ALL),
            ranked AS (
                SELECT *, sum(n) OVER (PARTITION BY {keys} ORDER BY bucket) AS upto,
                       sum(n) OVER (PARTITION BY {keys}) AS total FROM hist)
            SELECT {keys}, [{percentiles}] AS {column} FROM ranked GROUP BY ALL""", extra))
    return frames[0].join(frames[1], on=[*names, "currency"], how="full", coalesce=True, nulls_equal=True)


def _utc(day: date) -> datetime:
    return datetime.combine(day, time(), timezone.utc)


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
