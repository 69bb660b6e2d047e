"""`workbench cassettes`: show, check and export vcrpy cassettes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from workbench.cli.core import DbOption, Format, FormatOption, _emit, _money, cassettes_app, console
from workbench.errors import WorkbenchError

@cassettes_app.command("show")
def cassettes_show(
    path: Annotated[Path, typer.Argument(help="a cassette file (YAML or JSON)")],
    fmt: FormatOption = Format.table,
    models: Annotated[Path | None, typer.Option(help="models.toml to price with")] = None,
) -> None:
    """Every interaction of a cassette as a normalized call, priced (JSON: every field of each call)."""
    from workbench.models import load_registry
    from workbench.replay.cassette import load_cassette
    from workbench.wire import parse_exchange, priced

    registry = load_registry(models)
    calls = [priced(parse_exchange(interaction.exchange()), registry) for interaction in load_cassette(path)]
    if fmt != "table":
        _emit([call.flat() for call in calls], fmt, str(path))
        return
    table = Table(title=str(path), show_footer=True)
    columns = ["#", "wire", "model", "status", "stop", "input", "cache read", "cache write", "output", "cost"]
    for name in columns:
        table.add_column(name, justify="right" if name not in {"wire", "model", "stop"} else "left")
    total = 0
    unpriced = 0
    for index, call in enumerate(calls):
        if call.cost_micros is None and call.settled:
            unpriced += 1
        total += call.cost_micros or 0
        table.add_row(
            str(index), call.wire, call.model_served or call.model_requested or "-", str(call.http_status),
            call.stop_reason or call.error_type or "-", str(call.input_tokens), str(call.cache_read_tokens),
            str(call.cache_write_tokens), str(call.output_tokens),
            _money(call.cost_micros, call.currency, exact=True) if call.settled else "-",
        )
    table.columns[0].footer = "total"
    table.columns[-1].footer = _money(total) + (f" + {unpriced} unpriced" if unpriced else "")
    console.print(table)


@cassettes_app.command("check")
def cassettes_check(
    path: Annotated[Path, typer.Argument(help="a cassette or a folder of cassettes")] = Path("cassettes"),
    fmt: FormatOption = Format.table,
) -> None:
    """Every cassette loads, holds no secret-looking value, and was fully played by the last replay."""
    from workbench.replay.check import check

    reports = check(path)
    if not reports:
        raise WorkbenchError("WB_CASSETTE_NOT_FOUND", f"no cassette (.json, .yaml) under {path}",
                             "pass the folder your cassettes are in: workbench cassettes check DIR")
    if fmt != "table":
        _emit([{"path": str(report.path), "interactions": report.interactions,
                "problem": report.error.code if report.error else ("WB_CASSETTE_SECRET" if report.secrets else None),
                "detail": report.error.cause if report.error else "; ".join(report.secrets[:5]) or None,
                "never_played": report.never_played} for report in reports], fmt, "cassettes")
    failed = 0
    for report in reports:
        if report.error is not None:
            failed += 1
            _line(fmt, ("✗", "red"), f" {report.path}: {report.error.code}: {report.error.cause}")
            continue
        if report.secrets:
            failed += 1
            _line(fmt, ("✗", "red"), f" {report.path}: looks like a secret: " + "; ".join(report.secrets[:5]))
        else:
            _line(fmt, ("✓", "green"), f" {report.path}: {report.interactions} interactions")
        if report.never_played:
            _line(fmt, ("  stale:", "yellow"),
                  f" interactions {report.never_played} were not played by the last replay run")
    _line(fmt, f"{len(reports)} cassettes, {failed} with problems")
    if failed:
        first = next(report for report in reports if not report.ok)
        if first.error is not None:
            raise first.error
        raise WorkbenchError(
            "WB_CASSETTE_SECRET",
            f"{first.path}: {first.secrets[0]}",
            f"re-record {first.path} (Workbench scrubs secrets when it records), or remove the value by hand",
        )


def _line(fmt, *parts) -> None:
    """A line of the table view (nothing when the rows went to stdout as CSV or JSON)."""
    if fmt == "table":
        console.print(Text.assemble(*parts))


@cassettes_app.command("export")
def cassettes_export(
    out: Annotated[Path, typer.Argument(help="the cassette to write (.json or .yaml)")],
    run_id: Annotated[str, typer.Option("--run", help="the id of a captured run, or its start or end")],
    db: DbOption = None,
) -> None:
    """Turn a captured run into a cassette and an eval case, so a failure becomes a regression test."""
    from workbench.replay.export import export_run

    cassette, case = export_run(run_id, out, db)
    console.print(f"wrote {cassette} and {case}")


