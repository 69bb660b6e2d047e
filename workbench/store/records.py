"""The records the recorders hand the store, one kind per table. Each is a flat row whose keys are
the table's columns; `kind` names the table."""

from __future__ import annotations

from typing import Literal

Kind = Literal[
    "call", "call_body", "run", "run_tag", "span", "span_event", "compaction", "prompt", "model", "eval_run", "eval_result",
    "eval_sample",
]

# table, primary key, and whether a later record replaces an earlier one with the same key
TABLES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "call": ("calls", ("call_id",), False),
    "call_body": ("call_bodies", ("call_id",), False),
    "run": ("runs", ("run_id",), True),  # a run is written when it starts and again when it ends
    "run_tag": ("run_tags", ("run_id", "key"), True),
    "span": ("spans", ("span_id",), False),
    "span_event": ("span_events", ("span_id", "seq"), False),
    "compaction": ("compactions", ("compaction_id",), False),
    "prompt": ("prompts", ("prompt_hash",), False),
    "model": ("models", ("price_source",), True),
    "eval_run": ("eval_runs", ("eval_run_id",), True),
    "eval_result": ("eval_results", ("eval_run_id", "case_id"), True),
    "eval_sample": ("eval_samples", ("eval_run_id", "case_id", "epoch"), True),
}
