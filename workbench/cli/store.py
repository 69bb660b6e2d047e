"""`workbench store`: keep a DuckLake store compact, and copy a store into another."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from workbench.cli.core import DbOption, Format, FormatOption, _emit, console, store_app
from workbench.errors import WorkbenchError


def _existing(db: Path | None):
    """The store a command works on (--db, else the db setting): a lake, or a file that exists; a
    missing file is never created here (a typo would make an empty store and report nothing)."""
    from workbench.config import is_lake, settings

    store = db or settings().db
    if not is_lake(store) and not Path(store).exists():
        raise WorkbenchError("WB_STORE_INVALID", f"there is no store at {store}",
                             "name an existing store with --db, or record something first: `workbench demo`")
    return store


@store_app.command("maintain")
def store_maintain(
    db: DbOption = None,
    keep_days: Annotated[float, typer.Option(min=0, help="keep the snapshots of the last N days (time travel)")] = 7.0,
    fmt: FormatOption = Format.table,
) -> None:
    """DuckLake's maintenance: fold the rollups' appended rows into one row per group (figures
    unchanged), flush inlined rows into Parquet files, merge adjacent small files, expire snapshots
    older than --keep-days, delete the files no snapshot needs. Run it from one machine, e.g.
    nightly; a local file store is checkpointed only."""
    from workbench.store.lake import maintain_store

    done = maintain_store(_existing(db), keep_days)
    if fmt != "table":
        _emit([{"step": step, "count": count} for step, count in done.items()], fmt, "maintain")
        return
    table = Table(title="store maintain")
    table.add_column("step")
    table.add_column("count", justify="right")
    for step, count in done.items():
        table.add_row(step.replace("_", " "), str(count))
    console.print(table if done else "a local file store: checkpointed, nothing else to do")


@store_app.command("copy")
def store_copy(
    to: Annotated[str, typer.Option("--to", help="the store to copy into: a file path or ducklake:...")],
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Copy every record of the store (--db, default the db setting) into another: a local file
    into a lake, or a lake into a file. Idempotent: run again, it adds only what is missing."""
    from workbench.config import is_lake
    from workbench.store.copy import copy_store
    from workbench.store.lake import shown

    source = _existing(db)
    target = to if is_lake(to) else Path(to)
    before, after = copy_store(source, target)
    rows = [{"table": name, "source": before[name], "target": after[name]} for name in before]
    if fmt != "table":
        _emit(rows, fmt, "copy")
        return
    table = Table(title=f"{shown(source)} → {shown(target)}")
    for name in ("table", "source", "target"):
        table.add_column(name, justify="left" if name == "table" else "right")
    for row in rows:
        table.add_row(row["table"], str(row["source"]), str(row["target"]))
    console.print(table)
