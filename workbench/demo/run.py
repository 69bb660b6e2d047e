"""The demo end to end: the workload, the example suites gated in replay mode, and a summary read
back from the store with the same named queries the dashboard uses."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.text import Text

from workbench.capture import configure, flush
from workbench.demo.examples import example_project, project_for_demo
from workbench.demo.workload import SMALL_MODEL, SMALL_WINDOW, WEEKS, Day, Demo
from workbench.errors import WorkbenchError
from workbench.models import load_registry, register_model
from workbench.money import format_costs


@dataclass
class Summary:
    calls: int
    runs: int
    spend: str  # money per currency, joined (a sum never adds two currencies)
    unpriced_calls: int
    cache_read_tokens: int
    cache_savings: str
    failed_runs: int
    failed_cost: str
    compactions: int
    verdicts: dict[str, str]
    project: Path = Path(".")  # where the example suites ran
    wrote_example: bool = False  # the example project was written into the working folder


def _register_models(root: Path) -> None:
    # the example's rows price every call the demo makes, whatever the project's own file holds
    for path in dict.fromkeys([example_project() / "models.toml", root / "models.toml"]):
        if path.is_file():
            load_registry(path)
    # the demo's own row: Haiku's prices with a small window, so compaction happens in seconds
    register_model(
        id=SMALL_MODEL, provider="anthropic", context_window=SMALL_WINDOW, max_output=4096, input=100, output=500,
        cache_read=10, cache_write_5m=125, source="workbench demo: claude-haiku-4-5 prices, small window",
        as_of=date(2025, 10, 1),
    )


def _gate_examples(root: Path) -> dict[str, str]:
    """Gate every example suite, and replay the recorded matrices of `workbench eval compare` (so the
    dashboard's Evals page has one to show)."""
    from workbench.demo.examples import MATRIX
    from workbench.evaluate.compare import run_matrix
    from workbench.evaluate.gate import evaluate
    from workbench.evaluate.suite import load_suites

    verdicts = {}
    suites = load_suites([root / "evals"]) if (root / "evals").is_dir() else {}
    for name, suite in sorted(suites.items()):
        try:
            outcome = evaluate(suite, mode="replay")
            verdicts[name] = "pass" if outcome.error is None else (
                f"{'regression' if outcome.exit_code == 1 else 'no verdict'} ({outcome.error.code})")
            if name in MATRIX:
                run_matrix(suite, *MATRIX[name], mode="replay")
        except WorkbenchError as exc:
            verdicts[name] = f"could not judge ({exc.code})"
    return verdicts


def run_demo(seed: int = 7, db: Path | None = None, console: Console | None = None) -> Summary:
    console = console or Console()
    from workbench.store.db import open_store

    settings = configure(db=db)
    # the store made (or opened) for writing first: recording never breaks the app, so a store nobody
    # can write would let the demo record for half a minute and only then fail, naming the wrong cause
    with open_store(settings.db):
        pass
    root, wrote = project_for_demo(Path.cwd())
    _register_models(root)
    demo = Demo(seed, root)
    verdicts: dict[str, str] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("demo", total=7 * WEEKS + 1)

        def day_done(day: Day) -> None:
            progress.update(task, description=f"recording {day.start:%a %d %b}: chats, docs Q&A, triage, "
                            "agents, batches, failures")
            progress.advance(task)

        demo.record(datetime.now(timezone.utc), day_done)
        progress.update(task, description="example eval suites, replayed from cassettes and gated")
        verdicts = _gate_examples(root)
        progress.advance(task)
    flush()
    summary = summarize(settings.db, verdicts)
    summary.project, summary.wrote_example = root, wrote
    return summary


def summarize(db: Path, verdicts: dict[str, str]) -> Summary:
    from workbench.store import queries
    from workbench.store.db import open_store

    everything = queries.Filters()
    with open_store(db, read_only=True) as con:
        calls = queries.call_totals(con, everything).row(0, named=True)
        spend = queries.spend_by_currency(con, everything)
        runs = queries.run_totals(con, everything).row(0, named=True)
        cache = queries.cache_totals(queries.cache_savings(con, everything))
        failures = queries.failure_totals(con, everything)
        compactions = queries.compaction_totals(con, everything).row(0, named=True)
    # a row per currency each: the counts summed, the money shown per currency, never added across
    return Summary(
        calls=calls["calls"], runs=runs["runs"], spend=by_currency(spend, "cost_micros"),
        unpriced_calls=calls["unpriced_calls"] or 0, cache_read_tokens=cache["cache_read_tokens"].sum(),
        cache_savings=by_currency(cache, "net_savings_micros"), failed_runs=failures["failed_runs"].sum(),
        failed_cost=by_currency(failures.filter(failures["priced_calls"] > 0), "cost_micros"),
        compactions=compactions["events"] or 0, verdicts=verdicts,
    )


def by_currency(frame, column: str) -> str:
    """A frame's amounts per currency, joined (`0.0123 USD + 0.5 EUR`): never one sum of two currencies."""
    return format_costs({row["currency"]: row[column] for row in frame.iter_rows(named=True)
                         if row["currency"] is not None})


def print_summary(summary: Summary, db: Path, console: Console, db_option: Path | None = None) -> None:
    """The figures, then the commands to try next, each runnable from the working folder as printed
    (`db_option`: the `--db` the demo was given, repeated on every command that reads the store)."""
    if summary.wrote_example:
        console.print(Text(f"Wrote the example project into {summary.project}: models.toml, evals/ and cassettes/"))
    console.print(Text.assemble(("Workbench demo", "bold"), f" — store: {db}"))
    console.print(f"  calls recorded     {summary.calls:,} in {summary.runs:,} runs"
                  + (f" ({summary.unpriced_calls} unpriced)" if summary.unpriced_calls else ""))
    console.print(f"  spend              {summary.spend}")
    console.print(f"  prompt cache       {summary.cache_read_tokens:,} tokens read, "
                  f"net savings {summary.cache_savings}")
    console.print(f"  compactions        {summary.compactions}")
    console.print(f"  failed runs        {summary.failed_runs}, billed {summary.failed_cost}")
    for name, verdict in summary.verdicts.items():
        console.print(f"  eval {name:<13} {verdict}")
    console.print("\nNext:")
    store = f" --db {shlex.quote(str(db_option))}" if db_option is not None else ""
    evals = "" if summary.project.resolve() == Path.cwd().resolve() else f" --evals {shlex.quote(str(summary.project / 'evals'))}"
    for command in (f"workbench dashboard{store}", f"workbench report cost --by model{store}",
                    f"workbench report failures{store}", f"workbench runs list{store}", f"workbench eval{evals}",
                    f"workbench eval compare classifier v1 v2{evals}",
                    f"workbench eval compare classifier --versions v1,v2 --models claude-haiku-4-5,gpt-4o-mini{evals}"):
        console.print(Text(f"  {command}"))
