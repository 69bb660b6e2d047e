"""The command tree, the output conventions every command shares, and the one place errors are
rendered, with one exit-code table (`WorkbenchError.exit_code`)."""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from workbench.errors import WorkbenchError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Record, replay, evaluate and audit LLM calls.")
cassettes_app = typer.Typer(no_args_is_help=True, help="Inspect, check and export vcrpy cassettes.")
app.add_typer(cassettes_app, name="cassettes")


class _EvalGroup(typer.core.TyperGroup):
    """`workbench eval SUITE ...` runs suites; `workbench eval compare|cases-from-runs` are commands."""

    def parse_args(self, ctx, args):
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(cls=_EvalGroup, help="Run eval suites and gate on drops from their baselines.")
app.add_typer(eval_app, name="eval")
prompts_app = typer.Typer(no_args_is_help=True, help="Versioned prompts and their lock file.")
app.add_typer(prompts_app, name="prompts")
report_app = typer.Typer(no_args_is_help=True, help="Cost, cache, compaction, failure and eval reports from the store.")
app.add_typer(report_app, name="report")
runs_app = typer.Typer(no_args_is_help=True, help="Captured runs: list them, show one.")
app.add_typer(runs_app, name="runs")

# wide enough for the tables when output goes to a pipe or a CI log
console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 140)


def _money(micros: int | None, currency: str | None = "USD", exact: bool = False) -> str:
    from workbench.money import format_exact, format_micros

    return (format_exact if exact else format_micros)(micros, currency or "USD")


DbOption = Annotated[Path | None, typer.Option(help="the store (default: the db setting)")]
SinceOption = Annotated[str | None, typer.Option(help="only from this day on (YYYY-MM-DD)")]
FormatOption = Annotated[str, typer.Option("--format", help="table, csv or json")]


def _read(db: Path | None, query):
    """Run `query(con)` on the store: pending spools ingested first, read-only, closed after."""
    from workbench.config import settings
    from workbench.store import queries

    path = db or settings().db
    try:
        spool = settings().resolved_spool_dir if db is None else path.parent / "spool"
        return queries.read(path, spool, query, ingest_wait=True)
    except queries.StoreMissing:
        raise WorkbenchError(
            "WB_STORE_INVALID", f"there is no store at {path} yet",
            "record something first: `workbench demo`, or run your app with workbench.http_client()",
        ) from None


def _filters(since: str | None):
    from datetime import date

    from workbench.store.queries import Filters

    try:
        return Filters(date_from=date.fromisoformat(since) if since else None)
    except ValueError:
        raise WorkbenchError("WB_CONFIG_INVALID", f"--since {since!r} is not a date", "use --since 2026-01-31") from None


def _emit(frame, fmt: str, title: str) -> None:
    """A frame as a table (money in currency), CSV or JSON (money as exact integer micros)."""
    if fmt == "csv":
        print(frame.write_csv(), end="")
        return
    if fmt == "json":
        print(json.dumps(frame.to_dicts(), indent=2, default=str))
        return
    if fmt != "table":
        raise WorkbenchError("WB_CONFIG_INVALID", f"--format {fmt!r}", "use table, csv or json")
    import polars as pl

    table = Table(title=title)
    for name in frame.columns:
        table.add_column(name.removesuffix("_micros"), justify="left" if frame[name].dtype == pl.Utf8 else "right")
    for row in frame.iter_rows(named=True):
        table.add_row(*[
            _money(value) if name.endswith("_micros") and value is not None else ("" if value is None else str(value))
            for name, value in row.items()
        ])
    console.print(table if frame.height else f"{title}: nothing recorded")



def main() -> None:
    # a command allocates millions of short-lived objects and hardly any cycles: collect rarely, as
    # mypy does (a 1,000-case eval: 200 young collections become 8, about 0.3 s less CPU)
    gc.set_threshold(20_000, 20, 20)
    _exit(_run())


def _run() -> int:
    try:
        code = app(standalone_mode=False)
        return code if isinstance(code, int) else 0
    except WorkbenchError as exc:
        # escaped: a cause names values such as `exact[category]`, which are not console markup
        err_console.print(f"[bold red]{exc.code}[/]: {escape(exc.cause)}\n[bold]fix:[/] {escape(exc.fix)}")
        return exc.exit_code
    except typer.Abort:
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # click usage errors carry their own exit code
        code = getattr(exc, "exit_code", None)
        if code is None:
            raise
        if hasattr(exc, "show"):
            exc.show()
        return code


def _exit(code: int) -> None:
    """End the command without the interpreter's teardown, which frees every object of every module
    one by one (about 0.1 s after an eval). The exit hooks run first, in the order a normal exit runs
    them (threads joined with the spool's flush, then atexit: OpenTelemetry's export), so nothing
    recorded is lost."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:  # another interpreter: the normal way out
        sys.exit(code)
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say
            pass
    os._exit(code)
