"""Exact latency percentiles without sorting every call: the same figures as DuckDB's
`quantile_cont`, read in two passes over the selected calls. The first counts them per group and
millisecond (a histogram: integer counts, nothing sorted); the ranks each percentile interpolates
between (`(n - 1) * q`, rounded down and up) fall in known buckets; the second pass reads only the
calls in those buckets, and the values at those ranks are picked from them and interpolated as
DuckDB's `quantile_cont` interpolates them (it is asked to, on the pair). Exact: the histogram is
counts, the values are the calls' own, and the interpolation is DuckDB's own code."""

from __future__ import annotations

import math
from typing import Any

import duckdb
import polars as pl

from workbench.store.queries._base import Filters, _LIVE, _q

QUANTILES = (0.5, 0.95, 0.99)
METRICS = {"_ttfb": "first_byte_at", "_duration": "ended_at"}  # latency from the start to this moment


def _micros(end: str) -> str:
    return f"(epoch_us(c.{end}) - epoch_us(c.started_at))"


def _bucket(end: str) -> str:
    """A bucket number that never decreases as the latency grows: its millisecond below 10 s, tenths
    of a second above (so a long tail adds few buckets)."""
    d = _micros(end)
    return f"CASE WHEN {d} < 10000000 THEN {d} // 1000 ELSE 10000 + {d} // 100000 END"


def percentiles(con: duckdb.DuckDBPyConnection, f: Filters, extra: str, group: str, join: str,
                params: dict[str, Any]) -> pl.DataFrame:
    """Per group of `group` (SQL select items over calls `c` of `fc`, joined with `join`, after the
    CTEs in `extra`), the 50th, 95th and 99th percentile of the latency of live calls in ms, as
    lists in `_ttfb` and `_duration` (null: no call to measure): what `quantile_cont` gives."""
    hists = {name: _q(con, f, f"""{extra}
        SELECT {group}, {_bucket(end)} AS _b, count(*) AS _n FROM fc c {join}
        WHERE {_LIVE} AND c.{end} IS NOT NULL AND {_micros(end)} IS NOT NULL GROUP BY ALL""", params)
        for name, end in METRICS.items()}
    keys = [name for name in hists["_ttfb"].columns if name not in ("_b", "_n")]
    groups = pl.concat([hist.select(keys) for hist in hists.values()]).unique(maintain_order=True).with_row_index("_g")
    targets = {name: _targets(hist.join(groups, on=keys, nulls_equal=True)) for name, hist in hists.items()}
    if all(target.is_empty() for target in targets.values()):
        return groups.drop("_g").with_columns(*(pl.lit(None, dtype=pl.List(pl.Float64)).alias(name) for name in METRICS))
    wanted = {}
    for name, target in targets.items():
        wanted[name] = f"_wb_buckets{name}"
        con.register(wanted[name], target.select("_b").unique().to_arrow())
    try:
        near = _q(con, f, f"""{extra}
            SELECT {group}, {', '.join(f'{_micros(end)} AS {name}_us, {_bucket(end)} AS {name}_b'
                                       for name, end in METRICS.items())}
            FROM fc c {join}
            WHERE {_LIVE} AND ({' OR '.join(f'(c.{end} IS NOT NULL AND {_bucket(end)} IN (SELECT _b FROM {wanted[name]}))'
                                          for name, end in METRICS.items())})""", params)
    finally:
        for view in wanted.values():
            con.unregister(view)
    near = near.join(groups, on=keys, nulls_equal=True)
    out = groups
    for name, target in targets.items():
        values = (near.filter(pl.col(f"{name}_us").is_not_null())
                  .group_by("_g", pl.col(f"{name}_b").alias("_b")).agg(pl.col(f"{name}_us").sort().alias("_sorted")))
        picked = target.join(values, on=["_g", "_b"], how="left").with_columns(
            (pl.col("_sorted").list.get(pl.col("_rank") - pl.col("_below")) / 1000.0).alias("_value"))
        out = out.join(_interpolated(con, picked, name), on="_g", how="left")
    return out.drop("_g")


def _targets(hist: pl.DataFrame) -> pl.DataFrame:
    """The ranks each percentile interpolates between, per group `_g`, with the bucket that holds
    each rank and how many of the group's values lie in lower buckets (`_below`)."""
    if hist.is_empty():
        return pl.DataFrame(schema={"_g": pl.UInt32, "_qi": pl.Int64, "_rn": pl.Float64, "_rank": pl.Int64,
                                    "_b": pl.Int64, "_below": pl.Int64})
    hist = hist.sort("_g", "_b").with_columns(
        (pl.col("_n").cum_sum().over("_g") - pl.col("_n")).alias("_below"), pl.col("_n").sum().over("_g").alias("_total"))
    ranks = (hist.group_by("_g").agg(pl.col("_total").first())
             .join(pl.DataFrame({"_qi": list(range(len(QUANTILES))), "_q": list(QUANTILES)}), how="cross")
             .with_columns(((pl.col("_total") - 1).cast(pl.Float64) * pl.col("_q")).alias("_rn")))
    ranks = pl.concat([ranks.with_columns(pl.col("_rn").floor().cast(pl.Int64).alias("_rank"), pl.lit("lo").alias("_end")),
                       ranks.with_columns(pl.col("_rn").ceil().cast(pl.Int64).alias("_rank"), pl.lit("hi").alias("_end"))])
    return (ranks.sort("_rank").join_asof(hist.select("_g", "_b", pl.col("_below").cast(pl.Int64)).sort("_below"),
                                          left_on="_rank", right_on="_below", by="_g", strategy="backward",
                                          check_sortedness=False)
            .select("_g", "_qi", "_rn", "_rank", "_end", "_b", "_below"))


def _interpolated(con: duckdb.DuckDBPyConnection, picked: pl.DataFrame, name: str) -> pl.DataFrame:
    """Per group, the list of percentiles: the value at the lower rank, or, between two ranks, what
    DuckDB's own `quantile_cont` makes of the two values at the fraction of the way (asked of it on
    the pair: its interpolation, rounding included, whatever the build's floating-point code)."""
    ends = picked.pivot(on="_end", index=["_g", "_qi", "_rn"], values="_value").sort("_g", "_qi")
    between = ends.filter((pl.col("_rn").floor() != pl.col("_rn")) & pl.col("lo").is_not_null())
    moved = {}
    if not between.is_empty():  # each fraction a constant of its own (quantile_cont takes no column)
        rows = [f"({g}, {qi}, list_aggregate(['{lo!r}'::DOUBLE, '{hi!r}'::DOUBLE], 'quantile_cont', "
                f"'{rn - math.floor(rn)!r}'::DOUBLE))" for g, qi, rn, lo, hi in between.select(
                    "_g", "_qi", "_rn", "lo", "hi").iter_rows()]
        moved = {(g, qi): value for g, qi, value in con.execute(
            f"SELECT * FROM (VALUES {', '.join(rows)})").fetchall()}
    values = [moved.get((g, qi), lo) for g, qi, lo in ends.select("_g", "_qi", "lo").iter_rows()]
    return (ends.with_columns(pl.Series("_v", values, dtype=pl.Float64))
            .group_by("_g", maintain_order=True).agg(pl.col("_v").alias(name)))
