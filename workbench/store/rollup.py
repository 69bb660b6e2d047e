"""The rollups of calls: the calls summed per UTC day and per value of every call-level filter and
key the pages group by (`DAILY`, table `call_rollup`), and per run as well (`RUNS`, table
`call_run_rollup`: the runs' own sums, first and last moments, for what the pages aggregate by
run, and the spend cube of the calls a run name or tag selects; `CACHE_RUNS`, table
`cache_run_rollup`: their cache use per price row, for cache savings), and the live calls'
latencies counted per UTC month and log-spaced bucket (`TTFB`, `DURATION`: the Overview's
percentiles, within `LATENCY_ERROR`); the judged cache writes and those a later hit read
(`WRITES`, `READS`, and per run `RUN_WRITES`, `RUN_READS`: the prompt cache page's write fates),
the changed prefixes (`CHANGES`: its changing regions) and each compaction's later calls (`REACH`:
the compaction page's saved tokens). The pages read their figures from them (a few rows per day,
or per run) instead of scanning every call; `workbench.store.queries` falls back to the calls
themselves whenever a filter cannot be answered from them (a moment that is not a UTC midnight;
for the daily rollup, a run name or tag) or a rollup does not count every stored call.

They never disagree with the calls: every write of calls (`ingest.write_frame`: ingest, `store
copy`, the lake) folds its *new* calls into them in the same transaction (a write of cache reads
or of compactions, theirs), and the migrations that
made them filled them from the calls already stored. Calls are never updated nor deleted; a
migration that changes stored calls must rebuild them (`rebuild`), and one that changes a rollup's
keys or measures must alter its table and rebuild it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import lru_cache

import duckdb

_LIVE = "NOT coalesce(c.replayed, false)"
_DAY = "(epoch_us(c.started_at) // 86400000000)::INTEGER"  # the day `spend_cube` gives a call
_STARTED = "epoch_us(c.started_at)"
_NEW_CALLS = "_wb_new_calls"  # a write's new calls while they are folded (`add_calls`): a temporary table
_NEW_READS = "_wb_new_reads"  # and its new cache reads (`add_reads`)
# the most ids a hash join hands to its probe side's scan as a filter (DuckDB's default: 50), which the
# scan answers from the table's key index when they are few enough (`index_scan_max_count`: 2,048)
_LOOKUPS = 2048


@dataclass(frozen=True)
class Rollup:
    """A rollup table: its keys (name, type, from calls `c`: a group is a value of every key) and its
    measures (name, how one call counts, how two rows of one group merge: sum, min or max)."""

    table: str
    keys: tuple[tuple[str, str, str], ...]
    measures: tuple[tuple[str, str, str], ...]
    # the table whose rows it counts (`calls`: its `calls` measure counts them) and folds as they are written
    of: str = "calls"
    text: tuple[str, ...] = ()  # the measures that are text (a min or max of strings); the others BIGINT

    def _type(self, measure: str) -> str:
        return "VARCHAR" if measure in self.text else "BIGINT"

    @property
    def source(self) -> str:
        """The stored rows it sums, as calls `c` (`rebuild`)."""
        return "calls" if self.of == "calls" else _OF[self.of]("cache_reads")

    @property
    def table_sql(self) -> str:
        return (f"CREATE TABLE {self.table} (" + ", ".join(f"{name} {kind}" for name, kind, _ in self.keys) + ", "
                + ", ".join(f"{name} {self._type(name)}" for name, _, _ in self.measures) + ");")

    def aggregate(self, source: str) -> str:
        """The rollup rows of the calls in `source` (a table or a subquery), one per group."""
        return (f"SELECT {', '.join(f'{expr} AS {name}' for name, _, expr in self.keys)}, "
                + ", ".join(f"({expr})::{self._type(name)} AS {name}" for name, expr, _ in self.measures)
                + f" FROM {source} c GROUP BY ALL")

    def merged(self, rows: str) -> str:
        """`rows` (rollup rows, several per group) merged to one row per group."""
        return (f"SELECT {', '.join(name for name, _, _ in self.keys)}, "
                + ", ".join(f"{merge}({name})::{self._type(name)} AS {name}" for name, _, merge in self.measures)
                + f" FROM ({rows}) GROUP BY ALL")

    def merge(self, source: str) -> str:
        """The statement folding the calls in `source` into the table: each group's row gets the
        batch's measures merged in as `merged` would (a sum or an extreme of the two, a null one
        left out), a group the table lacks is inserted."""
        same = " AND ".join(f"r.{name} IS NOT DISTINCT FROM d.{name}" for name, _, _ in self.keys)
        columns = [name for name, _, _ in self.keys] + [name for name, _, _ in self.measures]
        merged = {"sum": "coalesce(r.{0} + d.{0}, r.{0}, d.{0})", "min": "least(r.{0}, d.{0})",
                  "max": "greatest(r.{0}, d.{0})"}
        return (f"MERGE INTO {self.table} r USING ({self.aggregate(source)}) d ON ({same}) "
                "WHEN MATCHED THEN UPDATE SET " + ", ".join(f"{name} = " + merged[merge].format(name)
                                                             for name, _, merge in self.measures)
                + f" WHEN NOT MATCHED THEN INSERT ({', '.join(columns)}) VALUES ({', '.join('d.' + name for name in columns)})")


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
)

# per run, day, filter value, currency and price row: the settled calls' cache use that cache savings
# price (`queries.cache.cache_savings`) when a run name or tag selects the calls (the daily rollup
# cannot answer one). Its own table, not `RUNS`' keys: the Overview's cube reads `RUNS`, and the price
# row is the key that sheet's savings are priced by (1.57M rows at 10,000,000 calls, as `RUNS`)
CACHE_RUNS = Rollup(
    "cache_run_rollup",
    (("run_id", "VARCHAR", "c.run_id"), ("day_n", "INTEGER", _DAY), *_DIMENSIONS,
     ("replayed", "BOOLEAN", "coalesce(c.replayed, false)"), ("currency", "VARCHAR", "c.currency"),
     ("price_source", "VARCHAR", "c.price_source")),
    tuple((name, dict(MEASURES)[name], "sum") for name in (
        "calls", "settled", "hit_calls", "settled_input_tokens", "settled_cache_read_tokens",
        "settled_cache_write_tokens", "settled_cache_write_1h_tokens")),
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
                  (("calls", "count(*)", "sum"),))


TTFB = _latency("ttfb_rollup", "first_byte_at")
DURATION = _latency("duration_rollup", "ended_at")

# The prompt cache page's cache writes by fate (`queries.insight.write_waste`): the judged writes
# (`WRITES`, from the calls) and those a later hit read (`READS`: a `cache_reads` row each, counted
# with its writer's keys when the read is written), per UTC day, filter value, currency and whether
# the write has an end of life. Only a write that is unread and whose life has not ended yet (or
# ended since: the page reads the calls that are still alive) is told apart when the page is read.
JUDGED_WRITE = "c.settled AND c.cache_write_tokens > 0 AND c.cache_verdict IS NOT NULL"
_WRITE_KEYS = (("day_n", "INTEGER", _DAY), *_DIMENSIONS, ("currency", "VARCHAR", "c.currency"),
               ("replayed", "BOOLEAN", "coalesce(c.replayed, false)"),
               ("expiring", "BOOLEAN", "c.cache_expires_at IS NOT NULL"))
_WRITE_MEASURES = (
    ("calls", "count(*)", "sum"),
    ("writes", f"count(*) FILTER (WHERE {JUDGED_WRITE})", "sum"),
    ("write_tokens", f"coalesce(sum(c.cache_write_tokens) FILTER (WHERE {JUDGED_WRITE}), 0)", "sum"),
    ("write_micros", f"coalesce(sum(c.cache_write_micros) FILTER (WHERE {JUDGED_WRITE}), 0)", "sum"),
)
WRITES = Rollup("cache_write_rollup", _WRITE_KEYS, _WRITE_MEASURES)
READS = Rollup("cache_read_rollup", _WRITE_KEYS, _WRITE_MEASURES, of="cache_reads")
# the same per run as well (the writer's run), for the calls a run name or tag selects
RUN_WRITES = Rollup("cache_write_run_rollup", (("run_id", "VARCHAR", "c.run_id"), *_WRITE_KEYS), _WRITE_MEASURES)
RUN_READS = Rollup("cache_read_run_rollup", (("run_id", "VARCHAR", "c.run_id"), *_WRITE_KEYS), _WRITE_MEASURES,
                   of="cache_reads")

# The prompt cache page's changing prefixes (`queries.insight.changing_regions`): the calls judged
# `prefix_changed` per UTC day, filter value and region that changed, with what their misses lost,
# a currency and the greatest call id (the example whose diff is shown); every other call counts
# with a null region.
CHANGED = "c.cache_verdict = 'prefix_changed'"
CHANGES = Rollup(
    "prefix_change_rollup",
    (("day_n", "INTEGER", _DAY), *_DIMENSIONS, ("replayed", "BOOLEAN", "coalesce(c.replayed, false)"),
     ("region", "VARCHAR", f"CASE WHEN {CHANGED} THEN c.cache_region END")),
    (("calls", "count(*)", "sum"),
     ("changed", f"count(*) FILTER (WHERE {CHANGED})", "sum"),
     ("lost_micros", f"sum(c.cache_miss_micros) FILTER (WHERE {CHANGED})", "sum"),
     ("currency", f"min(c.currency) FILTER (WHERE {CHANGED})", "min"),
     ("example_call_id", f"max(c.call_id) FILTER (WHERE {CHANGED})", "max")),
    text=("currency", "example_call_id"),
)

# The compaction page's saved tokens (`queries.insight.compaction_sources`): per compaction, the
# settled calls of its run from it to the run's next compaction (an `ok` or inferred one; those
# are `marked`). A write of calls adds its calls to the compaction before each (`add_calls`); a
# write of compactions counts their runs' compactions again (`recount_compactions`).
_MARKED = "(x.outcome IS NOT DISTINCT FROM 'ok' OR x.source = 'inferred')"


def marked(where: str) -> str:
    """The compactions of whole runs `where` picks, each with the moment of its run's next one of its kind."""
    return (f"SELECT x.compaction_id, x.run_id, x.occurred_at, {_MARKED} AS marked, lead(x.occurred_at) OVER ("
            f"PARTITION BY x.run_id, {_MARKED} ORDER BY x.occurred_at, x.compaction_id) AS next_at "
            f"FROM compactions x WHERE {where}")


LATER = ("m.marked AND c.settled AND c.run_id = m.run_id AND c.started_at >= m.occurred_at "
          "AND (m.next_at IS NULL OR c.started_at < m.next_at)")


def _reach(where: str = "true") -> str:
    """Every compaction `where` picks (of whole runs), once per later call of its run (`counted`)."""
    return (f"(SELECT m.compaction_id, m.run_id, true AS counted, c.run_id AS call_run FROM ({marked(where)}) m "
            f"LEFT JOIN calls c ON {LATER})")


REACH = Rollup(
    "compaction_reach",
    (("compaction_id", "VARCHAR", "c.compaction_id"), ("run_id", "VARCHAR", "c.run_id")),
    (("compactions", "count(DISTINCT c.compaction_id) FILTER (WHERE c.counted)", "sum"),
     ("later_calls", "count(c.call_run)", "sum")),
    of="compactions",
)
# what a rollup of reads or compactions sums, as calls `c` (a read whose writer is not stored counts with null keys)
_OF = {"cache_reads": lambda reads: f"(SELECT c.* FROM {reads} r LEFT JOIN calls c ON c.call_id = r.call_id)",
       "compactions": lambda _: _reach()}
ROLLUPS = (DAILY, RUNS, TTFB, DURATION, WRITES, READS, REACH, CHANGES, CACHE_RUNS, RUN_WRITES, RUN_READS)


def recount_compactions(con: duckdb.DuckDBPyConnection, batch: str) -> None:
    """The compactions of the runs of the registered relation `batch` (rows of `compactions`, just
    written: new, replacing or replaced) counted again from the stored calls, in the caller's transaction."""
    runs = "(SELECT run_id FROM {0} WHERE run_id IS NOT NULL)"
    where = (f"x.run_id IN {runs.format(batch)} OR x.compaction_id IN (SELECT compaction_id FROM {batch})")
    con.execute(f"DELETE FROM {REACH.table} WHERE run_id IN {runs.format(batch)} "
                f"OR compaction_id IN (SELECT compaction_id FROM {batch})")
    con.execute(f"INSERT INTO {REACH.table} BY NAME {REACH.aggregate(_reach(where))}")


def _calls_reach(source: str) -> str:
    """The new settled calls of `source` (calls `c`), once each with the compaction before it in its run."""
    runs = f"(SELECT run_id FROM {source} c WHERE c.settled AND c.run_id IS NOT NULL)"
    return (f"(SELECT m.compaction_id, m.run_id, false AS counted, c.run_id AS call_run "
            f"FROM ({marked(f'x.run_id IN {runs}')}) m JOIN {source} c ON {LATER})")


def aggregate(source: str) -> str:
    """The daily rollup's rows of the calls in `source` (as migration 0011 filled it)."""
    return DAILY.aggregate(source)


def rebuild(con: duckdb.DuckDBPyConnection) -> None:
    """Every rollup made again from the stored calls."""
    for spec in ROLLUPS:
        con.execute(f"DELETE FROM {spec.table}; INSERT INTO {spec.table} {spec.aggregate(spec.source)};")


def add_calls(con: duckdb.DuckDBPyConnection, batch: str, only_new: bool, append: bool = False) -> None:
    """Fold the calls of the registered relation `batch` into every rollup, inside the caller's
    transaction, before they are inserted. `only_new`: leave out those already stored (the insert
    will ignore them); else the caller knows none is. Each group the batch touches is merged into
    the row the rollup holds for it (one `MERGE` a rollup: a group found has its measures merged, a
    new one is inserted), so it keeps one row per group whatever the batches. `append` (a lake): the
    batch's rows are added as rows of their own instead, because machines committing at once may add
    to the same group, and a lake refuses two transactions where one changed rows the other also
    changed; readers merge the rows of a group either way."""
    # a batch's times may still be text (the insert casts them): cast as the insert does
    times = ", ".join(f"CAST(b.{name} AS TIMESTAMPTZ) AS {name}" for name in ("started_at", "first_byte_at", "ended_at"))
    rows = f"SELECT * REPLACE ({times}) FROM {batch} b"
    if append:  # a lake: its transaction writes the lake only (and it has no index to look ids up in)
        source = f"({rows}" + (" WHERE NOT EXISTS (SELECT 1 FROM calls s WHERE s.call_id = b.call_id))" if only_new else ")")
        _fold(con, [(spec, source) for spec in ROLLUPS if spec.of == "calls"] + [(REACH, _calls_reach(source))], True)
        return
    # the new calls made once, in a temporary table every rollup's statement reads: binding the
    # batch's scan, its casts and the anti-join in each of them was a fifth of the fold's planning
    _fold(con, [(spec, _NEW_CALLS) for spec in ROLLUPS if spec.of == "calls"] + [(REACH, _calls_reach(_NEW_CALLS))],
          False, before=_made(_NEW_CALLS, rows, "calls" if only_new else None), after=f"DROP TABLE {_NEW_CALLS}")


def add_reads(con: duckdb.DuckDBPyConnection, batch: str, append: bool = False) -> None:
    """Fold the cache reads of the registered relation `batch` (rows of `cache_reads`) into the
    rollups of reads, inside the caller's transaction, after the batch's calls and before the
    reads are inserted: those already stored are left out (the insert ignores them)."""
    folds = [spec for spec in ROLLUPS if spec.of == "cache_reads"]
    if append:  # a lake: no index to look ids up in
        new = f"(SELECT * FROM {batch} b WHERE NOT EXISTS (SELECT 1 FROM cache_reads s WHERE s.call_id = b.call_id))"
        _fold(con, [(spec, _OF[spec.of](new)) for spec in folds], True)
        return
    _fold(con, [(spec, _OF[spec.of](_NEW_READS)) for spec in folds], False,
          before=_made(_NEW_READS, f"SELECT * FROM {batch}", "cache_reads"), after=f"DROP TABLE {_NEW_READS}")


def _made(table: str, rows: str, stored: str | None) -> str:
    """The statements making the temporary `table` of `rows` (rows of the table `stored`, keyed by
    `call_id`), those already stored in `stored` left out (none: the caller knows none is)."""
    made = f"CREATE OR REPLACE TEMP TABLE {table} AS {rows}"
    if stored is None:
        return made
    # the stored ones found by a join built on the table's few rows (counted exactly), whose filter of
    # their ids is looked up in the key's index (`_lookups`): an anti-join of the batch scanned every stored id
    return (f"{made};\nDELETE FROM {table} WHERE call_id IN "
            f"(SELECT s.call_id FROM {table} t JOIN {stored} s ON s.call_id = t.call_id)")


def _fold(con: duckdb.DuckDBPyConnection, folds: list[tuple[Rollup, str]], append: bool, before: str | None = None,
          after: str | None = None) -> None:
    """The rollup rows of each (rollup, source) added to its table (see `add_calls`), between the
    statements `before` and `after`."""
    # one statement a rollup: planning a rollup's measures, not its few rows, is most of a batch's fold
    statements = _parsed(";\n".join([*filter(None, [before]), *(
        f"INSERT INTO {spec.table} BY NAME {spec.aggregate(source)}" if append else spec.merge(source)
        for spec, source in folds), *filter(None, [after])]))
    # a file store's batch: its stored ids and its reads' writers found in the key's index (`_made`, `_OF`)
    with nullcontext() if append else _lookups(con):
        for statement in statements:
            con.execute(statement)


@contextmanager
def _lookups(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Within it, a join of up to `_LOOKUPS` rows to a keyed table finds them in the key's index instead
    of scanning every stored row for them (ids are random: no zone of the table is skipped). A fold
    of 300 reads scanned every call: 44 ms at 1M calls, 0.4 s at 10M. A statement that fails within
    leaves it set on the connection (in the aborted transaction even a reset fails): plans' speed only."""
    con.execute(f"SET SESSION dynamic_or_filter_threshold = {_LOOKUPS}")
    yield
    con.execute("RESET SESSION dynamic_or_filter_threshold")


@lru_cache(maxsize=16)
def _parsed(sql: str) -> tuple[duckdb.Statement, ...]:
    """The statements of `sql`, parsed once a process: a fold's text is the same batch after batch,
    DuckDB's parser was a quarter of its instructions, and a parsed statement runs on any connection."""
    return tuple(duckdb.extract_statements(sql))


def whole(con: duckdb.DuckDBPyConnection, spec: Rollup = DAILY) -> bool:
    """Whether a rollup counts every stored call, or read (a store written around `ingest` would not)."""
    counted = spec.measures[0][0]  # what counts the rows of `spec.of`
    return con.execute(f"SELECT (SELECT count(*) FROM {spec.of}) = (SELECT coalesce(sum({counted}), 0) FROM {spec.table})"
                       ).fetchall()[0][0]
