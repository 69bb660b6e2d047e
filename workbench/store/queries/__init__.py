"""Every named query the dashboard and the CLI reports read, parameterized, returning polars frames.

No SQL lives anywhere else. Each query takes an open connection and a `Filters`; money comes back as
integer micro-minor units (sums cast to BIGINT, so nothing travels as a float), shown exact when it is
formatted (`workbench.money`); only a run's bill is rounded, up to the minor unit, once. Spend is what
live calls cost; replayed calls are counted apart (`replayed_cost_micros`: what they would have cost).

How the filters apply:
- calls: the date is the call's start (UTC days); provider, model (served, else requested), prompt
  id and version, live or replayed are the call's own columns; a run name or tag matches a call
  whose run, or any run around it, has that name or tag.
- runs: the date is the run's start; a run name or tag matches the run and every run inside it; a
  call-level filter (provider, model, prompt, live or replayed) keeps the runs that contain a
  matching call, however deeply nested. Bills are per run, never split by model.
- compactions: the date is when it happened; every other filter goes through the compaction's run
  (a compaction outside any run only shows when no run or call filter is set).

`read(db, spool_dir, fn)` is the one way the dashboard reads: ingest pending spools (fail-open),
open read-only, run `fn`, close. Nothing holds the store between reads.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import polars as pl

from workbench.store.queries._base import StoreMissing, Filters, scope, run_sets, store_counts, filter_options, ingest_pending, quarantined_records, read
from workbench.store.queries.spend import spend_cube, rollup, call_totals, spend_by_currency, currency_totals, spend_by_day, day_totals, spend_by_model, model_totals, spend_by_prompt, prompt_totals, run_totals, top_run_names, top_runs, outside_runs_spend, failure_totals, failed_runs, failures_by, unknown_when_unpriced, unpriced_models
from workbench.store.queries.ledger import BUILT_IN, LATENCY, OTHERS, TIME_KEYS, key_columns, latency_rolled_up, spend_by, tag_keys, top_n
from workbench.store.queries.cache import model_prices, cache_savings, cache_totals, unstable_prefix_runs
from workbench.store.queries.insight import miss_reasons, changing_regions, write_waste, call_verdicts, run_turn_events, compaction_sources
from workbench.store.queries.runs import compaction_totals, compactions_by_day, compaction_events, compaction_top_runs, has_tables, evals_available, eval_history, eval_cases, eval_matrices, eval_matrix, eval_matrix_case, eval_matrix_case_ids, run_choices, run_tree, run_calls, resolve_run_id, resume_answers, resume_savings, run_detail, run_exchanges, run_spans, run_compactions, prompt_runs_for_cases
from workbench.store.queries.runtime import last_checkpoint, response_cache_hits


# -- pages ---------------------------------------------------------------------------------------


def overview_page(con: duckdb.DuckDBPyConnection, f: Filters, by: str = "model", top: int = 10
                  ) -> dict[str, pl.DataFrame]:
    """The Overview's data: its headline (`overview_headline`) and its tables (`overview_tables`)."""
    with scope(con, f):
        return {**overview_headline(con, f), **overview_tables(con, f, by, top)}


def overview_headline(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    """The KPIs (`calls`, `currency`, `runs`) and the spend chart's data (`by_day`): what the page
    shows first, read apart from its tables so its figures paint before the breakdowns are counted."""
    with scope(con, f):
        cube = spend_cube(con, f)
        return {"calls": rollup(cube, ()), "currency": currency_totals(cube), "runs": run_totals(con, f),
                "by_day": day_totals(cube)}


def overview_tables(con: duckdb.DuckDBPyConnection, f: Filters, by: str = "model", top: int = 10
                    ) -> dict[str, pl.DataFrame]:
    """Spend and latency by model and by prompt version, the `breakdown` by any key (`spend_by`), its
    top `top` rows and everything else summed into one, and the top spenders."""
    with scope(con, f):
        by_model, by_prompt = spend_by(con, f, "model"), spend_by(con, f, "prompt")
        breakdown = {"model": by_model, "prompt": by_prompt}.get(by)
        breakdown = spend_by(con, f, by) if breakdown is None else breakdown
        return {"by_model": by_model, "by_prompt": by_prompt,
                "breakdown": breakdown if by in TIME_KEYS else top_n(breakdown, key_columns(by), top),
                "top_names": top_run_names(con, f), "top_runs": top_runs(con, f)}


def cache_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    """The Prompt cache page's data: its headline (`cache_headline`) and its tables (`cache_tables`)."""
    with scope(con, f):
        return {**cache_headline(con, f), **cache_tables(con, f)}


def cache_headline(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    """The cache use and savings (`totals`) and their groups by prompt and model: what the page
    shows first, read apart from its tables so its figures paint before the tables are read."""
    with scope(con, f):
        groups = cache_savings(con, f, ("prompt_id", "prompt_version", "model"))
        return {"totals": cache_totals(groups), "by_prompt_model": groups}


def cache_tables(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    with scope(con, f):
        return {"unstable": unstable_prefix_runs(con, f), "response_cache": response_cache_hits(con, f),
                "why": miss_reasons(con, f), "changing": changing_regions(con, f), "waste": write_waste(con, f)}


def compaction_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    """The Compaction page's data: its headline (`compaction_totals`) and its tables (`compaction_tables`)."""
    with scope(con, f):
        return {"totals": compaction_totals(con, f), **compaction_tables(con, f)}


def compaction_tables(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    with scope(con, f):
        return {"by_day": compactions_by_day(con, f), "failed": compaction_events(con, f, failed_only=True),
                "top_runs": compaction_top_runs(con, f), "events": compaction_events(con, f),
                "sources": compaction_sources(con, f)}


def failures_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    """The Failures page's data: its headline (`failure_totals`) and its tables (`failures_tables`)."""
    with scope(con, f):
        return {"totals": failure_totals(con, f), **failures_tables(con, f)}


def failures_tables(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    """The failed runs and their cost by error code and by prompt: read after the page's headline,
    without reading its totals again."""
    with scope(con, f):
        return {"runs": failed_runs(con, f), "by_error": failures_by(con, f, "error_code"),
                "by_prompt": failures_by(con, f, "prompt")}


def evals_page(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    if not evals_available(con):
        return {}
    return {"history": eval_history(con, f), "matrices": eval_matrices(con, f)}


def explorer_page(con: duckdb.DuckDBPyConnection, f: Filters, run_id: str | None = None) -> dict[str, pl.DataFrame]:
    """The runs to pick from and one run: `run_id`, or without one the latest listed (in the same read:
    a page opened without a run reads the store once)."""
    with scope(con, f):
        out = {"choices": run_choices(con, f)}
    if not run_id and out["choices"].height:
        run_id = out["choices"]["run_id"][0]
    if run_id:
        out.update(tree=run_tree(con, run_id), calls=run_calls(con, run_id), spans=run_spans(con, run_id),
                   compactions=run_compactions(con, run_id), resume=resume_savings(con, run_id))
        out.update(verdicts=call_verdicts(con, out["calls"]["call_id"].to_list()),
                   turns=run_turn_events(con, out["tree"]["run_id"].to_list()))
    return out


PAGES: dict[str, Callable[..., dict[str, pl.DataFrame]]] = {
    "overview": overview_page, "prompt_cache": cache_page, "compaction": compaction_page,
    "failures": failures_page, "evals": evals_page, "run_explorer": explorer_page,
}



__all__ = [
    "BUILT_IN", "Filters", "LATENCY", "OTHERS", "PAGES", "StoreMissing", "TIME_KEYS", "cache_headline", "cache_savings",
    "cache_tables", "cache_totals", "call_totals", "compaction_tables",
    "call_verdicts", "changing_regions", "compaction_events", "compaction_sources", "miss_reasons", "run_turn_events",
    "write_waste", "compaction_top_runs", "compaction_totals", "compactions_by_day", "currency_totals", "day_totals",
    "eval_cases", "eval_matrices", "eval_matrix", "eval_matrix_case", "eval_matrix_case_ids",
    "eval_history", "evals_available", "failed_runs", "failure_totals", "failures_by", "failures_tables", "filter_options",
    "has_tables", "ingest_pending", "key_columns", "latency_rolled_up", "model_prices", "model_totals", "outside_runs_spend", "overview_headline", "overview_tables", "prompt_totals", "read", "rollup",
    "run_calls", "run_choices", "run_sets", "run_compactions", "run_detail", "run_exchanges", "run_spans", "run_totals",
    "prompt_runs_for_cases", "quarantined_records", "resume_answers", "resume_savings", "run_tree", "scope", "spend_by", "tag_keys", "spend_by_currency", "spend_by_day", "spend_by_model", "spend_by_prompt", "spend_cube",
    "store_counts", "top_n", "top_run_names", "top_runs", "unknown_when_unpriced", "unpriced_models", "unstable_prefix_runs"
]


