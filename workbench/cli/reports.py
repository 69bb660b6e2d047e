"""`workbench report` and `workbench runs`: what the store holds, read with the named queries."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from workbench.cli.core import (
    DbOption, FormatOption, SinceOption, _emit, _filters, _money, _read, console, report_app, runs_app,
)
from workbench.errors import WorkbenchError

@report_app.command("cost")
def report_cost(
    by: Annotated[str, typer.Option(help="model, prompt or day")] = "model",
    since: SinceOption = None, fmt: FormatOption = "table", db: DbOption = None,
) -> None:
    """Spend by model, prompt version or day; unpriced calls are counted, never shown as free."""
    from workbench.store import queries

    keys = {"model": ("provider", "model"), "prompt": ("prompt_id", "prompt_version"), "day": ("day",)}
    if by not in keys:
        raise WorkbenchError("WB_CONFIG_INVALID", f"--by {by!r}", "use --by model, prompt or day")
    columns = ("calls", "unsettled", "unpriced_calls", "input_tokens", "cache_read_tokens", "cache_write_tokens",
               "output_tokens", "cost_micros")
    frame = _read(db, lambda con: queries.rollup(queries.spend_cube(con, _filters(since)), keys[by], columns))
    frame = frame.select(*keys[by], *columns).sort("cost_micros", descending=True, nulls_last=True)
    _emit(frame, fmt, f"cost by {by}")


@report_app.command("cache")
def report_cache(
    by: Annotated[str, typer.Option(help="model or prompt")] = "model",
    why: Annotated[bool, typer.Option("--why", help="why calls missed: verdicts, changing prefixes, write waste")] = False,
    since: SinceOption = None, fmt: FormatOption = "table", db: DbOption = None,
) -> None:
    """Prompt-cache reads, hit rate and the money they saved net of the write premium; with --why,
    why calls missed the cache and what it cost."""
    from workbench.store import queries

    if why:
        f = _filters(since)
        tables = _read(db, lambda con: {
            "verdicts": queries.miss_reasons(con, f), "changing_prefixes": queries.changing_regions(con, f),
            "cache_writes": queries.write_waste(con, f)})
        if fmt == "json":
            print(json.dumps({name: frame.to_dicts() for name, frame in tables.items()}, indent=2, default=str))
            return
        for name, frame in tables.items():
            if fmt == "csv":
                print(f"# {name}")
            _emit(frame, fmt, f"prompt cache: {name.replace('_', ' ')}", exact=True)
        return
    keys = {"model": ("model",), "prompt": ("prompt_id", "prompt_version")}
    if by not in keys:
        raise WorkbenchError("WB_CONFIG_INVALID", f"--by {by!r}", "use --by model or prompt")
    _emit(_read(db, lambda con: queries.cache_savings(con, _filters(since), keys[by])), fmt, f"prompt cache by {by}")


@report_app.command("compactions")
def report_compactions(since: SinceOption = None, fmt: FormatOption = "table", db: DbOption = None) -> None:
    """Context compactions: tokens before and after, turns summarised and kept, summary cost."""
    from workbench.store import queries

    _emit(_read(db, lambda con: queries.compaction_events(con, _filters(since))), fmt, "compactions")


@report_app.command("failures")
def report_failures(
    by: Annotated[str, typer.Option(help="error_code or prompt")] = "error_code",
    since: SinceOption = None, fmt: FormatOption = "table", db: DbOption = None,
) -> None:
    """Failed runs and what they were billed, by error code or by prompt."""
    from workbench.store import queries

    if by not in ("error_code", "prompt"):
        raise WorkbenchError("WB_CONFIG_INVALID", f"--by {by!r}", "use --by error_code or prompt")
    _emit(_read(db, lambda con: queries.failures_by(con, _filters(since), by)), fmt, f"failed runs by {by}")


@report_app.command("evals")
def report_evals(since: SinceOption = None, fmt: FormatOption = "table", db: DbOption = None) -> None:
    """Eval runs: suite, prompt version, mean score against the baseline, verdict, cost."""
    from workbench.store import queries

    columns = ("suite", "prompt_id", "prompt_version", "mode", "mean_score", "baseline_mean", "verdict", "cases",
               "cost_micros", "started_at")
    _emit(_read(db, lambda con: queries.eval_history(con, _filters(since)).select(columns)), fmt, "eval runs")


@runs_app.command("list")
def runs_list(
    limit: Annotated[int, typer.Option(help="how many, latest first")] = 30,
    since: SinceOption = None, fmt: FormatOption = "table", db: DbOption = None,
) -> None:
    """The latest top-level runs with their status, calls and bill."""
    from workbench.store import queries

    _emit(_read(db, lambda con: queries.run_choices(con, _filters(since), limit)), fmt, "runs")


@runs_app.command("show")
def runs_show(run_id: Annotated[str, typer.Argument(help="a run id (see `workbench runs list`)")],
              db: DbOption = None) -> None:
    """One run: its bill, its calls with usage and cost, and the transcript."""
    from workbench.store import queries

    run, calls = _read(db, lambda con: (queries.run_detail(con, run_id), queries.run_calls(con, run_id)))
    if run.is_empty():
        raise WorkbenchError("WB_RUN_NOT_FOUND", f"no run {run_id!r} in the store", "list runs: workbench runs list")
    row = run.row(0, named=True)
    console.print(f"[bold]{row['name']}[/] ({row['kind']}) {row['status']}"
                  + (f" — {row['error_code'] or row['error_type']}: {row['error_message']}" if row["status"] == "failed" else ""))
    console.print(f"billed {_money(row['billed_cost_micros'])} over {row['billed_calls'] or 0} calls, "
                  f"{row['billed_unsettled'] or 0} unsettled; tags {row['tags']}")
    _emit(calls.select("started_at", "model", "http_status", "stop_reason", "input_tokens", "cache_read_tokens",
                       "cache_write_tokens", "output_tokens", "cost_micros", "error_type"), "table", "calls")
    for index, call in enumerate(calls.iter_rows(named=True)):
        console.rule(f"call {index + 1}: {call['model']}")
        console.print(_transcript(call["request_json"]), markup=False)
        if call["output_text"]:
            console.print(f"assistant: {call['output_text']}", markup=False)
        if call["tool_calls"]:
            console.print(f"tool calls: {call['tool_calls']}", markup=False)


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


