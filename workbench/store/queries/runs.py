"""Compaction, Evals and the Run explorer: the queries about runs and what they did."""

from __future__ import annotations

from datetime import date, datetime, time, timezone

import duckdb
import polars as pl

from workbench.errors import WorkbenchError
from workbench.store.queries._base import Filters, _Sql, _frame, _q
from workbench.store.queries.insight import compaction_costs, costs_list
from workbench.store.queries.spend import RUN_MONEY, bills, unknown_when_unpriced

# -- Compaction ----------------------------------------------------------------------------------


def compaction_totals(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    return _q(con, f, """
        SELECT count(*) AS events, count(*) FILTER (WHERE x.outcome IS DISTINCT FROM 'ok') AS failed,
               count(DISTINCT x.run_id) AS runs,
               coalesce(sum(x.tokens_before), 0)::BIGINT AS tokens_before,
               coalesce(sum(x.tokens_after), 0)::BIGINT AS tokens_after,
               coalesce(sum(x.summarised_turns), 0)::BIGINT AS summarised_turns,
               coalesce(sum(x.kept_turns), 0)::BIGINT AS kept_turns,
               count(*) FILTER (WHERE x.cost_micros IS NULL) AS unpriced,
               -- the summaries' cost per currency their calls were priced in, never one sum of two
               -- (`summary_currency`, stored with the compaction: see `insight.compaction_costs`)
               ({costs}) AS costs
        FROM fx x""".format(costs=compaction_costs("fx", "cost_micros", "summary_currency")))


def compactions_by_day(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """Compactions per UTC day and outcome; the summaries' money per currency (`costs`, as
    `compaction_totals` gives it: a compaction without a currency in dollars), never one sum of two."""
    # one read grouped per currency too, then regrouped: `compaction_costs` per day and outcome read
    # the grouped rows once per group (231 M instructions against 167 M at 500,000 compactions)
    return _q(con, f, """
        , daily AS (
            SELECT DATE '1970-01-01' + (epoch_us(x.occurred_at) // 86400000000)::INTEGER AS day,
                   coalesce(x.outcome, 'unknown') AS outcome, coalesce(x.summary_currency, 'USD') AS currency,
                   count(*) AS events, sum(x.tokens_before) AS tokens_before,
                   sum(x.tokens_after) AS tokens_after, sum(x.cost_micros)::BIGINT AS cost_micros
            FROM fx x GROUP BY ALL)
        SELECT day, outcome, sum(events)::BIGINT AS events, coalesce(sum(tokens_before), 0)::BIGINT AS tokens_before,
               coalesce(sum(tokens_after), 0)::BIGINT AS tokens_after, {costs} AS costs
        FROM daily GROUP BY day, outcome ORDER BY day, outcome""".format(costs=costs_list("currency", "cost_micros")))


def compaction_events(con: duckdb.DuckDBPyConnection, f: Filters, failed_only: bool = False,
                      limit: int = 500) -> pl.DataFrame:
    """The latest compactions (or only those whose outcome is not `ok`), with their run's name."""
    where = "WHERE x.outcome IS DISTINCT FROM 'ok'" if failed_only else ""
    # the latest picked before their runs are joined: joined first, every compaction met the runs
    # (212 -> 51 ms of CPU at 500,000 compactions and 1,000,000 runs)
    return _q(con, f, f"""
        , latest AS (SELECT * FROM fx x {where} ORDER BY x.occurred_at DESC, x.compaction_id LIMIT $limit)
        SELECT x.occurred_at, x.run_id, r.name AS run_name, coalesce(x.source, 'reported') AS source, x.turn,
               x.outcome, x.tokens_before, x.tokens_after, x.limit_tokens, x.summarised_turns, x.kept_turns, x.model,
               x.cost_micros, coalesce(x.summary_currency, 'USD') AS currency, x.compaction_id
        FROM latest x LEFT JOIN runs r USING (run_id)
        ORDER BY x.occurred_at DESC, x.compaction_id""", {"limit": limit})


def compaction_top_runs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 20) -> pl.DataFrame:
    """The runs that compacted most, their summaries' money per currency (`summary_costs`, as
    `compaction_costs` gives it: never one sum of two)."""
    # ranked before the runs' names and money are joined, to the few shown (see `compaction_events`):
    # the money per run and currency of every run first cost 500 ms at 500,000 compactions
    return _q(con, f, """
        , top AS (
            SELECT x.run_id, count(*) AS compactions,
                   count(*) FILTER (WHERE x.outcome IS DISTINCT FROM 'ok') AS failed,
                   coalesce(sum(x.tokens_before - x.tokens_after), 0)::BIGINT AS tokens_removed
            FROM fx x WHERE x.run_id IS NOT NULL GROUP BY x.run_id
            ORDER BY compactions DESC, tokens_removed DESC, x.run_id LIMIT $limit)
        , money AS (
            SELECT run_id, list(struct_pack(currency := currency, cost_micros := cost_micros) ORDER BY currency)
                       AS summary_costs
            FROM (SELECT x.run_id, coalesce(x.summary_currency, 'USD') AS currency, sum(x.cost_micros)::BIGINT AS cost_micros
                  FROM fx x WHERE x.run_id IN (SELECT run_id FROM top) AND x.cost_micros IS NOT NULL GROUP BY ALL)
            GROUP BY run_id)
        SELECT t.run_id, r.name AS run_name, t.compactions, t.failed, t.tokens_removed, m.summary_costs
        FROM top t LEFT JOIN money m USING (run_id) LEFT JOIN runs r USING (run_id)
        ORDER BY t.compactions DESC, t.tokens_removed DESC, t.run_id""", {"limit": limit})


def has_tables(con: duckdb.DuckDBPyConnection, *names: str) -> bool:
    found = _frame(con, "SELECT count(DISTINCT table_name) AS n FROM information_schema.tables "
                   "WHERE list_contains($names, table_name)", {"names": list(names)})
    return found["n"][0] == len(names)


def evals_available(con: duckdb.DuckDBPyConnection) -> bool:
    return has_tables(con, "eval_runs", "eval_results")


def _eval_filters(f: Filters, alias: str = "e") -> tuple[list[str], dict]:
    built = _Sql(f)
    preds = built._dates(f"{alias}.started_at")
    for name, values, column in (("prompt_ids", f.prompt_ids, f"{alias}.prompt_id"),
                                 ("prompt_versions", f.prompt_versions, f"{alias}.prompt_version"),
                                 ("models", f.models, f"{alias}.model")):
        if values:
            built.params[name] = list(values)
            preds.append(f"list_contains(${name}, {column})")
    if f.source != "all":
        preds.append(f"{alias}.mode " + ("= 'replay'" if f.source == "replayed" else "IS DISTINCT FROM 'replay'"))
    return preds, built.params


def eval_history(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 2000) -> pl.DataFrame:
    """Gate runs (latest last; not the cells of a `workbench eval compare`) with their verdict,
    scores, samples per case and cost per case. Errored cases are never scored, so never passed."""
    preds, params = _eval_filters(f)
    preds.append("e.matrix_id IS NULL")
    return _frame(con, f"""
        SELECT e.eval_run_id, e.suite, e.prompt_id, e.prompt_version, e.prompt_hash, e.model, e.mode, e.git_commit,
               e.started_at, e.mean_score, e.epochs, e.spread, e.errored_cases, e.baseline_mean, e.verdict, e.cost_micros,
               e.currency, e.costs, e.unpriced_calls, coalesce(k.cases, 0) AS cases, coalesce(k.passed, 0) AS passed,
               CASE WHEN k.cases > 0 THEN (e.cost_micros // k.cases)::BIGINT END AS cost_per_case_micros
        FROM eval_runs e LEFT JOIN (
            SELECT eval_run_id, count(*) AS cases, count(*) FILTER (WHERE passed) AS passed
            FROM eval_results GROUP BY eval_run_id) k USING (eval_run_id)
        WHERE {' AND '.join(preds) or 'true'}
        ORDER BY e.started_at, e.eval_run_id LIMIT $limit""", {**params, "limit": limit})


def eval_cases(con: duckdb.DuckDBPyConnection, eval_run_id: str) -> pl.DataFrame:
    """One eval run's cases, the largest drop first: the mean of each case's samples, their spread
    and count, and an error instead of a score for a case that could not be judged."""
    return _frame(con, """
        SELECT case_id, score, samples, spread, p_value, baseline_score, delta, passed, cost_micros, currency, costs,
               unpriced_calls, error, run_id, output
        FROM eval_results WHERE eval_run_id = $id ORDER BY delta NULLS LAST, case_id""", {"id": eval_run_id})


def eval_matrices(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 200) -> pl.DataFrame:
    """Every `workbench eval compare` (latest first): its suite, cells, versions and models."""
    preds, params = _eval_filters(f)
    return _frame(con, f"""
        SELECT e.matrix_id, any_value(e.suite) AS suite, any_value(e.prompt_id) AS prompt_id, min(e.started_at) AS started_at,
               count(*) AS cells, list(DISTINCT e.prompt_version ORDER BY e.prompt_version) AS versions,
               list(DISTINCT e.model ORDER BY e.model) AS models, max(e.epochs) AS epochs
        FROM eval_runs e WHERE e.matrix_id IS NOT NULL AND {' AND '.join(preds) or 'true'}
        GROUP BY e.matrix_id ORDER BY started_at DESC, e.matrix_id LIMIT $limit""", {**params, "limit": limit})


def eval_matrix(con: duckdb.DuckDBPyConnection, matrix_id: str) -> pl.DataFrame:
    """One matrix, a row per cell (prompt version x model): mean and spread, the cases that moved
    against the reference (past the tolerance and beyond noise, as `workbench eval compare` judged
    them), the cost per case (one sample) and the latency of the samples that reached a provider."""
    return _frame(con, """
        WITH cells AS (
            SELECT e.eval_run_id, e.prompt_version, e.model, e.mode, e.mean_score, e.spread, e.epochs, e.cases,
                   e.errored_cases, e.tolerance, e.confidence, e.started_at, e.matrix_reference
            FROM eval_runs e WHERE e.matrix_id = $matrix_id),
        moved AS (
            SELECT r.eval_run_id,
                   count(*) FILTER (WHERE NOT r.passed) AS worse,
                   count(*) FILTER (WHERE r.delta > c.tolerance AND r.p_value < 1 - c.confidence) AS better,
                   list(r.case_id ORDER BY r.case_id) FILTER (WHERE NOT r.passed) AS worse_cases,
                   list(r.case_id ORDER BY r.case_id)
                       FILTER (WHERE r.delta > c.tolerance AND r.p_value < 1 - c.confidence) AS better_cases
            FROM eval_results r JOIN cells c USING (eval_run_id) GROUP BY r.eval_run_id),
        samples AS (
            SELECT s.eval_run_id, count(*) AS samples,
                   -- one figure in one currency (a sample written before named none: dollars, as then shown)
                   CASE WHEN count(*) = count(s.cost_micros) AND count(DISTINCT coalesce(s.currency, 'USD')) = 1
                        THEN sum(s.cost_micros)::BIGINT END AS cost_micros,
                   CASE WHEN count(DISTINCT coalesce(s.currency, 'USD')) = 1
                        THEN any_value(coalesce(s.currency, 'USD')) END AS currency,
                   count(*) FILTER (WHERE s.live) AS live_samples,
                   median(s.latency_ms) FILTER (WHERE s.live) AS latency_median_ms,
                   -- the 95th percentile by nearest rank, as `workbench eval compare` gives it
                   list_sort(list(s.latency_ms) FILTER (WHERE s.live))[
                       ceil(0.95 * count(*) FILTER (WHERE s.live))::BIGINT] AS latency_p95_ms
            FROM eval_samples s JOIN cells c USING (eval_run_id) GROUP BY s.eval_run_id)
        SELECT c.prompt_version, c.model, coalesce(c.matrix_reference, false) AS reference, c.mean_score, c.spread,
               coalesce(m.worse, 0) AS worse, coalesce(m.better, 0) AS better,
               -- one sample's cost, rounded up (costs are never negative; DuckDB's // truncates)
               CASE WHEN s.samples > 0 THEN ((s.cost_micros + s.samples - 1) // s.samples)::BIGINT END
                   AS cost_per_case_micros,
               s.currency, s.latency_median_ms, s.latency_p95_ms, s.live_samples, s.samples, c.cases, c.errored_cases, c.epochs,
               c.mode, m.worse_cases, m.better_cases, c.eval_run_id
        FROM cells c LEFT JOIN moved m USING (eval_run_id) LEFT JOIN samples s USING (eval_run_id)
        ORDER BY c.started_at, c.eval_run_id""", {"matrix_id": matrix_id})


def eval_matrix_case(con: duckdb.DuckDBPyConnection, matrix_id: str, case_id: str) -> pl.DataFrame:
    """One case in every cell of a matrix: each sample's score and output, side by side."""
    return _frame(con, """
        SELECT e.prompt_version, e.model, coalesce(e.matrix_reference, false) AS reference, s.epoch, s.score,
               r.score AS case_score, r.spread, r.delta, s.output, s.error, e.eval_run_id
        FROM eval_runs e JOIN eval_samples s USING (eval_run_id)
        JOIN eval_results r ON r.eval_run_id = s.eval_run_id AND r.case_id = s.case_id
        WHERE e.matrix_id = $matrix_id AND s.case_id = $case_id
        ORDER BY e.started_at, e.eval_run_id, s.epoch""", {"matrix_id": matrix_id, "case_id": case_id})


def eval_matrix_case_ids(con: duckdb.DuckDBPyConnection, matrix_id: str) -> pl.DataFrame:
    """The cases of a matrix, those that moved in some cell first."""
    return _frame(con, """
        SELECT r.case_id, count(*) FILTER (WHERE NOT r.passed OR r.p_value < 1 - e.confidence) AS moved_in
        FROM eval_results r JOIN eval_runs e USING (eval_run_id) WHERE e.matrix_id = $matrix_id
        GROUP BY r.case_id ORDER BY moved_in DESC, r.case_id""", {"matrix_id": matrix_id})


# -- Run explorer --------------------------------------------------------------------------------


def run_choices(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 300) -> pl.DataFrame:
    """The latest top-level runs, to pick one to explore: a row per run and currency its calls were
    priced in (`bills`), the main currency's first."""
    return unknown_when_unpriced(_q(con, f, f"""
        , latest AS MATERIALIZED (SELECT * FROM fr r WHERE r.parent_run_id IS NULL ORDER BY r.started_at DESC, r.run_id LIMIT $limit),
          bills AS ({bills("latest")})
        SELECT r.run_id, r.name, r.status, r.started_at, {RUN_MONEY}
        FROM bills r ORDER BY r.started_at DESC, r.run_id, r.main DESC, r.currency""",
        {"limit": limit}))


_SUBTREE = """WITH RECURSIVE tree(run_id, depth) AS (
    SELECT run_id, 0 FROM runs WHERE run_id = $run_id
    UNION ALL SELECT r.run_id, t.depth + 1 FROM runs r JOIN tree t ON r.parent_run_id = t.run_id WHERE t.depth < 50)
"""


def run_tree(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """The run and every run inside it, with their depth, bills and tags; empty when the id is unknown."""
    return _frame(con, _SUBTREE + """
        , tags AS (SELECT g.run_id, list(g.key || '=' || g.value ORDER BY g.key) AS tag_list FROM run_tags g
                   WHERE list_contains((SELECT list(run_id) FROM tree), g.run_id) GROUP BY g.run_id)
        SELECT t.depth, r.*, tags.tag_list
        FROM tree t JOIN runs r USING (run_id) LEFT JOIN tags USING (run_id) ORDER BY r.started_at, t.depth""",
                  {"run_id": run_id})


def _subtree_ids(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    return _frame(con, _SUBTREE + "SELECT run_id FROM tree", {"run_id": run_id})["run_id"].to_list()


def run_calls(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """Every call of the run and of the runs inside it, in order, with its bodies. The run ids and
    call ids are looked up as lists (index lookups), never by joining the whole calls table."""
    calls = _frame(con, """
        SELECT c.call_id, c.run_id, c.started_at, c.ended_at, c.wire, c.provider,
               coalesce(c.model_served, c.model_requested) AS model, c.http_status, c.stop_reason, c.error_type,
               c.error_message, c.settled, c.replayed, c.input_tokens, c.cache_read_tokens, c.cache_write_tokens,
               c.output_tokens, c.reasoning_tokens, c.cost_micros, c.currency, c.price_source, c.tool_names,
               c.span_id, c.prompt_id, c.prompt_version, c.resumed_from_call_id
        FROM calls c WHERE list_contains($ids, c.run_id) ORDER BY c.started_at, c.call_id""",
                   {"ids": _subtree_ids(con, run_id)})
    bodies = _frame(con, """
        SELECT call_id, request_json, response_json, output_text, tool_calls FROM call_bodies
        WHERE list_contains($ids, call_id)""", {"ids": calls["call_id"].to_list()})
    return calls.join(bodies, on="call_id", how="left", maintain_order="left")


def resolve_run_id(con: duckdb.DuckDBPyConnection, given: str) -> str:
    """The whole id of the run that `given` names: the id itself, or a start or an end only one run's
    id has (an id starts with the millisecond it was made in, `workbench.ids`: runs made together share
    their first characters, and the random end is what a short id names them by). Several runs:
    `WB_RUN_AMBIGUOUS`, naming them; none: `WB_RUN_NOT_FOUND`."""
    shown = 10
    ids = _frame(con, """SELECT run_id FROM runs WHERE starts_with(run_id, $given) OR ends_with(run_id, $given)
                         ORDER BY run_id = $given DESC, run_id LIMIT $limit""",
                 {"given": given, "limit": shown + 1})["run_id"].to_list()
    if ids and (ids[0] == given or len(ids) == 1):
        return ids[0]
    if not ids:
        raise WorkbenchError("WB_RUN_NOT_FOUND", f"no run id in the store is, starts or ends with {given!r}",
                             "list runs, with their ids: workbench runs list")
    more = " and more" if len(ids) > shown else ""
    raise WorkbenchError("WB_RUN_AMBIGUOUS", f"{given!r} starts or ends the ids of several runs: "
                         f"{', '.join(ids[:shown])}{more}", f"give more of the id, e.g. {ids[0]}, or its last 12 characters")


def run_detail(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """One run's row (empty when the id is unknown)."""
    return _frame(con, "SELECT * FROM runs WHERE run_id = $run_id", {"run_id": run_id})


def run_exchanges(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """The HTTP exchanges of the run and the runs inside it, in order, as recorded (for export)."""
    calls = _frame(con, """
        SELECT c.call_id, c.run_id, c.started_at, c.method, c.url, c.stream, c.http_status, c.wire,
               coalesce(c.model_served, c.model_requested) AS model, c.replayed
        FROM calls c WHERE list_contains($ids, c.run_id) ORDER BY c.started_at, c.call_id""",
                   {"ids": _subtree_ids(con, run_id)})
    bodies = _frame(con, "SELECT call_id, request_json, response_json FROM call_bodies WHERE list_contains($ids, call_id)",
                    {"ids": calls["call_id"].to_list()})
    return calls.join(bodies, on="call_id", how="left", maintain_order="left")


def resume_answers(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """What a resume of `run_id` answers from the store: every call the run (and the runs inside it)
    answered whole (a 2xx, nothing cut), in order, with its bodies and `origin_call_id`, the call
    that paid for the answer. A run that answered nothing itself (killed while it was still
    replaying, or before its first call) hands on what the run it resumed answered."""
    seen: set[str] = set()
    while True:
        seen.add(run_id)
        calls = _frame(con, """
            SELECT c.call_id, coalesce(c.resumed_from_call_id, c.call_id) AS origin_call_id,
                   c.resumed_from_call_id IS NOT NULL AS resumed, c.method, c.url, c.stream, c.http_status,
                   c.request_hash
            FROM calls c WHERE list_contains($ids, c.run_id) AND c.http_status BETWEEN 200 AND 299
                AND c.error_type IS NULL ORDER BY c.started_at, c.call_id""", {"ids": _subtree_ids(con, run_id)})
        earlier = _frame(con, "SELECT resumed_from_run_id FROM runs WHERE run_id = $run_id", {"run_id": run_id})
        parent = earlier["resumed_from_run_id"][0] if earlier.height else None
        if calls.filter(~pl.col("resumed")).height or parent is None or parent in seen:
            break
        run_id = parent
    bodies = _frame(con, "SELECT call_id, request_json, response_json FROM call_bodies WHERE list_contains($ids, call_id)",
                    {"ids": calls["call_id"].to_list()})
    return calls.join(bodies, on="call_id", how="left", maintain_order="left")


def resume_savings(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """What resuming saved the run and the runs inside it: the calls answered from an earlier run
    in the store, and what they would have cost (exact, priced as the run's bill prices its replayed
    calls; `unpriced` of them had no price)."""
    return _frame(con, """
        SELECT count(*) AS replayed_calls, coalesce(sum(c.cost_micros), 0)::BIGINT AS saved_cost_micros,
               count(*) FILTER (WHERE c.cost_micros IS NULL) AS unpriced, any_value(c.currency) AS currency
        FROM calls c WHERE list_contains($ids, c.run_id) AND c.resumed_from_call_id IS NOT NULL""",
                  {"ids": _subtree_ids(con, run_id)})


def run_spans(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    """The spans of the run's trace (or, without a trace id, of the run and the runs inside it)."""
    # by run, an index lookup, and by trace, a scan of the trace column alone (no index: migration 0022)
    columns = ("s.span_id, s.parent_span_id, s.name, s.kind, s.run_id, s.start_time, s.end_time, s.status_code, "
               "s.status_message")
    trace = _frame(con, "SELECT trace_id FROM runs WHERE run_id = $run_id", {"run_id": run_id})
    return _frame(con, f"""
        SELECT {columns} FROM spans s WHERE list_contains($ids, s.run_id)
        UNION SELECT {columns} FROM spans s WHERE s.trace_id = $trace_id
        ORDER BY start_time, span_id""",
                  {"ids": _subtree_ids(con, run_id), "trace_id": trace["trace_id"][0] if trace.height else None})


def run_compactions(con: duckdb.DuckDBPyConnection, run_id: str) -> pl.DataFrame:
    return _frame(con, """
        SELECT x.occurred_at, x.run_id, coalesce(x.source, 'reported') AS source, x.turn, x.outcome, x.tokens_before,
               x.tokens_after, x.summarised_turns, x.kept_turns, x.model, x.cost_micros, x.summary_call_id,
               x.recache_write_tokens
        FROM compactions x WHERE list_contains($ids, x.run_id) ORDER BY x.occurred_at""",
                  {"ids": _subtree_ids(con, run_id)})


# -- eval cases from captured traffic (`workbench eval cases-from-runs`) ----------------------------


def prompt_runs_for_cases(con: duckdb.DuckDBPyConnection, prompt_id: str, since: datetime | date | None = None,
                          limit: int | None = None, include_evals: bool = False,
                          include_replayed: bool = False) -> pl.DataFrame:
    """The finished runs of one prompt (kind `llm` or `eval_case`) that carry their variables (the
    `vars` tag) and made a settled call, with that last settled call's output: one row per run,
    the latest `limit` of them, oldest first. A run with a selected run inside it (an eval case
    around its `llm()` run) gives way to the inner one, so no case is written twice. By default
    only production traffic: no eval case, no judge, nor any run inside one (`include_evals`), and
    no run whose answer was replayed from a cassette (`include_replayed`)."""
    since_at = datetime.combine(since, time.min, tzinfo=timezone.utc) if type(since) is date else since
    return _frame(con, """
        WITH RECURSIVE cand AS (
            SELECT r.run_id, r.parent_run_id, r.kind, r.prompt_version, r.prompt_hash, r.started_at, t.value AS vars
            FROM runs r JOIN run_tags t ON t.run_id = r.run_id AND t.key = 'vars'
            WHERE r.prompt_id = $prompt_id AND r.kind IN ('llm', 'eval_case') AND r.status = 'ok'
              AND ($since::TIMESTAMPTZ IS NULL OR r.started_at >= $since::TIMESTAMPTZ)),
        up(run_id, ancestor, depth) AS (
            SELECT run_id, parent_run_id, 1 FROM cand WHERE parent_run_id IS NOT NULL
            UNION ALL SELECT up.run_id, r.parent_run_id, up.depth + 1 FROM up JOIN runs r ON r.run_id = up.ancestor
            WHERE r.parent_run_id IS NOT NULL AND up.depth < 50),
        eval_traffic AS (
            SELECT run_id FROM cand WHERE kind IN ('eval_case', 'judge')
            UNION SELECT up.run_id FROM up JOIN runs r ON r.run_id = up.ancestor WHERE r.kind IN ('eval_case', 'judge')),
        leaf AS (
            SELECT * FROM cand WHERE run_id NOT IN (SELECT parent_run_id FROM cand WHERE parent_run_id IS NOT NULL)
              AND ($include_evals OR run_id NOT IN (SELECT run_id FROM eval_traffic))),
        last_call AS (
            SELECT c.run_id, c.replayed, b.output_text, b.tool_calls,
                   row_number() OVER (PARTITION BY c.run_id ORDER BY c.started_at DESC, c.call_id DESC) AS n
            FROM calls c JOIN call_bodies b USING (call_id)
            WHERE c.settled AND c.run_id IN (SELECT run_id FROM leaf)),
        picked AS (
            SELECT l.run_id, l.kind, l.prompt_version, l.prompt_hash, l.started_at, l.vars, k.output_text, k.tool_calls
            FROM leaf l JOIN last_call k ON k.run_id = l.run_id AND k.n = 1
            WHERE $include_replayed OR NOT coalesce(k.replayed, false)
            ORDER BY l.started_at DESC, l.run_id DESC LIMIT $limit)
        SELECT * FROM picked ORDER BY started_at, run_id""",
        {"prompt_id": prompt_id, "since": since_at, "limit": limit if limit is not None else 2**62,
         "include_evals": include_evals, "include_replayed": include_replayed})
