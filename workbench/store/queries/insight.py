"""Insight: what `workbench.insight` reads while it judges a batch at ingest, and what the pages and
`workbench report cache --why` read of its verdicts and inferred compactions."""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb
import polars as pl

from workbench.store import rollup
from workbench.store.queries._base import (Filters, _MODEL, _Sql, _frame, _q, _rq, in_scope, rolled_up, runs_rolled_up,
                                           scoped)

# -- read while a batch is judged (workbench/insight/ingest.py) -----------------------------------


def _among(column: str, values: str) -> str:
    """`column` is one of the list parameter `$values`, as a semi-join on the unnested list: for the
    lists as long as a batch (its runs, its writers, its keys). `list_contains` of a constant list is
    tested on every row read (rows x values: 760 run ids on a 30,000-call store, 17 -> 7 ms of CPU);
    under ~200 values it is the cheaper one, so the few lineages of a batch keep it."""
    return f"{column} IN (SELECT unnest(${values}))"


def lineage_history(con: duckdb.DuckDBPyConnection, lineages: list[str], since: datetime,
                    runs: list[str] | None = None, blocks: list[int] | None = None) -> pl.DataFrame:
    """The stored calls of these lineages from `since` on (the provider's clock), with their prefixes
    and usage: the timeline a batch's calls are judged against (`runs`: only those runs' calls;
    `blocks`: only calls with one of these region hashes). Times in µs since the epoch."""
    # the calls with one of `blocks`: their regions unnested and joined with them (a list test of
    # every stored call against all of them grew with the product)
    sent = """WITH sent AS (SELECT call_id, unnest(blocks) AS block FROM call_prefixes
                           WHERE list_contains($lineages, lineage) AND clock_at >= $since)"""
    return _frame(con, f"""
        {sent if blocks is not None else ''}
        SELECT p.call_id, p.lineage, epoch_us(p.clock_at) AS clock, epoch_us(c.started_at) AS started, c.run_id,
               coalesce(c.settled, false) AS settled, c.input_tokens, c.cache_read_tokens, c.cache_write_tokens,
               c.cache_write_1h_tokens, c.output_tokens, c.cost_micros, c.price_source,
               coalesce(c.model_requested, c.model_served) AS model, p.blocks, p.sizes, p.kinds, p.marks, p.lead, p.base,
               p.explicit, p.ttl_s, p.scope, p.keys
        FROM call_prefixes p JOIN calls c USING (call_id)
        WHERE list_contains($lineages, p.lineage) AND p.clock_at >= $since
              {'AND ' + _among('c.run_id', 'runs') if runs is not None else ''}
              {'AND p.call_id IN (SELECT call_id FROM sent SEMI JOIN (SELECT unnest($blocks) AS block) USING (block))'
               if blocks is not None else ''}""",
                  {"lineages": lineages, "since": since} | ({"runs": runs} if runs is not None else {})
                  | ({"blocks": blocks} if blocks is not None else {}))


def older_entries(con: duckdb.DuckDBPyConnection, lineages: list[str], keys: list[int],
                  before: datetime | None) -> pl.DataFrame:
    """For prefix hashes `keys`: the latest stored call (before `before`, if given) that made a cache
    entry for one of them anew, per lineage and key (an entry that long ago has expired). Calls
    stored before insight kept what each made name every entry they left."""
    # the hashes unnested in the select list: a lateral `unnest` in the FROM clause is planned as a
    # dependent join that groups every stored prefix by its lists (on a 30,000-call store, 152 keys:
    # 53 -> 4 ms of CPU, and growing with the store)
    return _frame(con, f"""
        WITH sent AS (SELECT lineage, call_id, clock_at, unnest(coalesce(written, keys)) AS key FROM call_prefixes
                      WHERE list_contains($lineages, lineage) {'AND clock_at < $before' if before else ''})
        SELECT lineage, key, arg_max(call_id, clock_at) AS call_id FROM sent WHERE {_among('key', 'keys')}
        GROUP BY ALL""", {"lineages": lineages, "keys": keys} | ({"before": before} if before else {}))


def lineage_states(con: duckdb.DuckDBPyConnection, lineages: list[str]) -> pl.DataFrame:
    """The cache state each of these lineages carries from its last batch: its version, the order
    key of its latest call, its longest entry life (not its entries: `lineage_entries`)."""
    return _frame(con, """
        SELECT lineage, version, last_clock, last_started, last_call_id, ttl_us
        FROM insight_lineages WHERE list_contains($lineages, lineage)""", {"lineages": lineages})


def lineage_entries(con: duckdb.DuckDBPyConnection, lineages: list[str]) -> pl.DataFrame:
    """The cache entries these lineages carry (JSON: [prefix hash, alive until µs, writer] each)."""
    return _frame(con, "SELECT lineage, entries FROM insight_lineages WHERE list_contains($lineages, lineage)",
                  {"lineages": lineages})


def stored_texts(con: duckdb.DuckDBPyConnection, call_ids: list[str]) -> pl.DataFrame:
    """Request bodies and output texts of stored calls, with the call's wire and model."""
    return _frame(con, """
        SELECT b.call_id, b.request_json, b.output_text, c.wire, coalesce(c.model_requested, c.model_served) AS model
        FROM call_bodies b JOIN calls c USING (call_id) WHERE list_contains($ids, b.call_id)""", {"ids": call_ids})


def run_outputs(con: duckdb.DuckDBPyConnection, run_ids: list[str], since: datetime) -> pl.DataFrame:
    """The settled calls of these runs from `since` on, with their output text: where a summary may
    have come from."""
    return _frame(con, f"""
        SELECT c.call_id, c.run_id, epoch_us(c.started_at) AS started, b.output_text, c.cost_micros,
               coalesce(c.model_served, c.model_requested) AS model, c.currency
        FROM calls c JOIN call_bodies b USING (call_id)
        WHERE {_among('c.run_id', 'runs')} AND c.started_at >= $since AND c.settled""",
                  {"runs": run_ids, "since": since})


def model_specs(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The model rows calls were priced by, as recorded (JSON)."""
    return _frame(con, "SELECT price_source, spec FROM models")


def run_compactions_all(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> pl.DataFrame:
    """Every stored compaction row of these runs, reported and inferred, all columns."""
    return _frame(con, f"SELECT * FROM compactions WHERE {_among('run_id', 'runs')}", {"runs": run_ids})


# -- pages and reports ---------------------------------------------------------------------------


def miss_reasons(con: duckdb.DuckDBPyConnection, f: Filters, raw: bool = False) -> pl.DataFrame:
    """Settled calls judged at ingest, by verdict: calls, input tokens, and the money the misses lost
    (paid minus what a hit on the same prefix would have paid; exact, per currency). Calls no verdict
    was given (recorded before insight, or on a wire with no prompt cache) are `not_judged`. From the
    daily rollup when it can answer `f` (`rolled_up`), unless `raw`: the same figures."""
    if not raw and rolled_up(con, f):
        return _rq(con, f, """
            , by_verdict AS (
                SELECT c.cache_verdict, c.currency, sum(c.settled)::BIGINT AS calls,
                       sum(c.prompt_tokens)::BIGINT AS input_tokens,
                       sum(c.prompt_cache_read_tokens)::BIGINT AS cache_read_tokens,
                       sum(c.miss_micros)::BIGINT AS lost_micros,
                       sum(c.settled - c.miss_priced_calls)::BIGINT AS unpriced_calls
                FROM fc c WHERE c.settled > 0 GROUP BY ALL)""" + _VERDICT_ROWS)
    return _q(con, f, """
        , by_verdict AS (
            SELECT c.cache_verdict, c.currency, count(*) AS calls,
                   sum(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens)::BIGINT AS input_tokens,
                   sum(c.cache_read_tokens)::BIGINT AS cache_read_tokens, sum(c.cache_miss_micros)::BIGINT AS lost_micros,
                   count(*) - count(c.cache_miss_micros) AS unpriced_calls
            FROM fc c WHERE c.settled GROUP BY ALL)""" + _VERDICT_ROWS)


_VERDICT_ROWS = """
        SELECT coalesce(cache_verdict, 'not_judged') AS verdict, currency, calls, input_tokens, cache_read_tokens,
               coalesce(lost_micros, 0)::BIGINT AS lost_micros,
               CASE WHEN cache_verdict = 'hit' OR cache_verdict IS NULL THEN 0 ELSE unpriced_calls END AS unpriced_calls
        FROM by_verdict ORDER BY lost_micros DESC, calls DESC"""


def changing_regions(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 20, raw: bool = False
                     ) -> pl.DataFrame:
    """The prompts whose prefix keeps changing: prefix_changed calls by prompt (or model, without a
    declared prompt) and the region that changed, with the money those misses lost, a currency
    (the first by name when they had several) and one diff (looked up for the few groups shown, not
    joined over every call). From their rollup (`rollup.CHANGES`) when it can answer `f` (as
    `rolled_up`), unless `raw`: the same figures."""
    # ties ordered by the group's names, so the groups shown are the same whichever way they are read
    order = "lost_micros DESC, calls DESC, prompt_id, prompt_version, model, region"
    shown = f"""
        SELECT g.* EXCLUDE (example_call_id), p.diff AS example_diff
        FROM groups g LEFT JOIN call_prefixes p ON p.call_id = g.example_call_id
        ORDER BY {order}"""
    if not raw and rolled_up(con, f) and scoped(con, f, "changes_whole",
                                                lambda: rollup.whole(con, rollup.CHANGES)):
        built = _Sql(f)
        preds = " AND ".join(built.day_predicates() + built.call_predicates(model="c.model") + ["c.changed > 0"])
        return _frame(con, f"""
            WITH groups AS (
                SELECT coalesce(c.prompt_id, '(no prompt)') AS prompt_id, c.prompt_version, c.model, c.region,
                       sum(c.changed)::BIGINT AS calls, coalesce(sum(c.lost_micros), 0)::BIGINT AS lost_micros,
                       min(c.currency) AS currency, max(c.example_call_id) AS example_call_id
                FROM {rollup.CHANGES.table} c WHERE {preds} GROUP BY ALL
                ORDER BY {order} LIMIT $limit)""" + shown, {**built.params, "limit": limit})
    return _q(con, f, f"""
        , groups AS (
            SELECT coalesce(c.prompt_id, '(no prompt)') AS prompt_id, c.prompt_version, {_MODEL} AS model,
                   c.cache_region AS region, count(*) AS calls, coalesce(sum(c.cache_miss_micros), 0)::BIGINT AS lost_micros,
                   min(c.currency) AS currency, max(c.call_id) AS example_call_id
            FROM fc c WHERE {rollup.CHANGED} GROUP BY ALL
            ORDER BY {order} LIMIT $limit)""" + shown, {"limit": limit})


def write_waste(con: duckdb.DuckDBPyConnection, f: Filters, raw: bool = False,
                now: datetime | None = None) -> pl.DataFrame:
    """Cache writes by fate: `read` (a later hit read it), `wasted` (its life ended unread before
    `now`), `alive` (unread, still in its life, or with no end of life recorded). Tokens and what
    the writes cost, per currency. From the rollups of writes and reads (`rollup.WRITES`, `READS`)
    when they can answer `f` (as `rolled_up`), else under a run name or tag from their per-run
    forms (`RUN_WRITES`, `RUN_READS`, as `runs_rolled_up`), unless `raw`: the same figures. Only the
    writes still alive at `now` are read from the calls (those of the last day, at most, on a live store)."""
    now = now or datetime.now(timezone.utc)
    daily = not raw and rolled_up(con, f) and scoped(con, f, "writes_whole", lambda: all(
        rollup.whole(con, spec) for spec in (rollup.WRITES, rollup.READS)))
    # a run name or tag: the selected runs' rows of the per-run rollups, instead of their calls' judged
    # writes each looked up among every cache read (at 10,000,000 calls, under a tag: 0.52 -> 0.32 s of CPU)
    per_run = (not raw and not daily and f.run_level and runs_rolled_up(con, f) and scoped(
        con, f, "run_writes_whole", lambda: all(rollup.whole(con, spec) for spec in (rollup.RUN_WRITES, rollup.RUN_READS))))
    if daily or per_run:
        built = _Sql(f)
        preds = built.day_predicates() + built.call_predicates(model="c.model")
        if per_run:  # the run set `_q`'s head makes (or the scope's)
            preds.append(f"c.run_id IN (SELECT run_id FROM {'_wb_sel_runs' if in_scope(con, f) else 'sel_runs'})")
        # the rows of no judged write (most of them: the rollups count every call) add nothing, and
        # are left out before the run set is looked up (at 10M calls under a tag: ~60 ms of CPU a rollup)
        preds = " AND ".join(["c.writes > 0", *preds])
        writes, reads = (rollup.WRITES, rollup.READS) if daily else (rollup.RUN_WRITES, rollup.RUN_READS)
        sums = "c.currency, c.expiring, c.writes, c.write_tokens, c.write_micros"
        return _q(con, f, f"""
            , measured AS (
                SELECT {sums}, 1 AS sign FROM {writes.table} c WHERE {preds}
                UNION ALL SELECT {sums}, -1 AS sign FROM {reads.table} c WHERE {preds}),
            unread AS (
                SELECT currency, expiring, sum(sign * writes) AS writes, sum(sign * write_tokens) AS write_tokens,
                       sum(sign * write_micros) AS write_micros FROM measured GROUP BY ALL),
            still AS (  -- unread writes whose life has not ended
                SELECT c.currency, count(*) AS writes, sum(c.cache_write_tokens) AS write_tokens,
                       coalesce(sum(c.cache_write_micros), 0) AS write_micros
                FROM fc c WHERE {rollup.JUDGED_WRITE} AND c.cache_expires_at >= $now
                     AND NOT EXISTS (SELECT 1 FROM cache_reads r WHERE r.call_id = c.call_id)
                GROUP BY ALL),
            fates AS (
                SELECT 'read' AS fate, currency, writes, write_tokens, write_micros FROM measured WHERE sign = -1
                UNION ALL SELECT 'alive', currency, writes, write_tokens, write_micros FROM unread WHERE NOT expiring
                UNION ALL SELECT 'alive', currency, writes, write_tokens, write_micros FROM still
                UNION ALL SELECT 'wasted', currency, writes, write_tokens, write_micros FROM unread WHERE expiring
                UNION ALL SELECT 'wasted', currency, -writes, -write_tokens, -write_micros FROM still)
            SELECT fate, currency, sum(writes)::BIGINT AS writes, sum(write_tokens)::BIGINT AS write_tokens,
                   sum(write_micros)::BIGINT AS write_micros
            FROM fates GROUP BY ALL HAVING sum(writes) > 0 ORDER BY fate, currency""", {**built.params, "now": now})
    return _q(con, f, f"""
        SELECT CASE WHEN r.call_id IS NOT NULL THEN 'read'
                    WHEN c.cache_expires_at < $now THEN 'wasted' ELSE 'alive' END AS fate,
               c.currency, count(*) AS writes, sum(c.cache_write_tokens)::BIGINT AS write_tokens,
               coalesce(sum(c.cache_write_micros), 0)::BIGINT AS write_micros
        FROM fc c LEFT JOIN cache_reads r USING (call_id)
        WHERE {rollup.JUDGED_WRITE}
        GROUP BY ALL ORDER BY fate, currency""", {"now": now})


def known_reads(con: duckdb.DuckDBPyConnection, call_ids: list[str]) -> pl.DataFrame:
    """Which of these cache writes are already known to have been read. (A semi-join on the ids, not
    `list_contains`, which compared every stored read with every id: reads x ids.)"""
    return _frame(con, f"SELECT call_id FROM cache_reads WHERE {_among('call_id', 'ids')}", {"ids": call_ids})


def call_verdicts(con: duckdb.DuckDBPyConnection, call_ids: list[str]) -> pl.DataFrame:
    """The verdict of each of these calls, the region and diff behind a changed prefix, the entry it
    read or could have read, and what its miss or write cost. (The prefixes are narrowed to the same
    calls before the join: else DuckDB builds its hash table from every stored prefix, 0.9 s at 10M calls.)"""
    return _frame(con, """
        SELECT c.call_id, c.cache_verdict AS verdict, c.cache_region AS region, p.diff,
               c.cache_entry_call_id AS entry_call_id, c.cache_miss_micros AS miss_micros,
               c.cache_write_micros AS write_micros, p.lineage
        FROM calls c LEFT JOIN (SELECT * FROM call_prefixes WHERE list_contains($ids, call_id)) p USING (call_id)
        WHERE list_contains($ids, c.call_id)""",
                  {"ids": call_ids})


def run_turn_events(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> pl.DataFrame:
    """The `agent.turn` events of these runs, in order, with their attributes as recorded (JSON)."""
    return _frame(con, """
        SELECT e.run_id, e.time, e.span_id, e.seq, e.attributes FROM span_events e
        WHERE e.name = 'agent.turn' AND list_contains($ids, e.run_id) ORDER BY e.time, e.span_id, e.seq""",
                  {"ids": run_ids})


def costs_list(currency: str, micros: str) -> str:
    """An aggregate of amounts `micros`, each already summed in one `currency` (a row per group and
    currency), into a list of {currency, cost_micros} in currency order (null: nothing priced)."""
    return (f"list(struct_pack(currency := {currency}, cost_micros := {micros}) ORDER BY {currency}) "
            f"FILTER (WHERE {micros} IS NOT NULL)")


def compaction_costs(rows: str, micros: str, currency: str, where: str = "true") -> str:
    """A query of the money `micros` of compactions `rows` (those `where` picks) per its `currency`
    (stored with it: the call it was paid on, migration 0021; a compaction without one, dollars, as
    the page said before), a list of {currency, cost_micros} (null: nothing priced): never one sum of two."""
    return f"""
        SELECT {costs_list("currency", "cost_micros")}
        FROM (SELECT coalesce({currency}, 'USD') AS currency, sum({micros})::BIGINT AS cost_micros FROM {rows}
              WHERE {micros} IS NOT NULL AND {where} GROUP BY ALL)"""


def compaction_sources(con: duckdb.DuckDBPyConnection, f: Filters, raw: bool = False) -> pl.DataFrame:
    """Reported and inferred compactions side by side: how many, the tokens each took out of every
    later call of its run until the run's next one (`saved_tokens`), and what the summaries and the
    cache writes they forced cost. Each compaction's later calls are read from their rollup
    (`rollup.REACH`) when it counts every compaction, unless `raw`: the same figures."""
    marked = """
        , marked AS (
            SELECT x.*, coalesce(x.source, 'reported') AS src
            FROM fx x WHERE x.outcome IS NOT DISTINCT FROM 'ok' OR x.source = 'inferred'),
        -- their money per source and currencies, in one more read: each source's per currency from it
          money AS (
            SELECT src, summary_currency, recache_currency, sum(cost_micros) AS cost_micros,
                   sum(recache_cost_micros) AS recache_cost_micros
            FROM marked GROUP BY ALL)"""
    totals = f"""
        SELECT m.src AS source, count(*) AS compactions,
               count(*) FILTER (WHERE m.detected) AS seen_in_traffic,
               coalesce(sum(m.tokens_before - m.tokens_after), 0)::BIGINT AS tokens_removed,
               {{saved}} AS saved_tokens,
               ({compaction_costs("money", "cost_micros", "summary_currency", "src = m.src")}) AS summary_costs,
               coalesce(sum(m.recache_write_tokens), 0)::BIGINT AS recache_write_tokens,
               ({compaction_costs("money", "recache_cost_micros", "recache_currency", "src = m.src")}) AS recache_costs
        FROM marked m {{join}} GROUP BY m.src ORDER BY m.src DESC"""
    if not raw and scoped(con, f, "reach_whole", lambda: rollup.whole(con, rollup.REACH)):
        # the tokens saved summed over the compactions' rollup rows in one join (a product summed
        # row by row is the product of the summed later calls), apart from the counts of compactions
        return _q(con, f, marked + f"""
            , saved AS (
                SELECT m.src, sum((m.tokens_before - m.tokens_after) * r.later_calls) AS saved_tokens
                FROM marked m JOIN {rollup.REACH.table} r USING (compaction_id) GROUP BY m.src)
            """ + totals.format(saved="coalesce(any_value(s.saved_tokens), 0)::BIGINT",
                                join="LEFT JOIN saved s USING (src)"))
    # counts the joined run ids (never null), so no call id is read or carried
    return _q(con, f, marked + f"""
        , following AS (
            SELECT m.compaction_id, count(c.run_id) AS later_calls
            FROM ({rollup.marked("x.run_id IN (SELECT run_id FROM marked)")}) m
            LEFT JOIN calls c ON {rollup.LATER} WHERE m.marked GROUP BY m.compaction_id)
        """ + totals.format(saved="coalesce(sum((m.tokens_before - m.tokens_after) * coalesce(f.later_calls, 0)), 0)"
                                  "::BIGINT", join="LEFT JOIN following f USING (compaction_id)"))
