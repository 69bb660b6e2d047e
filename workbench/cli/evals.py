"""`workbench eval`, `workbench check` and `workbench prompts`: suites, the gate, the lock file."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from workbench.cli.core import (
    LIMIT_MAX, Format, FormatOption, _emit, _money, a_file, app, choices, console, err_console, error_text, eval_app, finite,
    prompts_app,
)
from workbench.errors import WorkbenchError

Mode, CompareMode = choices("Mode", "replay", "record", "rerecord", "live"), choices("CompareMode", "replay", "record")

def _suites(names: list[str], evals: Path):
    from workbench.evaluate.suite import find_suite, load_suites

    if not names:
        suites = list(load_suites([evals]).values())
        if not suites:
            raise WorkbenchError("WB_EVAL_SUITE_INVALID", f"no suites under {evals}", "pass --evals DIR or a suite file")
        return sorted(suites, key=lambda suite: suite.name)
    return [find_suite(name, evals) for name in names]


def _progress(total: int, label: str):
    from rich.progress import Progress

    progress = Progress(console=err_console, transient=True, disable=not sys.stderr.isatty())
    task = progress.add_task(escape(label), total=total)  # a suite's name is text, not markup
    return progress, lambda: progress.advance(task)


@eval_app.command("run")
def eval_run(
    suites: Annotated[list[str] | None, typer.Argument(help="suite names or files (default: every suite)")] = None,
    evals: Annotated[Path, typer.Option(help="the folder of suite files")] = Path("evals"),
    mode: Annotated[Mode | None, typer.Option(help="replay (default), record, rerecord or live")] = None,
    prompt_version: Annotated[str | None, typer.Option(help="run this version of the suite's prompt")] = None,
    record_baseline: Annotated[bool, typer.Option("--record-baseline", help="record the baseline; no gate")] = False,
    max_cost_increase: Annotated[float | None, typer.Option(min=0, callback=finite,
                                                            help="fail if cost per case rises more (0.1 = 10%)")] = None,
    junit: Annotated[Path | None, typer.Option(help="write JUnit XML here")] = None,
    markdown: Annotated[Path | None, typer.Option(help="write a Markdown summary here")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the JSON report here")] = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Run suites (replay by default) and gate on the drop from their baselines: exit 0 pass,
    1 regression, 2 could not judge."""
    from workbench.evaluate.gate import evaluate, recording_requested
    from workbench.evaluate.report import print_console, summary, to_json, to_junit, to_markdown

    mode = mode.value if mode is not None else None

    if not record_baseline and recording_requested():
        raise WorkbenchError(
            "WB_EVAL_RECORDING", "WORKBENCH_EVAL_RECORD=1 is set, and the gate never records: nothing was run",
            "unset WORKBENCH_EVAL_RECORD to gate, or pass --record-baseline to record",
        )
    outcomes = []
    loaded = _suites(suites or [], evals)
    gc.freeze()  # what is loaded so far lives to the end: no collection scans it again
    for suite in loaded:
        progress, advance = _progress(len(suite.cases), f"eval {suite.name}")
        with progress:
            outcomes.append(evaluate(suite, mode, prompt_version, record_baseline, max_cost_increase, advance))
    # the results are spooled; ingestion into the store happens after exit, off the gate's clock
    if fmt == "table":
        print_console(outcomes, console)
    elif fmt == "json":
        print(to_json(outcomes), end="")
    else:
        _emit([{"suite": data["suite"], **{key: row[key] for key in ("case", "score", "baseline", "delta", "cost_micros", "status")}}
               for data in map(summary, outcomes) for row in data["cases"]], fmt, "cases")
    for path, render in ((junit, to_junit), (markdown, to_markdown), (json_out, to_json)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(outcomes), encoding="utf-8")
    failed = [outcome.error for outcome in outcomes if outcome.error is not None]
    if record_baseline:
        for outcome in outcomes:
            (console if fmt == "table" else err_console).print(f"recorded {outcome.eval_run.suite.baseline_path}")
    if failed:
        raise failed[0]


@eval_app.command("compare")
def eval_compare(
    suite_name: Annotated[str, typer.Argument(help="the suite")],
    version_a: Annotated[str, typer.Argument(help="a prompt version")],
    version_b: Annotated[str, typer.Argument(help="another prompt version")],
    evals: Annotated[Path, typer.Option(help="the folder of suite files")] = Path("evals"),
    mode: Annotated[CompareMode | None, typer.Option(help="replay (default) or record: live calls only for what changed")] = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Two prompt versions side by side, case by case: score, output, cost."""
    import asyncio

    from workbench.evaluate.runner import run_suite
    from workbench.evaluate.scorers import as_text

    (suite,) = _suites([suite_name], evals)
    runs = [asyncio.run(run_suite(suite, mode and mode.value, version)) for version in (version_a, version_b)]
    if fmt != "table":
        _emit([{"case": left.case_id, "version_a": version_a, "version_b": version_b, "score_a": left.score,
                "score_b": right.score, "delta": right.score - left.score, "cost_a_micros": left.cost_micros,
                "cost_b_micros": right.cost_micros,
                "output_a": as_text(left.output) if left.output is not None else (left.error and left.error.code),
                "output_b": as_text(right.output) if right.output is not None else (right.error and right.error.code)}
               for left, right in zip(runs[0].results, runs[1].results, strict=True)], fmt, suite.name)
        return
    table = Table(title=f"{suite.name}: {suite.prompt.id} {version_a} vs {version_b}")
    for name in ("case", f"score {version_a}", f"score {version_b}", "Δ", f"cost {version_a}", f"cost {version_b}",
                 f"output {version_a}", f"output {version_b}"):
        table.add_column(name)
    for left, right in zip(runs[0].results, runs[1].results, strict=True):
        table.add_row(
            left.case_id, f"{left.score:.2f}", f"{right.score:.2f}", f"{right.score - left.score:+.2f}",
            _money(left.cost_micros, exact=True), _money(right.cost_micros, exact=True),
            as_text(left.output)[:40] if left.output is not None else str(left.error and left.error.code),
            as_text(right.output)[:40] if right.output is not None else str(right.error and right.error.code),
        )
    console.print(table)
    console.print(
        f"mean {runs[0].mean:.4f} → {runs[1].mean:.4f}; cost {_money(runs[0].cost_micros)} → {_money(runs[1].cost_micros)}"
    )


@eval_app.command("cases-from-runs")
def eval_cases_from_runs(
    prompt: Annotated[str, typer.Option("--prompt", help="the prompt id whose captured runs become cases")],
    since: Annotated[str | None, typer.Option(help="only runs started on or after this date (YYYY-MM-DD) or time")] = None,
    limit: Annotated[int | None, typer.Option(min=1, max=LIMIT_MAX, help="the latest N runs at most")] = None,
    out: Annotated[Path | None, typer.Option(help="the JSONL file to write (default: stdout)")] = None,
) -> None:
    """Write JSONL eval cases from captured runs of a prompt (their variables and outputs), so
    production traffic becomes an eval set: load it with define_eval(..., cases="FILE")."""
    from datetime import datetime

    from workbench.evaluate.dataset import cases_from_runs, write_cases

    when = None
    if since is not None:
        try:
            when = datetime.fromisoformat(since)
        except ValueError:
            raise WorkbenchError("WB_CONFIG_INVALID", f"--since {since!r} is not a date or an ISO time",
                                 "pass --since 2026-01-31 or --since 2026-01-31T12:00:00+00:00") from None
        when = when.date() if len(since) == 10 else when
    cases = cases_from_runs(prompt, when, limit)
    write_cases(cases, out)
    if out is not None:
        err_console.print(f"wrote {len(cases)} cases of prompt {prompt} to {out}")


@app.command("check")
def check_command(
    evals: Annotated[Path, typer.Option(help="the folder of suite files")] = Path("evals"),
    lock: Annotated[Path, typer.Option(callback=a_file, help="the prompts lock file")] = Path("evals/prompts.lock"),
    cassettes: Annotated[Path, typer.Option(help="the folder of cassettes")] = Path("cassettes"),
    fmt: FormatOption = Format.table,
) -> None:
    """Every prompt named by an eval, no released prompt changed, baselines valid, cassettes clean
    (CSV and JSON: one row per problem)."""
    from workbench.evaluate.check import check_project

    problems = check_project(evals, lock, cassettes)
    _warn_quarantined()
    if fmt != "table":
        _emit([{"code": problem.code, "cause": problem.cause, "fix": problem.fix, "exit_code": problem.exit_code}
               for problem in problems], fmt, "problems", columns=["code", "cause", "fix", "exit_code"])
    for problem in problems:
        err_console.print(error_text(problem.code, problem.cause, problem.fix, mark="✗ "))
    if problems:
        raise typer.Exit(max(problem.exit_code for problem in problems))
    if fmt == "table":
        console.print(Text.assemble(("✓", "green"), " prompts, baselines and cassettes are consistent"))


def _warn_quarantined() -> None:
    """Records the store set aside are news, not a project defect: named here, without failing."""
    from workbench.config import settings
    from workbench.store import queries

    try:
        frame = queries.read(settings().db, settings().resolved_spool_dir, queries.quarantined_records)
    except (queries.StoreMissing, WorkbenchError):
        return
    if frame.height:
        first = frame.row(0, named=True)
        err_console.print(Text.assemble(("! ", "yellow"), f"{frame.height} record(s) in quarantine in {settings().db} "
                                        f"(the store could not take them; kept): latest: {first['kind']}: "
                                        f"{first['reason']}\n  see: workbench report quarantine"))


@prompts_app.command("lock")
def prompts_lock(
    evals: Annotated[Path, typer.Option(help="the folder of suite files")] = Path("evals"),
    lock: Annotated[Path, typer.Option(callback=a_file, help="the prompts lock file")] = Path("evals/prompts.lock"),
) -> None:
    """Add every new prompt version to the lock file (a released version's hash never changes)."""
    from workbench.evaluate.prompts import prompts, write_lock
    from workbench.evaluate.suite import load_suites

    if evals.exists():
        load_suites([evals])
    added = write_lock(prompts.all(), lock)
    console.print(f"{lock}: added {', '.join(added) if added else 'nothing'}")


