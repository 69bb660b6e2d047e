"""The records the recorders hand the store, one kind per table. Each is a flat row whose keys are
the table's columns; `kind` names the table."""

from __future__ import annotations

from typing import Literal

Kind = Literal[
    "call", "call_body", "run", "run_tag", "span", "span_event", "compaction", "prompt", "model", "eval_run", "eval_result",
    "checkpoint", "cache_hit", "quarantine", "call_prefix", "cache_read",
    "eval_sample", "lineage_state",
]

# table, primary key, and whether a later record replaces an earlier one with the same key
TABLES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "call": ("calls", ("call_id",), False),
    "call_body": ("call_bodies", ("call_id",), False),
    "run": ("runs", ("run_id",), True),  # a run is written when it starts and again when it ends
    "run_tag": ("run_tags", ("run_id", "key"), True),
    "span": ("spans", ("span_id",), False),
    "span_event": ("span_events", ("span_id", "seq"), False),
    # replaced: insight fills in what the traffic shows about a reported compaction
    "compaction": ("compactions", ("compaction_id",), True),
    "prompt": ("prompts", ("prompt_hash",), False),
    "model": ("models", ("price_source",), True),
    "eval_run": ("eval_runs", ("eval_run_id",), True),
    "eval_result": ("eval_results", ("eval_run_id", "case_id"), True),
    "checkpoint": ("checkpoints", ("checkpoint_id",), False),
    "cache_hit": ("response_cache_hits", ("hit_id",), False),
    # a record the store could not take, with its reason (keyed by its spool file and line: idempotent)
    "quarantine": ("quarantine", ("quarantine_id",), False),
    "call_prefix": ("call_prefixes", ("call_id",), False),
    "cache_read": ("cache_reads", ("call_id",), False),
    "eval_sample": ("eval_samples", ("eval_run_id", "case_id", "epoch"), True),
    # insight's cache state of a lineage after its latest batch (written with the batch's rows)
    "lineage_state": ("insight_lineages", ("lineage",), True),
}
