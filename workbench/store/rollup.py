"""The daily rollup of calls (`call_rollup`): the calls summed per UTC day and per value of every
call-level filter and key the pages group by (provider, model, prompt id and version, currency,
live or replayed, price source, cache verdict). The pages read their totals from it (a few thousand
rows) instead of scanning every call; `workbench.store.queries` falls back to the calls themselves
whenever a filter cannot be answered from it (a run name or tag, a moment that is not a UTC midnight)
or the rollup does not count every stored call.

It never disagrees with the calls: every write of calls (`ingest.write_frame`: ingest, `store
copy`, the lake) folds its *new* calls into it in the same transaction, and the migration that made
it filled it from the calls already stored. Calls are never updated nor deleted; a migration that
changes stored calls must rebuild the rollup (`REBUILD`), and one that changes `MEASURES` or
`DIMENSIONS` must alter the table and rebuild it (migration 0011 made it from them)."""

from __future__ import annotations

import duckdb

DIMENSIONS = ("day_n", "provider", "model", "prompt_id", "prompt_version", "currency", "replayed", "price_source",
              "cache_verdict")
# (name, how one call counts, from calls `c`): the spend cube's counters (`queries.spend.spend_cube`),
# then what cache savings and miss reasons sum over settled calls
_LIVE = "NOT coalesce(c.replayed, false)"
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

TABLE_SQL = ("CREATE TABLE call_rollup (day_n INTEGER, provider VARCHAR, model VARCHAR, prompt_id VARCHAR, "
             "prompt_version VARCHAR, currency VARCHAR, replayed BOOLEAN, price_source VARCHAR, cache_verdict VARCHAR, "
             + ", ".join(f"{name} BIGINT" for name, _ in MEASURES) + ");")


def aggregate(source: str) -> str:
    """The rollup rows of the calls in `source` (a table or a subquery), one per day and dimensions.
    The day is the one `spend_cube` gives a call (µs since the epoch, divided)."""
    return f"""SELECT (epoch_us(c.started_at) // 86400000000)::INTEGER AS day_n, c.provider,
               coalesce(c.model_served, c.model_requested) AS model, c.prompt_id, c.prompt_version, c.currency,
               coalesce(c.replayed, false) AS replayed, c.price_source, c.cache_verdict,
               {', '.join(f'({expr})::BIGINT AS {name}' for name, expr in MEASURES)}
               FROM {source} c GROUP BY ALL"""


REBUILD = f"DELETE FROM call_rollup; INSERT INTO call_rollup {aggregate('calls')};"


def _merged(rows: str) -> str:
    """`rows` (rollup rows, several per group) summed to one row per group."""
    return (f"SELECT {', '.join(DIMENSIONS)}, "
            + ", ".join(f"sum({name})::BIGINT AS {name}" for name, _ in MEASURES)
            + f" FROM ({rows}) GROUP BY ALL")


def add_calls(con: duckdb.DuckDBPyConnection, batch: str, only_new: bool, append: bool = False) -> None:
    """Fold the calls of the registered relation `batch` into the rollup, inside the caller's
    transaction, before they are inserted. `only_new`: leave out those already stored (the insert
    will ignore them); else the caller knows none is. The days the batch touches are summed again
    with what the rollup held for them, so it keeps one row per group whatever the batches.
    `append` (a lake): the batch's sums are added as rows of their own instead, because machines
    committing at once may add to the same day, and a lake refuses two transactions where one
    deleted rows the other also changed; readers sum the rows of a group either way."""
    # a batch's times may still be text (the insert casts them): cast as the insert does
    source = f"(SELECT * REPLACE (CAST(b.started_at AS TIMESTAMPTZ) AS started_at) FROM {batch} b" + (
        " WHERE NOT EXISTS (SELECT 1 FROM calls s WHERE s.call_id = b.call_id))" if only_new else ")")
    if append:
        con.execute(f"INSERT INTO call_rollup BY NAME {aggregate(source)}")
        return
    merged = con.sql(f"""
        WITH delta AS ({aggregate(source)})
        {_merged(f"SELECT * FROM call_rollup r WHERE EXISTS (SELECT 1 FROM delta d WHERE d.day_n IS NOT DISTINCT FROM r.day_n) "
                 "UNION ALL BY NAME SELECT * FROM delta")}""").to_arrow_table()
    if not merged.num_rows:
        return
    con.register("_wb_rollup", merged)
    # on an error the transaction is aborted (no unregister possible then); the next register replaces it
    con.execute("DELETE FROM call_rollup r WHERE EXISTS (SELECT 1 FROM _wb_rollup d "
                "WHERE d.day_n IS NOT DISTINCT FROM r.day_n)")
    con.execute("INSERT INTO call_rollup BY NAME SELECT * FROM _wb_rollup")
    con.unregister("_wb_rollup")


def whole(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the rollup counts every stored call (a store written around `ingest` would not)."""
    return con.execute("SELECT (SELECT count(*) FROM calls) = (SELECT coalesce(sum(calls), 0) FROM call_rollup)"
                       ).fetchall()[0][0]
