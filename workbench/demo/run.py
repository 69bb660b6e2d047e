"""The demo end to end: the workload, the example suites gated in replay mode, and a summary read
back from the store with the same named queries the dashboard uses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

import workbench
from workbench.capture import configure, flush
from workbench.demo.workload import SMALL_MODEL, SMALL_WINDOW, Demo
from workbench.errors import WorkbenchError
from workbench.models import load_registry, register_model
from workbench.money import format_micros


@dataclass
class Summary:
    calls: int
    runs: int
    spend_micros: int
    unpriced_calls: int
    cache_read_tokens: int
    cache_savings_micros: int
    failed_runs: int
    failed_cost_micros: int
    compactions: int
    verdicts: dict[str, str]


def project_root() -> Path:
    """Where the example suites and models.toml are: the working directory when it has them, else
    the checkout Workbench was installed from (`pip install -e .`)."""
    for candidate in (Path.cwd(), Path(workbench.__file__).resolve().parents[1]):
        if (candidate / "evals").is_dir() and (candidate / "models.toml").is_file():
            return candidate
    return Path.cwd()


def _register_models(root: Path) -> None:
    if (root / "models.toml").is_file():
        load_registry(root / "models.toml")
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
    settings = configure(db=db)
    root = project_root()
    _register_models(root)
    demo = Demo(seed)
    steps = [
        ("official SDKs: chats, streams, Responses, cached docs Q&A, a 529, a cut stream", demo.sdk_traffic),
        ("runtime: prompt versions, agents with tools, compaction, failures of every kind",
         lambda: demo.runtime_traffic(root)),
    ]
    verdicts: dict[str, str] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("demo", total=len(steps) + 1)
        for label, step in steps:
            progress.update(task, description=label)
            step()
            progress.advance(task)
        progress.update(task, description="example eval suites, replayed from cassettes and gated")
        verdicts = _gate_examples(root)
        progress.advance(task)
    flush()
    return summarize(settings.db, verdicts)


def summarize(db: Path, verdicts: dict[str, str]) -> Summary:
    from workbench.store import queries
    from workbench.store.db import open_store

    everything = queries.Filters()
    with open_store(db, read_only=True) as con:
        calls = queries.call_totals(con, everything).row(0, named=True)
        runs = queries.run_totals(con, everything).row(0, named=True)
        cache = queries.cache_totals(queries.cache_savings(con, everything)).row(0, named=True)
        failures = queries.failure_totals(con, everything).row(0, named=True)
        compactions = queries.compaction_totals(con, everything).row(0, named=True)
    return Summary(
        calls=calls["calls"], runs=runs["runs"], spend_micros=calls["cost_micros"] or 0,
        unpriced_calls=calls["unpriced_calls"] or 0, cache_read_tokens=cache["cache_read_tokens"] or 0,
        cache_savings_micros=cache["net_savings_micros"] or 0, failed_runs=failures["failed_runs"] or 0,
        failed_cost_micros=failures["cost_micros"] or 0, compactions=compactions["events"] or 0,
        verdicts=verdicts,
    )


def print_summary(summary: Summary, db: Path, console: Console) -> None:
    console.print(f"[bold]Workbench demo[/] — store: {db}")
    console.print(f"  calls recorded     {summary.calls:,} in {summary.runs:,} runs"
                  + (f" ({summary.unpriced_calls} unpriced)" if summary.unpriced_calls else ""))
    console.print(f"  spend              {format_micros(summary.spend_micros)}")
    console.print(f"  prompt cache       {summary.cache_read_tokens:,} tokens read, "
                  f"net savings {format_micros(summary.cache_savings_micros)}")
    console.print(f"  compactions        {summary.compactions}")
    console.print(f"  failed runs        {summary.failed_runs}, billed {format_micros(summary.failed_cost_micros)}")
    for name, verdict in summary.verdicts.items():
        console.print(f"  eval {name:<13} {verdict}")
    console.print("\nNext:")
    for command in ("workbench dashboard", "workbench report cost --by model", "workbench report failures",
                    "workbench runs list", "workbench eval", "workbench eval compare classifier v1 v2",
                    "workbench eval compare classifier --versions v1,v2 --models claude-haiku-4-5,gpt-4o-mini"):
        console.print(f"  {command}")
