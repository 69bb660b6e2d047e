"""`workbench eval`, `workbench check` and `workbench prompts`: suites, the gate, the lock file."""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from workbench.cli.core import (
    LIMIT_MAX, Format, FormatOption, _emit, a_file, app, choices, console, err_console, error_text, eval_app, finite,
    prompts_app,
)
from workbench.errors import WorkbenchError

Mode, CompareMode = choices("Mode", "replay", "record", "rerecord", "live"), choices("CompareMode", "replay", "record", "live")
CompareFormat = choices("CompareFormat", "table", "csv", "json", "markdown")

def _suites(names: list[str], evals: Path):
    from workbench.evaluate.suite import find_suite, load_suites

    if not names:
        suites = list(load_suites([evals]).values())
        if not suites:
            raise WorkbenchError("WB_EVAL_SUITE_INVALID", f"no suites under {evals}", "pass --evals DIR or a suite file")
        return sorted(suites, key=lambda suite: suite.name)
    return [find_suite(name, evals) for name in names]


def _progress(total: int, label: str):
    """A progress bar on a terminal; elsewhere (CI, a pipe) none, and none of its imports."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext(), None
    from rich.progress import Progress

    progress = Progress(console=err_console, transient=True)
    task = progress.add_task(escape(label), total=total)  # a suite's name is text, not markup
    return progress, lambda: progress.advance(task)


EpochsOption = Annotated[int | None, typer.Option(min=1, help="run every case N times (default: the suite's epochs)")]
ConfidenceOption = Annotated[float | None, typer.Option(
    help="how sure the gate must be that a drop is not noise, e.g. 0.95 (default: the suite's)")]


@eval_app.command("run")
def eval_run(
    suites: Annotated[list[str] | None, typer.Argument(help="suite names or files (default: every suite)")] = None,
    evals: Annotated[Path, typer.Option(help="the folder of suite files")] = Path("evals"),
    mode: Annotated[Mode | None, typer.Option(help="replay (default), record, rerecord or live")] = None,
    prompt_version: Annotated[str | None, typer.Option(help="run this version of the suite's prompt")] = None,
    record_baseline: Annotated[bool, typer.Option("--record-baseline", help="record the baseline; no gate")] = False,
    max_cost_increase: Annotated[float | None, typer.Option(min=0, callback=finite,
                                                            help="fail if cost per case rises more (0.1 = 10%)")] = None,
    epochs: EpochsOption = None,
    confidence: ConfidenceOption = None,
    junit: Annotated[Path | None, typer.Option(help="write JUnit XML here")] = None,
    markdown: Annotated[Path | None, typer.Option(help="write a Markdown summary here")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the JSON report here")] = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Run suites (replay by default) and gate on the drop from their baselines: exit 0 pass,
    1 regression, 2 could not judge."""
    from workbench.evaluate.gate import evaluate, recording_requested
    from workbench.evaluate.report import print_console, summary, to_markdown, write_json, write_junit

    mode = mode.value if mode is not None else None

    if not record_baseline and recording_requested():
        raise WorkbenchError(
            "WB_EVAL_RECORDING", "WORKBENCH_EVAL_RECORD=1 is set, and the gate never records: nothing was run",
            "unset WORKBENCH_EVAL_RECORD to gate, or pass --record-baseline to record",
        )
    spool = _stand_by_ingester()
    outcomes, refused = [], []
    loaded = _suites(suites or [], evals)
    told = _told_progress(spool, sum(len(suite.cases) for suite in loaded))
    gc.freeze()  # what is loaded so far lives to the end: no collection scans it again
    for suite in loaded:
        progress, advance = _progress(len(suite.cases), f"eval {suite.name}")
        ticks = [tick for tick in (advance, told) if tick is not None]
        try:
            with progress:
                outcomes.append(evaluate(suite, mode, prompt_version, record_baseline, max_cost_increase,
                                         (lambda: [tick() for tick in ticks]) if ticks else None,
                                         epochs=epochs, confidence=confidence))
        except WorkbenchError as exc:  # this suite could not be judged; the others still are
            refused.append(exc)
    # the results are spooled; ingestion into the store happens after exit, off the gate's clock
    if fmt == "table":
        print_console(outcomes, console)
    elif fmt == "json":
        write_json(outcomes, sys.stdout)
    else:
        _emit([{"suite": data["suite"], **{key: row[key] for key in ("case", "score", "baseline", "delta", "cost_micros", "status")}}
               for data in map(summary, outcomes) for row in data["cases"]], fmt, "cases")
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(to_markdown(outcomes), encoding="utf-8")
    for path, write in ((junit, write_junit), (json_out, write_json)):
        if path is not None:  # written a case at a time: a long suite's report is never held whole
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", encoding="utf-8") as handle:
                write(outcomes, handle)
    for outcome in outcomes:
        if outcome.recorded:
            (console if fmt == "table" else err_console).print(f"recorded {outcome.eval_run.suite.baseline_path}")
    _fail_with(refused + [outcome.error for outcome in outcomes if outcome.error is not None])


def _stand_by_ingester():
    """The results reach the store through the ingester the exit hands them to: started now, its
    start-up runs beside the eval's, and the results are in the store sooner after the gate answers.
    Only when the command is the whole process: an app invoked in a longer-lived one (a test's
    CliRunner) would keep one idle for as long as that process lives. Returns the spool it drains
    (None: none stands by)."""
    from workbench.capture import recorder
    from workbench.cli import core

    if not core.whole_process:
        return None
    try:
        if recorder().settings.capture:
            spool = recorder().spool
            spool.stand_by()
            return spool
    except Exception:  # noqa: BLE001 - recording never breaks the command: the exit starts one instead
        pass
    return None


def _told_progress(spool, total: int):
    """A tick per case done that tells `spool` how far the eval is, so that its standby is handed
    the spool's last part before the exit (`Spool.progress`); None without a standby."""
    if spool is None:
        return None
    done = itertools.count(1)
    return lambda: spool.progress(next(done), total)


def _fail_with(errors: list[WorkbenchError]) -> None:
    """Say every problem; exit with the worst (2, could not judge, over 1, a regression)."""
    if not errors:
        return
    worst = max(errors, key=lambda error: error.exit_code)
    for error in errors:
        if error is not worst:
            err_console.print(error_text(error.code, error.cause, error.fix))
    raise worst


@eval_app.command("compare")
def eval_compare(
    suite_name: Annotated[str, typer.Argument(help="the suite")],
    positional: Annotated[list[str] | None, typer.Argument(metavar="VERSION", help="prompt versions (or --versions)")] = None,
    versions: Annotated[str | None, typer.Option(help="prompt versions, comma-separated (default: the suite's)")] = None,
    models: Annotated[str | None, typer.Option(help="models, comma-separated (default: the prompt's)")] = None,
    reference: Annotated[str | None, typer.Option(help="the cell the others are compared with, VERSION:MODEL "
                                                       "(default: the first)")] = None,
    epochs: EpochsOption = None,
    confidence: ConfidenceOption = None,
    evals: Annotated[Path, typer.Option(help="the folder of suite files")] = Path("evals"),
    mode: Annotated[CompareMode | None, typer.Option(help="replay (default: recorded cells only), record (live calls "
                                                          "only for what is not recorded) or live")] = None,
    fmt: Annotated[CompareFormat, typer.Option("--format", help="a table, or CSV, JSON or Markdown")] = CompareFormat.table,
    out: Annotated[Path | None, typer.Option(help="write the CSV, JSON or Markdown here instead of stdout")] = None,
) -> None:
    """Prompt versions x models side by side: per cell the mean and its spread, the cases that moved
    against the reference cell, the cost per case and the latency (median, p95)."""
    from workbench.evaluate.compare import HEADERS, rows, run_matrix, to_csv, to_json, to_markdown

    (suite,) = _suites([suite_name], evals)
    chosen = [*(positional or []), *_listed(versions)] or [suite.prompt.version]
    matrix = run_matrix(suite, chosen, _listed(models) or [suite.prompt.model], mode and mode.value, epochs, reference,
                        confidence)
    if fmt != "table":
        text = {"json": to_json, "csv": to_csv, "markdown": to_markdown}[fmt.value](matrix)
        if out is None:
            sys.stdout.write(text)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
            err_console.print(f"wrote {out}")
    else:
        ran = [cell for cell in matrix.cells if cell.eval_run is not None]
        if len(ran) == 2:  # two cells: case by case first, as `workbench eval compare SUITE v1 v2` always showed
            _two_cells(*ran)
        table = Table(title=f"{suite.name}: {suite.prompt.id}, reference {matrix.reference.label}")
        for name in HEADERS:
            table.add_column(name)
        for row in rows(matrix):
            table.add_row(*row)
        console.print(table)
    # a cell that could not run (never recorded, in replay) leaves the matrix incomplete: exit 2
    _fail_with([WorkbenchError(cell.error.code, f"cell {cell.label} not run: {cell.error.cause}", cell.error.fix)
                for cell in matrix.cells if cell.error is not None])


def _listed(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _two_cells(left, right) -> None:
    """Two cells case by case: score, output, cost (the form of `workbench eval compare SUITE v1 v2`)."""
    from workbench.evaluate.scorers import as_text
    from workbench.money import format_costs

    a, b = left.eval_run, right.eval_run
    table = Table(title=f"{left.label} vs {right.label}")
    for name in ("case", f"score {left.version}", f"score {right.version}", "Δ", f"cost {left.version}",
                 f"cost {right.version}", f"output {left.version}", f"output {right.version}"):
        table.add_column(name)
    for one, two in zip(a.results, b.results, strict=True):
        delta = "" if one.score is None or two.score is None else f"{two.score - one.score:+.2f}"
        table.add_row(
            one.case_id, _score(one.score), _score(two.score), delta,
            format_costs(*one.costs, exact=True), format_costs(*two.costs, exact=True),  # currencies apart
            as_text(one.output)[:40] if one.output is not None else str(one.error and one.error.code),
            as_text(two.output)[:40] if two.output is not None else str(two.error and two.error.code),
        )
    console.print(table)
    console.print(f"mean {_score(a.mean, 4)} → {_score(b.mean, 4)}; cost {format_costs(*a.costs)} → {format_costs(*b.costs)}")


def _score(value: float | None, places: int = 2) -> str:
    return "error" if value is None else f"{value:.{places}f}"


@eval_app.command("cases-from-runs")
def eval_cases_from_runs(
    prompt: Annotated[str, typer.Option("--prompt", help="the prompt id whose captured runs become cases")],
    since: Annotated[str | None, typer.Option(help="only runs started on or after this date (YYYY-MM-DD) or time")] = None,
    limit: Annotated[int | None, typer.Option(min=1, max=LIMIT_MAX, help="the latest N runs at most")] = None,
    out: Annotated[Path | None, typer.Option(help="the JSONL file to write (default: stdout)")] = None,
    conflicts: Annotated[Path | None, typer.Option(help="also write the conflicting inputs here, as JSONL")] = None,
    include_evals: Annotated[bool, typer.Option("--include-evals", help="also eval-case and judge runs")] = False,
    include_replayed: Annotated[bool, typer.Option("--include-replayed", help="also runs answered from a cassette")] = False,
) -> None:
    """Write JSONL eval cases from captured production runs of a prompt (their variables and
    outputs), one per distinct input, so traffic becomes an eval set: load it with
    define_eval(..., cases="FILE"). An input answered in different ways is reported, not written."""
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
    dataset = cases_from_runs(prompt, when, limit, include_evals=include_evals, include_replayed=include_replayed)
    if dataset.cases:
        write_cases(dataset.cases, out)
    for conflict in dataset.conflicts:
        answers = "; ".join(f"{json.dumps(answer['expected'], ensure_ascii=False)[:120]} ×{answer['runs']} "
                            f"(runs {', '.join(answer['run_ids'][:3])})" for answer in conflict["answers"])
        err_console.print(Text.assemble(("conflict", "yellow"), f", not written: {json.dumps(conflict['vars'], ensure_ascii=False)[:200]}"
                                        f" was answered {len(conflict['answers'])} ways: {answers}"))
    if conflicts is not None and dataset.conflicts:
        write_cases(dataset.conflicts, conflicts)
    err_console.print(
        f"{dataset.runs} runs of prompt {prompt}: {len(dataset.cases)} cases"
        + (f" written to {out}" if out is not None and dataset.cases else "")
        + (f"; {len(dataset.conflicts)} inputs with conflicting answers left out (review them"
           + (f" in {conflicts}" if conflicts is not None else ", e.g. with --conflicts FILE")
           + ", then add each with the right answer by hand)" if dataset.conflicts else ""))


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


