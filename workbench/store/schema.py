"""The store's schema as numbered, named, forward-only migrations, each applied in its own
transaction and recorded in `schema_version`. Request and response bodies live in `call_bodies`,
out of the hot aggregate tables, so ingestion and dashboards stay fast."""

from __future__ import annotations

import contextlib
from datetime import datetime, timezone

import duckdb

from workbench.errors import WorkbenchError
from workbench.store import lake, rollup

_CALL_COLUMNS = """
    call_id VARCHAR PRIMARY KEY,
    run_id VARCHAR,                -- the innermost run the call was made in (null: outside any run)
    trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR,
    response_id VARCHAR,           -- the provider's id of the response
    request_id VARCHAR,            -- the provider's request-id header
    wire VARCHAR, provider VARCHAR, url VARCHAR, method VARCHAR,
    model_requested VARCHAR, model_served VARCHAR, stream BOOLEAN,
    http_status INTEGER, stop_reason VARCHAR, error_type VARCHAR, error_message VARCHAR,
    settled BOOLEAN,               -- the provider reported usage; false: started, never reported
    replayed BOOLEAN, cassette VARCHAR, refusal VARCHAR,
    tool_call_count INTEGER, tool_names VARCHAR[],
    input_tokens BIGINT,           -- uncached input only
    cache_read_tokens BIGINT, cache_write_tokens BIGINT,
    output_tokens BIGINT,          -- reasoning included
    reasoning_tokens BIGINT,       -- informative, inside output_tokens
    cache_write_1h_tokens BIGINT,  -- informative, inside cache_write_tokens
    cost_micros BIGINT,            -- exact, micro-minor units; null: unpriced
    currency VARCHAR, price_source VARCHAR, provider_cost VARCHAR,
    started_at TIMESTAMPTZ, first_byte_at TIMESTAMPTZ, ended_at TIMESTAMPTZ,
    request_hash VARCHAR, prompt_id VARCHAR, prompt_version VARCHAR, prompt_hash VARCHAR
"""

_RUN_COLUMNS = """
    run_id VARCHAR PRIMARY KEY,
    parent_run_id VARCHAR, name VARCHAR,
    kind VARCHAR,                  -- app, agent, llm, eval_case, ...
    status VARCHAR,                -- ok, failed, running
    error_code VARCHAR, error_type VARCHAR, error_message VARCHAR,
    started_at TIMESTAMPTZ, ended_at TIMESTAMPTZ,
    tags VARCHAR,                  -- JSON object; filterable copy in run_tags
    trace_id VARCHAR, span_id VARCHAR,
    prompt_id VARCHAR, prompt_version VARCHAR, prompt_hash VARCHAR,
    -- the bill: usage summed over every call that answered, in this run and the runs inside it
    billed_input_tokens BIGINT, billed_cache_read_tokens BIGINT, billed_cache_write_tokens BIGINT,
    billed_output_tokens BIGINT, billed_reasoning_tokens BIGINT,
    billed_cost_micros BIGINT,     -- exact; rounded up to the minor unit only when read
    billed_unpriced_calls INTEGER, -- answered calls no model row priced (their cost is not in the sum)
    billed_calls INTEGER,          -- calls that answered with usage (live ones: see 0004)
    billed_unsettled INTEGER       -- calls started that never reported usage: counted, not estimated
"""

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_initial",
        f"""
        CREATE TABLE calls ({_CALL_COLUMNS});
        -- bodies out of the hot table: redacted, size-capped with a marker
        CREATE TABLE call_bodies (call_id VARCHAR PRIMARY KEY, request_json VARCHAR, response_json VARCHAR,
            output_text VARCHAR, tool_calls VARCHAR);
        CREATE TABLE runs ({_RUN_COLUMNS});
        CREATE TABLE run_tags (run_id VARCHAR, key VARCHAR, value VARCHAR, PRIMARY KEY (run_id, key));
        CREATE TABLE spans (
            span_id VARCHAR PRIMARY KEY, trace_id VARCHAR, parent_span_id VARCHAR, name VARCHAR,
            kind VARCHAR, run_id VARCHAR, start_time TIMESTAMPTZ, end_time TIMESTAMPTZ,
            status_code VARCHAR, status_message VARCHAR, attributes VARCHAR);
        CREATE TABLE span_events (
            span_id VARCHAR, seq INTEGER, trace_id VARCHAR, run_id VARCHAR, name VARCHAR,
            time TIMESTAMPTZ, attributes VARCHAR, PRIMARY KEY (span_id, seq));
        -- one row per context compaction (runtime's agent.compact events and apps' own)
        CREATE TABLE compactions (
            compaction_id VARCHAR PRIMARY KEY, run_id VARCHAR, span_id VARCHAR, occurred_at TIMESTAMPTZ,
            turn INTEGER, outcome VARCHAR, tokens_before BIGINT, tokens_after BIGINT, limit_tokens BIGINT,
            summarised_turns INTEGER, kept_turns INTEGER, model VARCHAR, cost_micros BIGINT);
        CREATE TABLE prompts (
            prompt_hash VARCHAR PRIMARY KEY, prompt_id VARCHAR, version VARCHAR, body VARCHAR,
            first_seen TIMESTAMPTZ);
        -- the model rows calls were priced by, as they were then
        CREATE TABLE models (
            price_source VARCHAR PRIMARY KEY, id VARCHAR, provider VARCHAR, spec VARCHAR);
        -- how far each spool file has been ingested, updated in the same transaction as its rows
        CREATE TABLE spool_offsets (file VARCHAR PRIMARY KEY, "offset" BIGINT);
        CREATE INDEX calls_run ON calls (run_id);
        """,
    ),
    (
        "0002_evals",
        """
        -- one row per `workbench eval` of one suite
        CREATE TABLE eval_runs (
            eval_run_id VARCHAR PRIMARY KEY, suite VARCHAR, prompt_id VARCHAR, prompt_version VARCHAR,
            prompt_hash VARCHAR, model VARCHAR,
            mode VARCHAR,              -- replay, record, rerecord, live
            git_commit VARCHAR, started_at TIMESTAMPTZ, ended_at TIMESTAMPTZ,
            mean_score DOUBLE, baseline_mean DOUBLE, tolerance DOUBLE,
            verdict VARCHAR,           -- pass, regression, error, recorded (a baseline was written)
            error_code VARCHAR, cases INTEGER, failed_cases INTEGER,
            cost_micros BIGINT);       -- exact cost of every call the run made, judges included
        -- one row per case of an eval run
        CREATE TABLE eval_results (
            eval_run_id VARCHAR, case_id VARCHAR, run_id VARCHAR, score DOUBLE, baseline_score DOUBLE,
            delta DOUBLE, passed BOOLEAN, cost_micros BIGINT, baseline_cost_micros BIGINT,
            output VARCHAR, scores VARCHAR, error VARCHAR, PRIMARY KEY (eval_run_id, case_id));
        """,
    ),
    (
        "0003_runtime_checkpoints_and_cache_hits",
        """
        -- an agent run's state at each turn boundary (Agent.resume reads the last one)
        CREATE TABLE checkpoints (
            checkpoint_id VARCHAR PRIMARY KEY, run_id VARCHAR, agent VARCHAR,
            turn INTEGER,              -- turns used so far, every earlier run of the conversation included
            created_at TIMESTAMPTZ, model VARCHAR, prompt_id VARCHAR, prompt_version VARCHAR, prompt_hash VARCHAR,
            -- JSON: conversation, tool results, bill, ledger, compaction state. A full state, or (so a long
            -- run's checkpoints grow linearly, not quadratically) the turns added since the one before
            full_state BOOLEAN, state VARCHAR);
        CREATE INDEX checkpoints_run ON checkpoints (run_id);
        -- one row per model call the gateway's response cache answered: nothing was sent or paid
        CREATE TABLE response_cache_hits (
            hit_id VARCHAR PRIMARY KEY, run_id VARCHAR, occurred_at TIMESTAMPTZ, model VARCHAR,
            provider VARCHAR, prompt_id VARCHAR, prompt_version VARCHAR, prompt_hash VARCHAR,
            call_id VARCHAR,           -- the paid call whose answer was served again
            input_tokens BIGINT, cache_read_tokens BIGINT, cache_write_tokens BIGINT, output_tokens BIGINT,
            saved_cost_micros BIGINT,  -- what the served call cost when it was paid; null: unpriced
            currency VARCHAR);
        """,
    ),
    (
        "0004_recorder_quarantine",
        """
        -- records the store could not take (not JSON, an unknown kind, a value out of its column's
        -- range, a missing key), kept with the reason instead of blocking the records behind them
        CREATE TABLE quarantine (
            quarantine_id VARCHAR PRIMARY KEY,  -- spool file and byte offset of the line
            spool_file VARCHAR, line_offset BIGINT,
            kind VARCHAR,                       -- the record's kind, when it had one
            reason VARCHAR, record VARCHAR,     -- the line as spooled (redacted), capped at 64 KB
            quarantined_at TIMESTAMPTZ);
        """,
    ),
    (
        "0005_ledger_price_scale",
        """
        -- `scale` now counts decimal places of the major unit, as the reference runtimes do ({minor: 75,
        -- scale: 3} is $0.075); the recorded rows counted places below the minor unit (cents)
        UPDATE models SET spec = json_merge_patch(spec, json_object('scale',
            coalesce(TRY_CAST(json_extract(spec, '$.scale') AS INTEGER), 0)
            + CASE WHEN coalesce(json_extract_string(spec, '$.currency'), 'USD') IN ('JPY', 'KRW') THEN 0 ELSE 2 END))
        WHERE json_valid(spec);
        """,
    ),
    (
        "0006_ledger_replayed_apart",
        """
        -- a bill counts money that was paid: replayed calls are kept apart, with what they would have cost
        ALTER TABLE runs ADD COLUMN billed_replayed_calls INTEGER;        -- answered from a cassette
        ALTER TABLE runs ADD COLUMN billed_replayed_cost_micros BIGINT;   -- what those would have cost, exact
        ALTER TABLE runs ADD COLUMN billed_replayed_unpriced_calls INTEGER;
        UPDATE runs SET billed_replayed_calls = 0, billed_replayed_cost_micros = 0, billed_replayed_unpriced_calls = 0
        WHERE billed_calls IS NOT NULL;
        -- bills written before counted replayed calls as paid: take them out again, from the calls recorded
        UPDATE runs SET
            billed_calls = runs.billed_calls - x.calls,
            billed_input_tokens = runs.billed_input_tokens - x.input_tokens,
            billed_cache_read_tokens = runs.billed_cache_read_tokens - x.cache_read_tokens,
            billed_cache_write_tokens = runs.billed_cache_write_tokens - x.cache_write_tokens,
            billed_output_tokens = runs.billed_output_tokens - x.output_tokens,
            billed_reasoning_tokens = runs.billed_reasoning_tokens - x.reasoning_tokens,
            billed_cost_micros = runs.billed_cost_micros - x.cost_micros,
            billed_unpriced_calls = runs.billed_unpriced_calls - x.unpriced_calls,
            billed_replayed_calls = x.calls, billed_replayed_cost_micros = x.cost_micros,
            billed_replayed_unpriced_calls = x.unpriced_calls
        FROM (
            WITH RECURSIVE inside(run_id, bill, depth) AS (
                SELECT run_id, run_id, 0 FROM runs
                UNION ALL SELECT r.run_id, i.bill, i.depth + 1 FROM runs r JOIN inside i ON r.parent_run_id = i.run_id
                WHERE i.depth < 50)
            SELECT i.bill, count(*) AS calls, coalesce(sum(c.input_tokens), 0) AS input_tokens,
                   coalesce(sum(c.cache_read_tokens), 0) AS cache_read_tokens,
                   coalesce(sum(c.cache_write_tokens), 0) AS cache_write_tokens,
                   coalesce(sum(c.output_tokens), 0) AS output_tokens,
                   coalesce(sum(c.reasoning_tokens), 0) AS reasoning_tokens,
                   coalesce(sum(c.cost_micros), 0) AS cost_micros, count(*) FILTER (WHERE c.cost_micros IS NULL) AS unpriced_calls
            FROM inside i JOIN calls c ON c.run_id = i.run_id WHERE c.replayed AND c.settled GROUP BY i.bill) x
        WHERE runs.run_id = x.bill AND runs.billed_calls IS NOT NULL;
        """,
    ),
    (
        "0007_insight_cache_verdicts",
        """
        -- insight (workbench/insight) judges every call's prompt-cache use once, at ingest
        ALTER TABLE calls ADD COLUMN cache_verdict VARCHAR;    -- hit, cold, expired, prefix_changed,
                                                               -- below_minimum, not_requested, unexplained; null: not judged
        ALTER TABLE calls ADD COLUMN cache_region VARCHAR;     -- prefix_changed: the first region that changed
        ALTER TABLE calls ADD COLUMN cache_miss_micros BIGINT; -- a miss: paid minus what a hit on its prefix pays
        ALTER TABLE calls ADD COLUMN cache_entry_call_id VARCHAR; -- the earlier call whose cache entry this call
                                                               -- read (a hit) or could have read (a miss)
        ALTER TABLE calls ADD COLUMN cache_write_micros BIGINT;  -- what this call's cache write cost
        ALTER TABLE calls ADD COLUMN cache_expires_at TIMESTAMPTZ; -- a write: when it expires unless read
        -- each call's cacheable prefix as block-level hashes (workbench/insight/prefix.py)
        CREATE TABLE call_prefixes (
            call_id VARCHAR PRIMARY KEY,
            lineage VARCHAR,           -- provider, model and cache scope: the calls one cache can serve
            session VARCHAR,           -- a replay: the cassette session it was replayed in
            scope VARCHAR,             -- prompt_cache_key, when sent
            clock_at TIMESTAMPTZ,      -- the provider's clock (its Date header, recorded ones on replay), else the start
            blocks BIGINT[], sizes INTEGER[], kinds VARCHAR, marks INTEGER[],
            lead INTEGER,              -- regions before the conversation: tools, system blocks
            base INTEGER,              -- the region of the request's first message
            explicit BOOLEAN,          -- the provider caches only what is marked
            ttl_s INTEGER,             -- the life a cache entry of this call gets
            keys BIGINT[],             -- prefix hashes of the entries this call left: found again later, they expired
            diff VARCHAR);             -- prefix_changed: a short diff of the region that changed
        -- the cache writes a later call read (a write never read before its end of life was wasted)
        CREATE TABLE cache_reads (call_id VARCHAR PRIMARY KEY, first_read_at TIMESTAMPTZ, read_by VARCHAR);
        ALTER TABLE compactions ADD COLUMN source VARCHAR;     -- reported (an agent.compact event) or inferred
        ALTER TABLE compactions ADD COLUMN detected BOOLEAN;   -- the traffic shows it (always, for an inferred one)
        ALTER TABLE compactions ADD COLUMN before_call_id VARCHAR;  -- the last call before the history shrank
        ALTER TABLE compactions ADD COLUMN after_call_id VARCHAR;   -- the first call after
        ALTER TABLE compactions ADD COLUMN summary_call_id VARCHAR; -- the call that wrote the summary
        ALTER TABLE compactions ADD COLUMN recache_write_tokens BIGINT; -- cache writes the new prefix forced
        ALTER TABLE compactions ADD COLUMN recache_cost_micros BIGINT;
        """,
    ),
    (
        "0008_gate_eval_samples",
        """
        -- repeated trials: how many samples each case of an eval run took, and how they spread
        ALTER TABLE eval_runs ADD COLUMN epochs INTEGER;          -- samples per case
        ALTER TABLE eval_runs ADD COLUMN spread DOUBLE;           -- std. deviation of the per-epoch means
        ALTER TABLE eval_runs ADD COLUMN confidence DOUBLE;       -- the gate's confidence that a drop is not noise
        ALTER TABLE eval_runs ADD COLUMN errored_cases INTEGER;   -- cases that ended in an error (never scored)
        -- the `workbench eval compare` it is a cell of (its verdict: compared)
        ALTER TABLE eval_runs ADD COLUMN matrix_id VARCHAR;
        ALTER TABLE eval_runs ADD COLUMN matrix_reference BOOLEAN; -- the cell the others were compared with
        ALTER TABLE eval_results ADD COLUMN samples INTEGER;
        ALTER TABLE eval_results ADD COLUMN spread DOUBLE;        -- std. deviation of the case's samples
        ALTER TABLE eval_results ADD COLUMN p_value DOUBLE;       -- the chance its drop is noise (one-sided Welch)
        -- one row per sample (epoch) of a case: every sample is kept
        CREATE TABLE eval_samples (
            eval_run_id VARCHAR, case_id VARCHAR, epoch INTEGER, run_id VARCHAR,
            score DOUBLE,              -- null: the sample ended in an error (never scored 0)
            cost_micros BIGINT,
            latency_ms DOUBLE,         -- the target's wall time
            live BOOLEAN,              -- a request went to the network: the latency is the provider's
            output VARCHAR, scores VARCHAR, error VARCHAR, PRIMARY KEY (eval_run_id, case_id, epoch));
        """,
    ),
    (
        "0009_resume_links",
        """
        -- `workbench.run(name, resume=RUN_ID)`: a call answered from the store instead of the provider
        -- names the call that paid for the answer (replayed is true, cassette is `run <id>`)
        ALTER TABLE calls ADD COLUMN resumed_from_call_id VARCHAR;
        ALTER TABLE runs ADD COLUMN resumed_from_run_id VARCHAR;  -- the earlier run this one resumed
        -- the lock file (its path) its process holds while it lives: a `running` run whose lock is free was killed
        ALTER TABLE runs ADD COLUMN process_lock VARCHAR;
        """,
    ),
    (
        "0010_dashspeed_span_lookups",
        """
        -- the run explorer reads a run's spans by run and by trace: index lookups, not a scan of every span
        CREATE INDEX IF NOT EXISTS spans_run ON spans (run_id);
        CREATE INDEX IF NOT EXISTS spans_trace ON spans (trace_id);
        """,
    ),
    (
        "0011_rollup_daily_calls",
        # the calls summed per UTC day and filter value, kept with every write of calls
        # (workbench/store/rollup.py); filled here from the calls already stored
        f"{rollup.TABLE_SQL}\nINSERT INTO call_rollup {rollup.aggregate('calls')};",
    ),
    (
        "0012_ingest3_carried_cache_state",
        """
        -- the prefix hashes of the cache entries a call made anew (not renewed): an entry dead long
        -- ago is named by the call that made it, whatever the batches its traffic came in
        ALTER TABLE call_prefixes ADD COLUMN written BIGINT[];
        -- each lineage's cache state after its latest batch, written in the batch's transaction:
        -- the next batch is judged from it instead of replaying the stored calls before it
        CREATE TABLE insight_lineages (
            lineage VARCHAR PRIMARY KEY,
            version VARCHAR,           -- new at every write: a process keeps the state it wrote in memory
            last_clock BIGINT, last_started BIGINT, last_call_id VARCHAR,  -- the latest call judged (µs)
            ttl_us BIGINT,             -- the longest entry life among its calls
            entries VARCHAR);          -- JSON: [prefix hash, alive until µs, the call that made it] each
        """,
    ),
    (
        "0013_dash10m_run_rollup",
        # the calls summed per run, UTC day and filter value, kept with every write of calls
        # (workbench/store/rollup.py `RUNS`); filled here from the calls already stored
        f"{rollup.RUNS.table_sql}\nINSERT INTO call_run_rollup {rollup.RUNS.aggregate('calls')};",
    ),
    (
        "0014_dash12_latency_rollups",
        # the live calls' latencies counted per UTC month, filter value and log-spaced bucket, kept
        # with every write of calls (workbench/store/rollup.py `TTFB`, `DURATION`); filled here
        "\n".join(f"{spec.table_sql}\nINSERT INTO {spec.table} {spec.aggregate('calls')};"
                  for spec in (rollup.TTFB, rollup.DURATION)),
    ),
    (
        "0015_dash13_cache_write_and_compaction_rollups",
        # the judged cache writes, and those a later hit read, per UTC day, filter value and
        # currency (the prompt cache page's write fates), and each compaction's later calls (the
        # compaction page's saved tokens), kept with every write of calls, cache reads and
        # compactions (workbench/store/rollup.py `WRITES`, `READS`, `REACH`); filled here from what is stored
        "\n".join(f"{spec.table_sql}\nINSERT INTO {spec.table} {spec.aggregate(spec.source)};"
                  for spec in (rollup.WRITES, rollup.READS, rollup.REACH)),
    ),
    (
        "0016_dashfilt_run_rollup_cube",
        # the per-run rollup keyed by currency too and carrying the spend cube's measures, so a run
        # name or tag filter sums it instead of every call (workbench/store/rollup.py `RUNS`): made
        # again from the calls stored
        f"DROP TABLE call_run_rollup;\n{rollup.RUNS.table_sql}\n"
        f"INSERT INTO call_run_rollup {rollup.RUNS.aggregate('calls')};",
    ),
    (
        "0017_dash14_prefix_change_rollup",
        # the calls judged `prefix_changed` per UTC day, filter value and region, kept with every
        # write of calls (workbench/store/rollup.py `CHANGES`); filled here from the calls stored
        f"{rollup.CHANGES.table_sql}\nINSERT INTO {rollup.CHANGES.table} {rollup.CHANGES.aggregate('calls')};",
    ),
    (
        "0018_cachetag_cache_run_rollups",
        # per run, UTC day, filter value and currency: the settled calls' cache use per price row, the
        # judged cache writes and those a later hit read, kept with every write of calls and cache reads
        # (workbench/store/rollup.py `CACHE_RUNS`, `RUN_WRITES`, `RUN_READS`): the prompt cache page's
        # savings and write fates under a run name or tag sum them; filled here from what is stored
        "\n".join(f"{spec.table_sql}\nINSERT INTO {spec.table} {spec.aggregate(spec.source)};"
                  for spec in (rollup.CACHE_RUNS, rollup.RUN_WRITES, rollup.RUN_READS)),
    ),
    (
        "0019_currency_run_bills",
        """
        -- a bill never adds two currencies: its money fields are in its main currency (its first priced
        -- call's), and the money of every other currency its calls were priced in is kept apart
        ALTER TABLE runs ADD COLUMN billed_currency VARCHAR;
        -- JSON {currency: {cost_micros, calls, replayed_cost_micros, replayed_calls}} (calls: those priced
        -- in it); null: none
        ALTER TABLE runs ADD COLUMN billed_other_currencies VARCHAR;
        -- bills written before named no currency, and summed every currency into one figure: named and
        -- split again from the calls recorded (a bill of one currency keeps its figures)
        UPDATE runs SET billed_currency = x.main,
            billed_cost_micros = CASE WHEN x.currencies > 1 THEN x.cost_micros ELSE runs.billed_cost_micros END,
            billed_replayed_cost_micros = CASE WHEN x.currencies > 1 THEN x.replayed_cost_micros
                                               ELSE runs.billed_replayed_cost_micros END,
            billed_other_currencies = x.others
        FROM (
            WITH RECURSIVE inside(run_id, bill, depth) AS (
                SELECT run_id, run_id, 0 FROM runs
                UNION ALL SELECT r.run_id, i.bill, i.depth + 1 FROM runs r JOIN inside i ON r.parent_run_id = i.run_id
                WHERE i.depth < 50),
            priced AS (
                SELECT i.bill, coalesce(c.currency, 'USD') AS currency, coalesce(c.replayed, false) AS replayed,
                       c.cost_micros, c.started_at, c.call_id
                FROM inside i JOIN calls c ON c.run_id = i.run_id WHERE c.settled AND c.cost_micros IS NOT NULL),
            main AS (SELECT bill, arg_min(currency, (started_at, call_id)) AS main FROM priced GROUP BY bill),
            per AS (
                SELECT bill, currency, coalesce(sum(cost_micros) FILTER (WHERE NOT replayed), 0) AS cost_micros,
                       count(*) FILTER (WHERE NOT replayed) AS calls,
                       coalesce(sum(cost_micros) FILTER (WHERE replayed), 0) AS replayed_cost_micros,
                       count(*) FILTER (WHERE replayed) AS replayed_calls
                FROM priced GROUP BY bill, currency),
            others AS (
                SELECT p.bill, json_group_object(p.currency, json_object(
                           'calls', p.calls, 'cost_micros', p.cost_micros, 'replayed_calls', p.replayed_calls,
                           'replayed_cost_micros', p.replayed_cost_micros))::VARCHAR AS others
                FROM per p JOIN main m USING (bill) WHERE p.currency <> m.main GROUP BY p.bill)
            SELECT m.bill, m.main, count(*) AS currencies,
                   coalesce(sum(p.cost_micros) FILTER (WHERE p.currency = m.main), 0) AS cost_micros,
                   coalesce(sum(p.replayed_cost_micros) FILTER (WHERE p.currency = m.main), 0) AS replayed_cost_micros,
                   any_value(o.others) AS others
            FROM main m JOIN per p USING (bill) LEFT JOIN others o USING (bill) GROUP BY m.bill, m.main) x
        WHERE runs.run_id = x.bill AND runs.billed_calls IS NOT NULL;
        """,
    ),
    (
        "0020_evalcur_eval_costs",
        """
        -- an eval's cost never adds two currencies nor takes an unpriced call as free: cost_micros is
        -- the one exact figure, in `currency`; null when a call was unpriced or calls were priced in two
        -- currencies, and then `costs` (JSON {currency: micros}) holds each currency's priced money and
        -- `unpriced_calls` the calls nothing priced. Rows written before name no currency (null)
        ALTER TABLE eval_runs ADD COLUMN currency VARCHAR;
        ALTER TABLE eval_runs ADD COLUMN costs VARCHAR;
        ALTER TABLE eval_runs ADD COLUMN unpriced_calls INTEGER;
        ALTER TABLE eval_results ADD COLUMN currency VARCHAR;
        ALTER TABLE eval_results ADD COLUMN costs VARCHAR;
        ALTER TABLE eval_results ADD COLUMN unpriced_calls INTEGER;
        ALTER TABLE eval_samples ADD COLUMN currency VARCHAR;
        ALTER TABLE eval_samples ADD COLUMN costs VARCHAR;
        ALTER TABLE eval_samples ADD COLUMN unpriced_calls INTEGER;
        """,
    ),
    (
        "0021_dashregress_compaction_currencies",
        """
        -- the currency of a compaction's money, written with it: `cost_micros` the summary call's, the
        -- re-caching the call after it's (null: no such call recorded; dollars, as the page said then).
        -- The Compaction page reads them instead of joining every call
        ALTER TABLE compactions ADD COLUMN summary_currency VARCHAR;
        ALTER TABLE compactions ADD COLUMN recache_currency VARCHAR;
        UPDATE compactions SET summary_currency = c.currency FROM calls c WHERE c.call_id = compactions.summary_call_id;
        UPDATE compactions SET recache_currency = c.currency FROM calls c
            WHERE c.call_id = compactions.after_call_id AND compactions.recache_cost_micros IS NOT NULL;
        """,
    ),
    (
        "0022_ingmem3_no_trace_index",
        """
        -- the spans' index by trace (0010) goes: trace ids are random, so every commit loaded all of it
        -- into the ingester's memory (~130 B a case, growing with the store), for the run explorer's
        -- one lookup of a trace, which a scan of the trace column answers in milliseconds
        DROP INDEX IF EXISTS spans_trace;
        """,
    ),
]


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
    ).fetchall()[0][0]
    if not exists:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchall()[0][0]


def migrate(con: duckdb.DuckDBPyConnection, target: int | None = None) -> int:
    """Apply every migration after the store's version (up to `target`); returns the new version.
    On a lake, in the SQL it takes, each migration claiming the lake's write token (two processes
    migrating at once: one conflicts, and retries on the version the other reached)."""
    on_lake = lake.is_lake_connection(con)
    adapted = lake.migration_sql if on_lake else (lambda sql: sql)
    con.execute(adapted(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMPTZ)"
    ))
    version = current_version(con)
    if version > len(MIGRATIONS):
        raise WorkbenchError(
            "WB_STORE_INVALID",
            f"the store is at schema version {version}; this Workbench knows up to {len(MIGRATIONS)}",
            "upgrade replay-workbench, or point WORKBENCH_DB at another store",
        )
    for number, (name, sql) in enumerate(MIGRATIONS[version:target], start=version + 1):
        con.execute("BEGIN TRANSACTION")
        if on_lake and current_version(con) >= number:  # another machine applied it since we looked
            con.execute("ROLLBACK")
            version = number
            continue
        try:
            if on_lake:
                lake.claim_write(con)
            con.execute(adapted(sql))
            con.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?)", [number, name, datetime.now(timezone.utc)]
            )
            con.execute("COMMIT")
        except Exception:
            with contextlib.suppress(duckdb.Error):  # a failed COMMIT (a lake's conflict) ended it already
                con.execute("ROLLBACK")
            raise  # the conflict itself, which the lake's `retrying` recognizes
        version = number
    return version
