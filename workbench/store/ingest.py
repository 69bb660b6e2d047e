"""Spool files into DuckDB: in batches (polars frames, not row by row), under a file lock so one
process ingests at a time, idempotent by key, with each file's offset committed in the same
transaction as its rows — a crash between the two cannot double-count."""

from __future__ import annotations

import fcntl
import json
import os
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl

from workbench.errors import WorkbenchError
from workbench.store.db import is_lock_error, open_store
from workbench.store.records import TABLES

_POLARS_TYPES = {
    "VARCHAR": pl.Utf8, "BIGINT": pl.Int64, "INTEGER": pl.Int32, "BOOLEAN": pl.Boolean,
    "VARCHAR[]": pl.List(pl.Utf8), "TIMESTAMP WITH TIME ZONE": pl.Utf8, "DOUBLE": pl.Float64,
}


@contextmanager
def _exclusive(lock_path: Path, wait: bool):
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _pid_alive(name: str) -> bool:
    import socket

    parts = name.rsplit("-", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname():
        return True  # another host's file: never ours to delete
    try:
        os.kill(int(parts[1]), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _read_new(path: Path, offset: int) -> tuple[list[dict], int]:
    """Records after `offset` up to the last complete line, and the new offset."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    records = []
    for line in data[: end + 1].splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn write in the middle of a file that was appended to again
    return records, offset + end + 1


def _frame(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> pl.DataFrame:
    columns = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    schema = {name: _POLARS_TYPES.get(kind, pl.Utf8) for name, kind in columns}
    return pl.DataFrame([{name: row.get(name) for name in schema} for row in rows], schema=schema, strict=False)


def write_rows(con: duckdb.DuckDBPyConnection, kind: str, rows: list[dict]) -> int:
    """Insert `rows` of one record kind in one statement; existing keys are kept or replaced."""
    table, key, replace = TABLES[kind]
    frame = _frame(con, table, rows).unique(subset=list(key), keep="last" if replace else "first", maintain_order=True)
    verb = "INSERT OR REPLACE INTO" if replace else "INSERT OR IGNORE INTO"
    con.register("_batch", frame.to_arrow())
    try:
        con.execute(f"{verb} {table} BY NAME SELECT * FROM _batch")
    finally:
        con.unregister("_batch")
    return frame.height


def ingest_spools(db_path: Path, spool_dir: Path, wait: bool = True) -> int:
    """Ingest every spool file under `spool_dir`; returns the records ingested. With `wait=False`
    (a recorder), returns 0 at once when another process is ingesting or holds the store."""
    spool_dir = Path(spool_dir)
    if not spool_dir.is_dir():
        return 0
    with _exclusive(spool_dir / ".ingest.lock", wait) as acquired:
        if not acquired:
            return 0
        files = sorted(spool_dir.glob("*.jsonl"))
        if not files:
            return 0
        try:
            with open_store(db_path, wait_s=10.0 if wait else 0.0) as con:
                return _ingest(con, files)
        except WorkbenchError as exc:
            if not wait and exc.code == "WB_STORE_LOCKED":
                return 0
            raise
        except duckdb.Error as exc:
            if not wait and is_lock_error(exc):
                return 0
            raise


def _ingest(con: duckdb.DuckDBPyConnection, files: list[Path]) -> int:
    offsets = dict(con.execute('SELECT file, "offset" FROM spool_offsets').fetchall())
    by_kind: dict[str, list[dict]] = defaultdict(list)
    moved: dict[str, int] = {}
    finished: list[Path] = []
    for path in files:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        start = offsets.get(path.name, 0)
        if size > start:
            records, end = _read_new(path, start)
            for record in records:
                if record.get("kind") in TABLES:
                    by_kind[record["kind"]].append(record["row"])
            if end != start:
                moved[path.name] = end
        if moved.get(path.name, start) >= size and not _pid_alive(path.stem):
            finished.append(path)
    if not moved and not finished:
        return 0
    count = 0
    con.execute("BEGIN TRANSACTION")
    try:
        for kind in TABLES:  # table order: a run before its tags, calls before their bodies
            if by_kind.get(kind):
                count += write_rows(con, kind, by_kind[kind])
        for name, end in moved.items():
            con.execute('INSERT OR REPLACE INTO spool_offsets VALUES (?, ?)', [name, end])
        for path in finished:
            con.execute("DELETE FROM spool_offsets WHERE file = ?", [path.name])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    for path in finished:  # after the commit: a crash here leaves a file that re-ingests as no-ops
        path.unlink(missing_ok=True)
    return count
