"""`workbench report` and `workbench runs`: what the store holds, read with the named queries."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from rich.text import Text

from workbench.cli.core import (
    LIMIT_MAX, DbOption, Format, FormatOption, SinceOption, _cell, _emit, _filters, _money, _read, choices, console,
    report_app, runs_app,
)

CostBy, CacheBy, FailuresBy = choices("CostBy", "model", "prompt", "day"), choices("CacheBy", "model", "prompt"), \
    choices("FailuresBy", "error_code", "prompt")

@report_app.command("cost")
def report_cost(
    by: Annotated[CostBy, typer.Option(help="what to group by")] = CostBy.model,
    since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None,
) -> None:
    """Spend by model, prompt version or day; unpriced calls are counted, never shown as free."""
    from workbench.store import queries

    by = by.value
    keys = {"model": ("provider", "model"), "prompt": ("prompt_id", "prompt_version"), "day": ("day",)}
    columns = ("calls", "unsettled", "unpriced_calls", "input_tokens", "cache_read_tokens", "cache_write_tokens",
               "output_tokens", "cost_micros")
    frame = _read(db, lambda con: queries.rollup(queries.spend_cube(con, _filters(since)), keys[by], columns))
    frame = frame.select(*keys[by], *columns).sort("cost_micros", descending=True, nulls_last=True)
    _emit(frame, fmt, f"cost by {by}")


@report_app.command("cache")
def report_cache(
    by: Annotated[CacheBy, typer.Option(help="what to group by")] = CacheBy.model,
    since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None,
) -> None:
    """Prompt-cache reads, hit rate and the money they saved net of the write premium."""
    from workbench.store import queries

    by = by.value
    keys = {"model": ("model",), "prompt": ("prompt_id", "prompt_version")}
    _emit(_read(db, lambda con: queries.cache_savings(con, _filters(since), keys[by])), fmt, f"prompt cache by {by}")


@report_app.command("compactions")
def report_compactions(since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None) -> None:
    """Context compactions: tokens before and after, turns summarised and kept, summary cost."""
    from workbench.store import queries

    _emit(_read(db, lambda con: queries.compaction_events(con, _filters(since))), fmt, "compactions")


@report_app.command("failures")
def report_failures(
    by: Annotated[FailuresBy, typer.Option(help="what to group by")] = FailuresBy.error_code,
    since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None,
) -> None:
    """Failed runs and what they were billed, by error code or by prompt."""
    from workbench.store import queries

    by = by.value
    _emit(_read(db, lambda con: queries.failures_by(con, _filters(since), by)), fmt, f"failed runs by {by}")


@report_app.command("evals")
def report_evals(since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None) -> None:
    """Eval runs: suite, prompt version, mean score against the baseline, verdict, cost."""
    from workbench.store import queries

    columns = ("suite", "prompt_id", "prompt_version", "mode", "mean_score", "baseline_mean", "verdict", "cases",
               "cost_micros", "started_at")
    _emit(_read(db, lambda con: queries.eval_history(con, _filters(since)).select(columns)), fmt, "eval runs")


@runs_app.command("list")
def runs_list(
    limit: Annotated[int, typer.Option(min=1, max=LIMIT_MAX, help="how many, latest first")] = 30,
    since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None,
) -> None:
    """The latest top-level runs with their status, calls and bill."""
    from workbench.store import queries

    _emit(_read(db, lambda con: queries.run_choices(con, _filters(since), limit)), fmt, "runs")


@runs_app.command("show")
def runs_show(run_id: Annotated[str, typer.Argument(help="a run id, or its start (see `workbench runs list`)")],
              fmt: FormatOption = Format.table, db: DbOption = None) -> None:
    """One run: its bill, its calls with usage and cost, and the transcript (JSON: the run and
    every call with its bodies; CSV: one row per call)."""
    from workbench.store import queries

    def detail(con):
        whole = queries.resolve_run_id(con, run_id)
        return queries.run_detail(con, whole), queries.run_calls(con, whole)

    run, calls = _read(db, detail)
    row = run.row(0, named=True)
    if fmt == "json":
        print(json.dumps({"run": row, "calls": calls.to_dicts()}, indent=2, default=_cell))
        return
    shown = calls.select("call_id", "started_at", "model", "http_status", "stop_reason", "input_tokens",
                         "cache_read_tokens", "cache_write_tokens", "output_tokens", "cost_micros", "error_type")
    if fmt == "csv":
        _emit(shown, fmt, "calls")
        return
    console.print(Text.assemble((row["name"], "bold"), f" ({row['kind']}) {row['status']} — run {row['run_id']}"))
    if row["status"] == "failed":
        console.print(f"failed with {row['error_code'] or row['error_type']}: {row['error_message']}")
    console.print(f"billed {_money(row['billed_cost_micros'])} over {row['billed_calls'] or 0} calls, "
                  f"{row['billed_unsettled'] or 0} unsettled; tags {row['tags']}")
    _emit(shown.drop("call_id"), fmt, "calls")
    for index, call in enumerate(calls.iter_rows(named=True)):
        console.rule(f"call {index + 1}: {call['model']}")
        console.print(_transcript(call["request_json"]))
        if call["output_text"]:
            console.print(f"assistant: {call['output_text']}")
        if call["tool_calls"]:
            console.print(f"tool calls: {call['tool_calls']}")


def _transcript(request_json: str | None) -> str:
    """The messages of a request body, one line each (any wire)."""
    try:
        body = json.loads(request_json or "")
    except ValueError:
        return request_json or ""
    lines = []
    system = body.get("system") or body.get("instructions")
    if system:
        text = system if isinstance(system, str) else " ".join(part.get("text", "") for part in system if isinstance(part, dict))
        lines.append(f"system: {text[:300]}")
    messages = body.get("messages") or body.get("input") or []
    for message in [{"role": "user", "content": messages}] if isinstance(messages, str) else messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(
                part.get("text") or json.dumps(part.get("input") or part.get("content") or "", default=str)
                for part in content if isinstance(part, dict)
            )
        lines.append(f"{message.get('role', '?')}: {str(content)[:500]}")
    return "\n".join(lines)


