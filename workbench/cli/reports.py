"""`workbench report` and `workbench runs`: what the store holds, read with the named queries."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from rich.text import Text

from workbench.cli.core import (
    LIMIT_MAX, DbOption, Format, FormatOption, SinceOption, _cell, _emit, _filters, _money, _read, choices, console,
    err_console, report_app, runs_app,
)
from workbench.errors import WorkbenchError

# cost --by is open (any tag key), so it is checked by the query, not by a fixed set of choices
CacheBy, FailuresBy = choices("CacheBy", "model", "prompt"), choices("FailuresBy", "error_code", "prompt")

def _bucketed(frame) -> bool:
    return "latency_approx" in frame.columns and bool(frame["latency_approx"].any())


def _cost_table(frame, keys: tuple[str, ...]):
    """The cost report as a terminal table: money, then latency as `p50 / p95 / p99` in two columns."""
    import polars as pl

    approx = "≈" if _bucketed(frame) else ""  # read from the latency rollup's buckets (`report_cost` says how close)

    def spread(kind: str) -> pl.Expr:
        parts = [pl.col(f"{kind}_{p}_ms").round(0).cast(pl.Int64).cast(pl.Utf8) for p in ("p50", "p95", "p99")]
        return pl.concat_str(parts, separator=" / ").alias(f"{kind} ms {approx}p50/95/99")

    replayed = pl.when(pl.col("replayed_calls") > 0).then(pl.col("replayed_cost_micros"))  # none: left blank
    return frame.select(*keys, "currency", "calls", "unpriced_calls", "cost_micros", pl.col("replayed_calls").alias("replayed"),
                        replayed.alias("replayed_cost_micros"), spread("ttfb"), spread("duration"))


@report_app.command("cost")
def report_cost(
    by: Annotated[str | None, typer.Option(
        help="model, provider, prompt, day, week, month, run (top-level run name), or any tag key "
             "(user, tenant, ...; tag:KEY for a tag named like one of these). Default: model")] = None,
    top: Annotated[int | None, typer.Option(min=1, max=LIMIT_MAX, help="the N most expensive groups, the rest summed into one row")] = None,
    fail_above: Annotated[str | None, typer.Option(
        help="exit 1 when the spend (each group's, with --by) is above this amount of the currency's major "
             "unit: --fail-above 50 is $50")] = None,
    since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None,
) -> None:
    """Spend, exact, by any key, with the latency of the same calls. Spend is money paid (live calls);
    replayed calls are shown apart, with what they would have cost; unpriced calls are counted, never
    shown as free."""
    from workbench.store import queries

    group = by or "model"
    if not group.strip():
        raise WorkbenchError("WB_CONFIG_INVALID", "--by ''", "use --by model, provider, prompt, day, week, month, "
                             "run or a tag key")
    filters = _filters(since)
    limit = _amount(fail_above) if fail_above is not None else None

    def work(con):
        if group not in queries.BUILT_IN and not group.startswith("tag:") and group not in queries.tag_keys(con):
            known = ", ".join(queries.tag_keys(con)) or "none yet"
            raise WorkbenchError(
                "WB_CONFIG_INVALID", f"--by {group!r} is neither a report key nor a tag key of any run (tag keys: {known})",
                f"use --by {', '.join(queries.BUILT_IN)} or a tag key given to workbench.run(..., tags=...); "
                f"tag:{group} groups by it anyway (every call then in '(none)')")
        with queries.scope(con, filters):
            return (queries.spend_by(con, filters, group), queries.currency_totals(queries.spend_cube(con, filters)),
                    queries.unpriced_models(con, filters))

    frame, totals, unpriced = _read(db, work)
    keys = queries.key_columns(group)
    shown = frame if top is None or group in queries.TIME_KEYS else queries.top_n(frame, keys, top)
    _emit(_cost_table(shown, keys) if fmt == "table" else shown, fmt, f"cost by {group}")
    if fmt == "table":
        if _bucketed(shown):
            from workbench.store.rollup import LATENCY_ERROR

            console.print(f"≈ latency read from monthly buckets: each percentile within {LATENCY_ERROR:.1%} of the exact one")
        for row in totals.iter_rows(named=True):
            console.print(f"total {_money(row['cost_micros'], row['currency'])} paid"
                          + (f"; replayed calls would cost {_money(row['replayed_cost_micros'], row['currency'])}"
                             if row["replayed_priced_calls"] else ""))
    if not unpriced.is_empty():
        names = ", ".join(f"{row['model']} ({row['calls']:,})" for row in unpriced.head(5).iter_rows(named=True))
        err_console.print(Text.assemble(("warning: ", "yellow"), f"{unpriced['calls'].sum():,} calls are unpriced and not in these "
                          f"figures: {names}. See `workbench models`; add rows to models.toml to price them."))
    if limit is not None:
        _alert(frame if by else totals, keys if by else ("currency",), limit, fail_above, by, since)


def _amount(text: str):
    """`--fail-above 50` as a Decimal of the major unit (never a float)."""
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text)
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value < 0:
        raise WorkbenchError("WB_CONFIG_INVALID", f"--fail-above {text!r} is not an amount",
                             "give the amount in the currency's major unit: --fail-above 50 (that is $50)")
    return value


def _alert(frame, keys: tuple[str, ...], limit, text: str, by: str | None, since: str | None) -> None:
    """Exit 1 (WB_SPEND_ABOVE) naming every group whose paid spend is above `limit`."""
    from workbench.money import micros_of_decimal

    crossed = []
    for row in frame.iter_rows(named=True):
        currency = row.get("currency") or "USD"
        if (row["cost_micros"] or 0) > micros_of_decimal(limit, currency):
            name = ", ".join(f"{key}={row[key]}" for key in keys if key != "currency")
            crossed.append(f"{name or 'total'} spent {_money(row['cost_micros'], currency)}")
    if crossed:
        window = f" since {since}" if since else ""
        raise WorkbenchError(
            "WB_SPEND_ABOVE",
            f"spend{window} is above {text} (per {by or 'report'}): " + "; ".join(crossed),
            f"see where it went: workbench report cost{f' --by {by}' if by else ' --by model'}"
            f"{f' --since {since}' if since else ''}; or raise --fail-above if this spend is expected",
        )



@report_app.command("cache")
def report_cache(
    by: Annotated[CacheBy, typer.Option(help="what to group by")] = CacheBy.model,
    why: Annotated[bool, typer.Option("--why", help="why calls missed: verdicts, changing prefixes, write waste")] = False,
    since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None,
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
            print(json.dumps({name: frame.to_dicts() for name, frame in tables.items()}, indent=2, default=_cell))
            return
        for name, frame in tables.items():
            if fmt == "csv":
                print(f"# {name}")
            _emit(frame, fmt, f"prompt cache: {name.replace('_', ' ')}")
        return
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
    frame = _read(db, lambda con: queries.failures_by(con, _filters(since), by))
    if fmt == "table":  # what fits a terminal: the tokens are in --format csv and json
        tokens = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
        frame = frame.drop(*tokens, "priced_calls", "replayed_priced_calls")
    _emit(frame, fmt, f"failed runs by {by}")


@report_app.command("evals")
def report_evals(since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None) -> None:
    """Eval runs: suite, prompt version, mean score against the baseline, verdict, cost."""
    from workbench.store import queries

    columns = ("suite", "prompt_id", "prompt_version", "mode", "mean_score", "baseline_mean", "verdict", "cases",
               "cost_micros", "started_at")
    _emit(_read(db, lambda con: queries.eval_history(con, _filters(since)).select(columns)), fmt, "eval runs")


@report_app.command("quarantine")
def report_quarantine(fmt: FormatOption = "table", db: DbOption = None) -> None:
    """Records the store could not take (a value out of range, a corrupt spool line), with the reason."""
    from workbench.store import queries

    _emit(_read(db, queries.quarantined_records), fmt, "quarantined records")


@runs_app.command("list")
def runs_list(
    limit: Annotated[int, typer.Option(min=1, max=LIMIT_MAX, help="how many, latest first")] = 30,
    since: SinceOption = None, fmt: FormatOption = Format.table, db: DbOption = None,
) -> None:
    """The latest top-level runs with their status, calls and bill."""
    from workbench.store import queries

    frame = _read(db, lambda con: queries.run_choices(con, _filters(since), limit))
    if fmt == "table":  # the exact cost, and beside it the bill: rounded up to the cent once
        import polars as pl

        from workbench.money import format_bill

        # a row per run and currency its calls were priced in: each bill rounded up in its own currency
        bills = [format_bill(cost, currency) if cost is not None else ("unpriced" if unpriced else "")
                 for cost, currency, unpriced in zip(frame["cost_micros"], frame["currency"], frame["unpriced_calls"])]
        # one line a run in a 140-column log: the start to the minute, the cost naming its unpriced
        # calls, replays counted only where there are any (what they would cost: `runs show`, CSV, JSON)
        replays = (pl.col("replayed_calls").alias("replayed"),) if frame["replayed_calls"].fill_null(0).sum() else ()
        frame = frame.select("run_id", "name", "status", pl.col("started_at").dt.strftime("%Y-%m-%d %H:%M"),
                             "calls", *replays, "currency", "cost_micros", "unpriced_calls",
                             pl.Series("bill", bills, dtype=pl.Utf8))
    _emit(frame, fmt, "runs")


@runs_app.command("show")
def runs_show(run_id: Annotated[str, typer.Argument(help="a run id, or its start or end (see `workbench runs list`)")],
              fmt: FormatOption = Format.table, db: DbOption = None) -> None:
    """One run: its bill, its calls with usage and cost, and the transcript (JSON: the run and
    every call with its bodies; CSV: one row per call)."""
    from workbench.store import queries

    def detail(con):
        whole = queries.resolve_run_id(con, run_id)
        return queries.run_detail(con, whole), queries.run_calls(con, whole), queries.resume_savings(con, whole)

    run, calls, resume = _read(db, detail)
    row, saved = run.row(0, named=True), resume.row(0, named=True)
    if fmt == "json":
        print(json.dumps({"run": row, "resume": saved, "calls": calls.to_dicts()}, indent=2, default=_cell))
        return
    shown = calls.select("call_id", "started_at", "model", "replayed", "resumed_from_call_id", "http_status",
                         "stop_reason", "input_tokens",
                         "cache_read_tokens", "cache_write_tokens", "output_tokens", "currency", "cost_micros",
                         "error_type")
    if fmt == "csv":
        _emit(shown, fmt, "calls")
        return
    from workbench.capture.runs import Billed

    console.print(Text.assemble((row["name"], "bold"), f" ({row['kind']}) {row['status']} — run {row['run_id']}"))
    if row["status"] == "failed":
        console.print(f"failed with {row['error_code'] or row['error_type']}: {row['error_message']}")
    billed = Billed.of_row(row)
    console.print(f"billed: {billed if billed is not None else 'no calls'}; tags {row['tags']}")
    if row["resumed_from_run_id"] or saved["replayed_calls"]:
        count = saved["replayed_calls"]
        console.print(f"resumed from run {row['resumed_from_run_id']}: {count:,} call{'' if count == 1 else 's'} "
                      f"answered from the store, not paid again; "
                      f"{'it' if count == 1 else 'they'} would have cost {_money(saved['saved_cost_micros'], saved['currency'])}"
                      + (f" ({saved['unpriced']:,} unpriced)" if saved["unpriced"] else ""))
    _emit(shown.drop("call_id", "resumed_from_call_id"), fmt, "calls")  # the ids are in CSV and JSON
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




@runs_app.command("resume")
def runs_resume(
    run_id: Annotated[str, typer.Argument(help="the run to resume: its id, or its start or end (see `workbench runs list`)")],
    command: Annotated[list[str], typer.Argument(help="the command that runs the job again, after --")],
    db: DbOption = None,
) -> None:
    """Run COMMAND so that it resumes RUN_ID: the first top-level run it opens under RUN_ID's name is
    answered from the store, call by call, for every call RUN_ID answered (replayed, not paid),
    until a request differs. `workbench runs resume 01JX... -- python job.py`; exits with COMMAND's
    exit code."""
    import os
    import subprocess

    from workbench.capture import configure
    from workbench.capture.route import RESUME_ENV
    from workbench.replay.resume import resumable

    if db is not None:
        configure(db=db)
    row = resumable(run_id)  # unknown, ambiguous or still running: refused before COMMAND starts
    env = {**os.environ, RESUME_ENV: row["run_id"], **({"WORKBENCH_DB": str(db.resolve())} if db else {})}
    err_console.print(f"resuming run {row['run_id']} ({row['name']}): {' '.join(command)}")
    try:
        code = subprocess.call(command, env=env)
    except OSError as exc:
        raise WorkbenchError("WB_CLI_USAGE", f"cannot run {command[0]!r}: {exc}",
                             f"give the command after --: workbench runs resume {row['run_id']} -- python job.py") from None
    raise typer.Exit(code)
