"""The command tree, the conventions every command shares (options with a fixed set of values,
one output convention: a table by default, `--format csv|json` to stdout), and the one place errors
are rendered, with one exit-code table (`WorkbenchError.exit_code`).

Text is never read as rich markup: the consoles print `[[model]]`, paths and case ids as they are;
style comes from `Text` objects only."""

from __future__ import annotations

import atexit
import copy
import gc
import json
import math
import os
import sys
import threading
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from workbench.errors import WorkbenchError


def choices(name: str, *values: str) -> type[Enum]:
    """An option's fixed set of values: parsing checks it (before anything opens the store) and
    `--help` lists it. Members compare equal to their strings; `.value` is the plain string."""
    return Enum(name, {value: value for value in values}, type=str)


def _version(shown: bool) -> None:
    if shown:
        from workbench import __version__

        print(f"workbench {__version__}")
        raise typer.Exit()


app = typer.Typer(no_args_is_help=True, add_completion=False, help="Record, replay, evaluate and audit LLM calls.")


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """Record, replay, evaluate and audit LLM calls."""


cassettes_app = typer.Typer(no_args_is_help=True, help="Inspect, check and export vcrpy cassettes.")
app.add_typer(cassettes_app, name="cassettes")


class _EvalGroup(typer.core.TyperGroup):
    """`workbench eval SUITE ...` runs suites; `workbench eval compare|cases-from-runs` are commands.
    `workbench eval --help` is the help of `run` (the options the README uses), ending with the
    other commands."""

    def parse_args(self, ctx, args):
        if args and args[0] in ("--help", "-h"):
            others = ", ".join(f"`{ctx.command_path} {name}`" for name in self.commands if name != "run")
            self.commands["run"].epilog = f"`run` may be left out. Other commands: {others} (each has --help)."
            args = ["run", *args]
        elif not args or args[0] not in self.commands:
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
console = Console(width=None if sys.stdout.isatty() else 140, markup=False)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 140, markup=False)


def _money(micros: int | None, currency: str | None = "USD", exact: bool = False) -> str:
    """An exact amount (`workbench.money.format_amount`), or every digit of it (`exact`)."""
    from workbench.money import format_amount, format_exact

    return (format_exact if exact else format_amount)(micros, currency or "USD")


Format = choices("Format", "table", "csv", "json")


def a_file(path: Path | None) -> Path | None:
    """An option that names a file must not name a folder (the store, a lock file)."""
    if path is not None and path.is_dir():
        raise typer.BadParameter(f"{path} is a folder, not a file")
    return path


DbOption = Annotated[Path | None, typer.Option(callback=a_file, help="the store (default: the db setting)")]
SinceOption = Annotated[str | None, typer.Option(help="only from this day on (YYYY-MM-DD), or the last 30m, 12h, 1d, 2w")]
FormatOption = Annotated[Format, typer.Option("--format", help="a table, or CSV or JSON to stdout (money in exact micros)")]
# a count anyone can mean; past it, a store would be asked to count beyond its integers
LIMIT_MAX = 1_000_000_000


def _read(db: Path | None, query):
    """Run `query(con)` on the store: pending spools ingested first, read-only, closed after."""
    from workbench.config import settings, spool_dir_of
    from workbench.store import queries

    path = db or settings().db
    try:
        spool = settings().resolved_spool_dir if db is None else (settings().spool_dir or spool_dir_of(path))
        return queries.read(path, spool, query, ingest_wait=True)
    except queries.StoreMissing:
        raise WorkbenchError(
            "WB_STORE_INVALID", f"there is no store at {path} yet",
            "record something first: `workbench demo`, or run your app with workbench.http_client()",
        ) from None


_SPANS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _filters(since: str | None):
    from datetime import date, datetime, timedelta, timezone

    from workbench.store.queries import Filters

    text = (since or "").strip().lower()
    try:
        if text[:-1].isdigit() and text[-1:] in _SPANS:  # a span back from now: 1d is the last 24 hours
            return Filters(date_from=datetime.now(timezone.utc) - timedelta(seconds=int(text[:-1]) * _SPANS[text[-1]]))
        return Filters(date_from=date.fromisoformat(since) if since else None)
    except ValueError:
        raise WorkbenchError("WB_CONFIG_INVALID", f"--since {since!r} is not a date or a span",
                             "use --since 2026-01-31, or --since 1d (also 30m, 12h, 2w)") from None


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


_FOLD_AT = 20  # a table's text longer than this folds onto more lines


def _emit(data, fmt: Format | str, title: str, columns: list[str] | None = None) -> None:
    """Rows (a polars frame, or a list of dicts with these `columns`) as a table (money exact, in its
    currency), or as CSV or JSON on stdout (money as exact integer micros, every field). Ids print whole."""
    rows = data if isinstance(data, list) else data.to_dicts()
    columns = list(rows[0]) if rows else (columns or ([] if isinstance(data, list) else list(data.columns)))
    if fmt == "json":
        print(json.dumps(rows, indent=2, default=_cell))
        return
    if fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_cell(row.get(name)) for name in columns] for row in rows)
        return
    if not rows:
        console.print(f"{title}: nothing recorded")
        return
    # one currency: named once, in the money columns' headers
    currencies = {row["currency"] for row in rows if row.get("currency")} if "currency" in columns else {"USD"}
    single = next(iter(currencies)) if len(currencies) == 1 else None
    # the currency when one is named in the headers, and unpriced counts a cost beside them names
    named = {name.replace("cost_micros", "unpriced_calls") for name in columns if "cost_micros" in name}
    shown = [name for name in columns if not (single and name == "currency") and name not in named]
    cells = [[_money_cell(name, row) if name.endswith("_micros") else _cell(row.get(name)) for name in shown]
             for row in rows]
    if single:
        cells = [[cell.removesuffix(f" {single}") if name.endswith("_micros") else cell
                  for name, cell in zip(shown, line)] for line in cells]
    table = Table(title=title)
    headers, floors = [], []
    for index, name in enumerate(shown):
        sample = next((row[name] for row in rows if row.get(name) is not None), None)
        numeric = isinstance(sample, (int, float)) and not isinstance(sample, bool)
        headers.append(f"{name.removesuffix('_micros')} ({single})" if single and name.endswith("_micros") else name)
        # an id, an amount or a short value (a time, a status, a count) is printed whole on one line;
        # longer text folds at 20; a header breaks at its spaces, never inside a word
        longest = max(len(line[index]) for line in cells)
        whole = name.endswith(("_id", "_micros")) or longest <= _FOLD_AT
        floors.append(max(longest if whole else _FOLD_AT, *map(len, headers[-1].split())))
        table.add_column(headers[-1], justify="right" if numeric else "left", no_wrap=whole, overflow="fold",
                         min_width=floors[-1])
    # each column takes its width plus a border and a space each side: squeezed below that, rich cuts
    # columns to nothing and crops the right edge; too wide, each row is a block of `name  value` lines
    if sum(floors) + 3 * len(floors) + 1 > console.width:
        _blocks(title, headers, cells)
        return
    for line in cells:
        table.add_row(*line)
    console.print(table)


def _blocks(title: str, headers: list[str], cells: list[list[str]]) -> None:
    """Rows too wide for the terminal as a table, one block each (psql's expanded display)."""
    console.print(Text(f"{title}: {len(cells):,} row{'' if len(cells) == 1 else 's'}", style="italic"))
    for number, line in enumerate(cells, 1):
        console.print(Text(f"── {number} ".ljust(min(console.width, 40), "─"), style="dim"))
        block = Table.grid(padding=(0, 2))
        block.add_column(no_wrap=True, style="bold")
        block.add_column(overflow="fold")
        for header, cell in zip(headers, line):
            block.add_row(header, cell)
        console.print(block)


def _money_cell(name: str, row: dict) -> str:
    """Money exact, in the row's currency; a cost with nothing priced is `unpriced`, never 0.00."""
    from workbench.money import format_costs

    value = row.get(name)
    unpriced = row.get(name.replace("cost_micros", "unpriced_calls"), 0) if "cost_micros" in name else 0
    if value is None and not unpriced:
        return ""
    return format_costs({} if value is None else {row.get("currency") or "USD": value}, unpriced or 0)


def error_text(code: str, cause: str, fix: str, mark: str = "") -> Text:
    """How every error reads: the code and the cause, then the fix on a line of its own (under a
    `mark` such as a list's ✗), all literal."""
    return Text.assemble((mark, "red"), (code, "bold red"), ": ", cause, "\n", " " * len(mark), ("fix:", "bold"), " ", fix)


def finite(value: float | None) -> float | None:
    """An option's number must be a number: nan and inf pass a range check, never this."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


# True when this process runs one command and ends with it (`main`, the `workbench` executable), not
# when a caller invokes the app in its own process (a test's CliRunner, which outlives the command)
whole_process = False


def main() -> None:
    global whole_process
    whole_process = True
    # a command allocates millions of short-lived objects and hardly any cycles: collect rarely, as
    # mypy does (a 1,000-case eval: 200 young collections become 8, about 0.3 s less CPU)
    gc.set_threshold(20_000, 20, 20)
    _exit(_run())


def command_tree(argv: list[str]) -> typer.Typer:
    """The tree to parse `argv` with: only the branch its first word names. Typer builds every
    parameter of every command it is given before it parses (about 5% of a failing command's start-up);
    `--help`, `--version`, no word or a word that names nothing get the whole tree, so that they list
    every command."""
    name = argv[0] if argv else None
    branch = copy.copy(app)  # a shallow copy: the lists below are its own, the commands are shared
    branch.registered_groups = [group for group in app.registered_groups if group.name == name]
    branch.registered_commands = [command for command in app.registered_commands if command.name == name]
    return branch if branch.registered_groups or branch.registered_commands else app


def _run() -> int:
    try:
        code = command_tree(sys.argv[1:])(standalone_mode=False)
        return code if isinstance(code, int) else 0
    except WorkbenchError as exc:
        err_console.print(error_text(exc.code, exc.cause, exc.fix))
        return exc.exit_code
    except typer.Abort:
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BrokenPipeError:  # `workbench runs list | head`: the reader has what it wanted
        return 0
    except OSError as exc:  # a path given on the command line that cannot be read or written
        where = exc.filename if exc.filename is not None else "a file"
        err_console.print(error_text("WB_PATH_INVALID", f"{where}: {exc.strerror or exc}",
                                     "pass a file you can read (or, for an output, a file in a folder you can write)"))
        return 2
    except Exception as exc:  # the parser's own errors (a bad option, a value not among the choices)
        code = getattr(exc, "exit_code", None)
        if code is None or not hasattr(exc, "format_message"):
            raise
        ctx = getattr(exc, "ctx", None)
        if code == 0 or ctx is None or "NoArgsIsHelp" in type(exc).__name__:
            exc.show()  # help asked for by giving no arguments: the help is the answer
            return code
        usage = ctx.get_usage().removeprefix("Usage: ")
        err_console.print(error_text("WB_CLI_USAGE", exc.format_message(), f"{usage} (see `{ctx.command_path} --help`)"))
        return 2


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

store_app = typer.Typer(no_args_is_help=True, help="Maintain a store, or copy one into another (a file into a lake, and back).")
app.add_typer(store_app, name="store")
