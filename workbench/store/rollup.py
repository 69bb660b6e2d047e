"""The rollups of calls: the calls summed per UTC day and per value of every call-level filter and
key the pages group by (`DAILY`, table `call_rollup`), and per run as well (`RUNS`, table
`call_run_rollup`: the runs' own sums, first and last moments, for what the pages aggregate by
run, and the spend cube of the calls a run name or tag selects), and the live calls' latencies counted per UTC month and log-spaced bucket (`TTFB`, `DURATION`:
the Overview's percentiles, within `LATENCY_ERROR`). The pages read their figures from them (a few rows per day, or per run) instead of scanning
every call; `workbench.store.queries` falls back to the calls themselves whenever a filter cannot be
answered from them (a moment that is not a UTC midnight; for the daily rollup, a run name or tag)
or a rollup does not count every stored call.

They never disagree with the calls: every write of calls (`ingest.write_frame`: ingest, `store
copy`, the lake) folds its *new* calls into both in the same transaction, and the migrations that
made them filled them from the calls already stored. Calls are never updated nor deleted; a
migration that changes stored calls must rebuild them (`rebuild`), and one that changes a rollup's
keys or measures must alter its table and rebuild it."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

_LIVE = "NOT coalesce(c.replayed, false)"
_DAY = "(epoch_us(c.started_at) // 86400000000)::INTEGER"  # the day `spend_cube` gives a call
_STARTED = "epoch_us(c.started_at)"


@dataclass(frozen=True)
class Rollup:
    """A rollup table: its keys (name, type, from calls `c`), its measures (name, how one call
    counts, how two rows of one group merge: sum, min or max) and the keys whose touched values a
    batch sums again with the stored rows (`add_calls`)."""

    table: str
    keys: tuple[tuple[str, str, str], ...]
    measures: tuple[tuple[str, str, str], ...]
    merged_on: tuple[str, ...]

    @property
    def table_sql(self) -> str:
        return (f"CREATE TABLE {self.table} (" + ", ".join(f"{name} {kind}" for name, kind, _ in self.keys) + ", "
                + ", ".join(f"{name} BIGINT" for name, _, _ in self.measures) + ");")

    def aggregate(self, source: str) -> str:
        """The rollup rows of the calls in `source` (a table or a subquery), one per group."""
        return (f"SELECT {', '.join(f'{expr} AS {name}' for name, _, expr in self.keys)}, "
                + ", ".join(f"({expr})::BIGINT AS {name}" for name, expr, _ in self.measures)
                + f" FROM {source} c GROUP BY ALL")

    def merged(self, rows: str) -> str:
        """`rows` (rollup rows, several per group) merged to one row per group."""
        return (f"SELECT {', '.join(name for name, _, _ in self.keys)}, "
                + ", ".join(f"{merge}({name})::BIGINT AS {name}" for name, _, merge in self.measures)
                + f" FROM ({rows}) GROUP BY ALL")


_DIMENSIONS = (
    ("provider", "VARCHAR", "c.provider"), ("model", "VARCHAR", "coalesce(c.model_served, c.model_requested)"),
    ("prompt_id", "VARCHAR", "c.prompt_id"), ("prompt_version", "VARCHAR", "c.prompt_version"),
)
# (name, how one call counts, from calls `c`): the spend cube's counters (`queries.spend.spend_cube`),
# then what cache savings and miss reasons sum over settled calls
MEASURES: tuple[tuple[str, str], ...] = (
    ("calls", "count(*)"),
    ("settled", "count(*) FILTER (WHERE c.settled)"),
    ("unsettled", "count(*) FILTER (WHERE NOT coalesce(c.settled, false))"),
    ("errors", "count(*) FILTER (WHERE c.http_status >= 400 OR c.error_type IS NOT NULL)"),
    ("unpriced_tokens", "coalesce(sum(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens + c.output_tokens)"
                        f" FILTER (WHERE {_LIVE} AND c.settled AND c.cost_micros IS NULL), 0)"),
    ("replayed_calls", "count(*) FILTER (WHERE c.replayed)"),
    ("priced_calls", f"count(c.cost_micros) FILTER (WHERE {_LIVE})"),
    ("unpriced_calls", f"count(*) FILTER (WHERE {_LIVE} AND c.settled AND c.cost_micros IS NULL)"),
    ("input_tokens", f"coalesce(sum(c.input_tokens) FILTER (WHERE {_LIVE}), 0)"),
    ("cache_read_tokens", f"coalesce(sum(c.cache_read_tokens) FILTER (WHERE {_LIVE}), 0)"),
    ("cache_write_tokens", f"coalesce(sum(c.cache_write_tokens) FILTER (WHERE {_LIVE}), 0)"),
    ("output_tokens", f"coalesce(sum(c.output_tokens) FILTER (WHERE {_LIVE}), 0)"),
    ("cost_micros", f"coalesce(sum(c.cost_micros) FILTER (WHERE {_LIVE}), 0)"),
    ("replayed_priced_calls", "count(c.cost_micros) FILTER (WHERE c.replayed)"),
    ("replayed_unpriced_calls", "count(*) FILTER (WHERE c.replayed AND c.settled AND c.cost_micros IS NULL)"),
    ("replayed_cost_micros", "coalesce(sum(c.cost_micros) FILTER (WHERE c.replayed), 0)"),
    # settled calls only
    ("hit_calls", "count(*) FILTER (WHERE c.settled AND c.cache_read_tokens > 0)"),
    ("settled_input_tokens", "coalesce(sum(c.input_tokens) FILTER (WHERE c.settled), 0)"),
    ("settled_cache_read_tokens", "coalesce(sum(c.cache_read_tokens) FILTER (WHERE c.settled), 0)"),
    ("settled_cache_write_tokens", "coalesce(sum(c.cache_write_tokens) FILTER (WHERE c.settled), 0)"),
    ("settled_cache_write_1h_tokens", "coalesce(sum(c.cache_write_1h_tokens) FILTER (WHERE c.settled), 0)"),
    # miss reasons keep SQL's sum of no value (null) as it is: a null token count stays unknown
    ("prompt_tokens", "sum(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens) FILTER (WHERE c.settled)"),
    ("prompt_cache_read_tokens", "sum(c.cache_read_tokens) FILTER (WHERE c.settled)"),
    ("miss_micros", "sum(c.cache_miss_micros) FILTER (WHERE c.settled)"),
    ("miss_priced_calls", "count(c.cache_miss_micros) FILTER (WHERE c.settled)"),
)
CUBE = tuple(name for name, _ in MEASURES[:16])  # the spend cube's columns, in its order

DAILY = Rollup(
    "call_rollup",
    (("day_n", "INTEGER", _DAY), *_DIMENSIONS, ("currency", "VARCHAR", "c.currency"),
     ("replayed", "BOOLEAN", "coalesce(c.replayed, false)"), ("price_source", "VARCHAR", "c.price_source"),
     ("cache_verdict", "VARCHAR", "c.cache_verdict")),
    tuple((name, expr, "sum") for name, expr in MEASURES),
    ("day_n",),
)
DIMENSIONS = tuple(name for name, _, _ in DAILY.keys)
TABLE_SQL = DAILY.table_sql

# per run (null: the calls outside any run), day, call-level filter value and currency: what the pages
# sum or compare per run (`unstable_prefix_runs`), the runs a call-level filter keeps (a scope's run
# set), the live spend outside any run (the failures page's total), and the spend cube of the calls a
# run name or tag selects (`queries.spend.spend_cube`: its live and replayed measures are the rows'
# own by their `replayed` key, so each is kept once: `priced`, `unpriced`, tokens of every call)
RUNS = Rollup(
    "call_run_rollup",
    (("run_id", "VARCHAR", "c.run_id"), ("day_n", "INTEGER", _DAY), *_DIMENSIONS,
     ("replayed", "BOOLEAN", "coalesce(c.replayed, false)"), ("currency", "VARCHAR", "c.currency")),
    (("calls", "count(*)", "sum"),
     ("live_cost_micros", f"sum(c.cost_micros) FILTER (WHERE {_LIVE})", "sum"),
     ("settled", "count(*) FILTER (WHERE c.settled)", "sum"),
     ("first_at", f"min({_STARTED}) FILTER (WHERE c.settled)", "min"),
     ("first_write_at", f"min({_STARTED}) FILTER (WHERE c.settled AND c.cache_write_tokens > 0)", "min"),
     ("last_read_at", f"max({_STARTED}) FILTER (WHERE c.settled AND c.cache_read_tokens > 0)", "max"),
     ("write_tokens", "sum(c.cache_write_tokens) FILTER (WHERE c.settled)", "sum"),
     ("cost_micros", "sum(c.cost_micros) FILTER (WHERE c.settled)", "sum"),
     ("errors", dict(MEASURES)["errors"], "sum"),
     ("priced", "count(c.cost_micros)", "sum"),
     ("unpriced", "count(*) FILTER (WHERE c.settled AND c.cost_micros IS NULL)", "sum"),
     ("unpriced_tokens", "sum(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens + c.output_tokens)"
                         " FILTER (WHERE c.settled AND c.cost_micros IS NULL)", "sum"),
     *((name, f"sum(c.{name})", "sum") for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens",
                                                     "output_tokens")),
     ("replayed_cost_micros", "sum(c.cost_micros) FILTER (WHERE c.replayed)", "sum")),
    ("run_id", "day_n"),
)

# The latency of live calls per UTC month, filter value and log-spaced bucket of the time to first
# byte (`TTFB`) and of the duration (`DURATION`): the Overview's percentiles read these few rows
# instead of ranking every call (`queries.ledger`). A bucket of `GROWTH` holds the latencies in
# (GROWTH**(k-2), GROWTH**(k-1)] µs and stands for 2 * GROWTH**(k-1) / (1 + GROWTH): within
# `LATENCY_ERROR` of every latency in it (zero is its own bucket, a negative one mirrors a positive
# one). A call that has no such latency (replayed, or no time stamp) counts with a null bucket, so
# the rollup still counts every call.
GROWTH = 1.02
LATENCY_ERROR = (GROWTH - 1) / (GROWTH + 1)  # relative, < 1%
_MONTH = "date_trunc('month', DATE '1970-01-01' + (epoch_us(c.started_at) // 86400000000)::INTEGER)::DATE"


def latency_bucket(moment: str) -> str:
    """The bucket (SQL, from calls `c`) of the latency from a call's start to `moment`, null when none."""
    us = f"(epoch_us(c.{moment}) - epoch_us(c.started_at))"
    return (f"(CASE WHEN coalesce(c.replayed, false) OR c.{moment} IS NULL THEN NULL WHEN {us} = 0 THEN 0 "
            f"ELSE sign({us}) * (ceil(ln(abs({us})) / ln({GROWTH})) + 1) END)::INTEGER")


def bucket_ms(bucket: str) -> str:
    """The latency in milliseconds a bucket stands for (SQL)."""
    return f"(sign({bucket}) * 2 * pow({GROWTH}, abs({bucket}) - 1) / (1 + {GROWTH}) / 1000.0)"


def _latency(table: str, moment: str) -> Rollup:
    return Rollup(table, (("month", "DATE", _MONTH), *_DIMENSIONS, ("currency", "VARCHAR", "c.currency"),
                          ("bucket", "INTEGER", latency_bucket(moment))),
                  # merged on every key: a batch rewrites only its own groups, not a busy month's every bucket
                  (("calls", "count(*)", "sum"),),
                  ("month", "provider", "model", "prompt_id", "prompt_version", "currency", "bucket"))


TTFB = _latency("ttfb_rollup", "first_byte_at")
DURATION = _latency("duration_rollup", "ended_at")
ROLLUPS = (DAILY, RUNS, TTFB, DURATION)


def aggregate(source: str) -> str:
    """The daily rollup's rows of the calls in `source` (as migration 0011 filled it)."""
    return DAILY.aggregate(source)


def rebuild(con: duckdb.DuckDBPyConnection) -> None:
    """Every rollup made again from the stored calls."""
    for spec in ROLLUPS:
        con.execute(f"DELETE FROM {spec.table}; INSERT INTO {spec.table} {spec.aggregate('calls')};")


def add_calls(con: duckdb.DuckDBPyConnection, batch: str, only_new: bool, append: bool = False) -> None:
    """Fold the calls of the registered relation `batch` into every rollup, inside the caller's
    transaction, before they are inserted. `only_new`: leave out those already stored (the insert
    will ignore them); else the caller knows none is. The groups the batch touches (its days; its
    runs and days) are merged again with what the rollup held for them, so it keeps one row per
    group whatever the batches. `append` (a lake): the batch's rows are added as rows of their own
    instead, because machines committing at once may add to the same day, and a lake refuses two
    transactions where one deleted rows the other also changed; readers merge the rows of a group
    either way."""
    # a batch's times may still be text (the insert casts them): cast as the insert does
    times = ", ".join(f"CAST(b.{name} AS TIMESTAMPTZ) AS {name}" for name in ("started_at", "first_byte_at", "ended_at"))
    source = f"(SELECT * REPLACE ({times}) FROM {batch} b" + (
        " WHERE NOT EXISTS (SELECT 1 FROM calls s WHERE s.call_id = b.call_id))" if only_new else ")")
    for spec in ROLLUPS:
        if append:
            con.execute(f"INSERT INTO {spec.table} BY NAME {spec.aggregate(source)}")
            continue
        same = " AND ".join(f"d.{key} IS NOT DISTINCT FROM r.{key}" for key in spec.merged_on)
        # a temporary table, not an Arrow table: pyarrow's import would cost an ingester ~0.5 s
        con.execute(f"""CREATE OR REPLACE TEMPORARY TABLE _wb_rollup AS
            WITH delta AS ({spec.aggregate(source)})
            {spec.merged(f"SELECT * FROM {spec.table} r WHERE EXISTS (SELECT 1 FROM delta d WHERE {same}) "
                         "UNION ALL BY NAME SELECT * FROM delta")}""")
        con.execute(f"DELETE FROM {spec.table} r WHERE EXISTS (SELECT 1 FROM _wb_rollup d WHERE {same})")
        con.execute(f"INSERT INTO {spec.table} BY NAME SELECT * FROM _wb_rollup")
        con.execute("DROP TABLE _wb_rollup")


def whole(con: duckdb.DuckDBPyConnection, spec: Rollup = DAILY) -> bool:
    """Whether a rollup counts every stored call (a store written around `ingest` would not)."""
    return con.execute(f"SELECT (SELECT count(*) FROM calls) = (SELECT coalesce(sum(calls), 0) FROM {spec.table})"
                       ).fetchall()[0][0]
