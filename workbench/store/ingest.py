"""Spool files into DuckDB: in batches (polars frames, not row by row), under a file lock so one
process ingests at a time, idempotent by key, with each file's offset committed in the same
transaction as its rows — a crash between the two cannot double-count."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import duckdb
import polars as pl

from workbench.config import spool_dir_of
from workbench.errors import WorkbenchError
from workbench.locks import exclusive
from workbench.store.db import is_lock_error, open_store
from workbench.store.records import TABLES

_POLARS_TYPES = {
    "VARCHAR": pl.Utf8, "BIGINT": pl.Int64, "INTEGER": pl.Int32, "BOOLEAN": pl.Boolean,
    "VARCHAR[]": pl.List(pl.Utf8), "TIMESTAMP WITH TIME ZONE": pl.Utf8, "DOUBLE": pl.Float64,
}


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


def _read_lines(path: Path, offset: int) -> tuple[bytes, int]:
    """The complete lines after `offset` (bytes), and the new offset."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n")
    if end < 0:
        return b"", offset
    # no torn tail (the usual case): the bytes as read, not a copy of tens of megabytes
    return (data if end == len(data) - 1 else data[: end + 1]), offset + end + 1


def _parse_lines(data: bytes) -> list[dict]:
    records = []
    for line in data.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn write in the middle of a file that was appended to again
    return records


def _read_new(path: Path, offset: int) -> tuple[list[dict], int]:
    """Records after `offset` up to the last complete line, and the new offset."""
    data, end = _read_lines(path, offset)
    return _parse_lines(data), end


def _schemas(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, pl.DataType]]:
    """Every record table's columns, as polars types, in one query."""
    tables = {table for table, _, _ in TABLES.values()}
    schemas: dict[str, dict[str, pl.DataType]] = {table: {} for table in tables}
    for table, name, kind in con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
    ).fetchall():
        if table in schemas:
            schemas[table][name] = _POLARS_TYPES.get(kind, pl.Utf8)
    return schemas


def _frames_fast(data: bytes, schemas: dict[str, dict[str, pl.DataType]]) -> dict[str, pl.DataFrame]:
    """Every kind's rows as a frame, parsed by polars (native code, not a Python loop per line).
    Raises on anything unusual (a torn line, a value of another type); the caller then falls back
    to the line-by-line parse."""
    fields: dict[str, pl.DataType] = {}
    for schema in schemas.values():
        fields.update(schema)
    frame = pl.read_ndjson(data, schema={"kind": pl.Utf8, "row": pl.Struct(fields)})
    frames = {}
    for (kind,), rows in frame.partition_by("kind", as_dict=True, maintain_order=True).items():
        if kind in TABLES:
            frames[kind] = rows.get_column("row").struct.unnest().select(list(schemas[TABLES[kind][0]]))
    return frames


def _commit(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame], moved: dict[str, int],
            finished: list[Path], known_new: bool) -> int:
    """Every frame and the files' new offsets in one transaction."""
    count = 0
    con.execute("BEGIN TRANSACTION")
    try:
        for kind in TABLES:  # table order: a run before its tags, calls before their bodies
            if kind in frames and frames[kind].height:
                count += write_frame(con, kind, frames[kind], known_new)
        for name, end in moved.items():
            con.execute('INSERT OR REPLACE INTO spool_offsets VALUES (?, ?)', [name, end])
        for path in finished:
            con.execute("DELETE FROM spool_offsets WHERE file = ?", [path.name])
        con.execute("COMMIT")
    except Exception:
        try:
            con.execute("ROLLBACK")
        except duckdb.TransactionException:
            pass  # a failed COMMIT has already ended the transaction
        raise
    return count


def _torn_tail_only(path: Path, offset: int) -> bool:
    """Whether everything after `offset` is one unterminated line (a write cut by a crash)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return b"\n" not in handle.read()
    except OSError:
        return False


def _frame(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> pl.DataFrame:
    columns = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    schema = {name: _POLARS_TYPES.get(kind, pl.Utf8) for name, kind in columns}
    return pl.DataFrame([{name: row.get(name) for name in schema} for row in rows], schema=schema, strict=False)


def write_rows(con: duckdb.DuckDBPyConnection, kind: str, rows: list[dict]) -> int:
    """Insert `rows` of one record kind in one statement; existing keys are kept or replaced."""
    return write_frame(con, kind, _frame(con, TABLES[kind][0], rows))


def write_frame(con: duckdb.DuckDBPyConnection, kind: str, frame: pl.DataFrame, known_new: bool = False) -> int:
    """Insert a frame of one record kind (the table's columns) in one statement. `known_new`: the
    keys are not in the table yet, so the plain insert (half the cost of a conflict-checking one)
    is safe; it raises a constraint error if they were."""
    table, key, replace = TABLES[kind]
    if replace or not known_new:  # a repeated key inside a known-new batch fails the insert instead
        frame = frame.unique(subset=list(key), keep="last" if replace else "first", maintain_order=True)
    verb = "INSERT OR REPLACE INTO" if replace else ("INSERT INTO" if known_new else "INSERT OR IGNORE INTO")
    con.register("_batch", frame.to_arrow())
    # on an error the transaction is aborted (no unregister possible then); the next register replaces the view
    con.execute(f"{verb} {table} BY NAME SELECT * FROM _batch")
    con.unregister("_batch")
    return frame.height


def ingest_spools(db_path: Path, spool_dir: Path, wait: bool = True) -> int:
    """Ingest every spool file under `spool_dir`; returns the records ingested. With `wait=False`
    (a recorder), returns 0 at once when another process is ingesting or holds the store."""
    return _ingest_spools(db_path, spool_dir, wait) or 0


def try_ingest(db_path: Path, spool_dir: Path) -> int | None:
    """Ingest without waiting; None when it was skipped (another process is ingesting or holds
    the store), so the caller knows to try again later."""
    return _ingest_spools(db_path, spool_dir, wait=False)


def _ingest_spools(db_path: Path, spool_dir: Path, wait: bool) -> int | None:
    spool_dir = Path(spool_dir)
    legacy = _legacy_spools(Path(db_path), spool_dir)
    if not spool_dir.is_dir() and not legacy:
        return 0
    with exclusive(spool_dir / ".ingest.lock", wait) as acquired:
        if not acquired:
            return None
        files = sorted(spool_dir.glob("*.jsonl")) + legacy
        if not files:
            return 0
        try:
            with open_store(db_path, wait_s=10.0 if wait else 0.0) as con:
                return _ingest(con, files)
        except WorkbenchError as exc:
            if not wait and exc.code == "WB_STORE_LOCKED":
                return None
            raise
        except duckdb.Error as exc:
            if not wait and is_lock_error(exc):
                return None
            raise


_SPOOL_FILE = re.compile(r".+-\d+-[0-9a-f]{8}\.jsonl")


def _legacy_spools(db_path: Path, spool_dir: Path) -> list[Path]:
    """Spool files that Workbench 0.1 wrote into a bare `spool/` folder beside the store, before
    the store had a working folder: drained with the rest, so an upgrade loses no record."""
    legacy = db_path.parent / "spool"
    if spool_dir.resolve() != spool_dir_of(db_path).resolve() or not legacy.is_dir():
        return []
    return sorted(path for path in legacy.glob("*.jsonl") if _SPOOL_FILE.fullmatch(path.name))


def _ingest(con: duckdb.DuckDBPyConnection, files: list[Path]) -> int:
    offsets = dict(con.execute('SELECT file, "offset" FROM spool_offsets').fetchall())
    chunks: list[bytes] = []
    moved: dict[str, int] = {}
    finished: list[Path] = []
    for path in files:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        start = offsets.get(path.name, 0)
        if size > start:
            data, end = _read_lines(path, start)
            chunks.append(data)
            if end != start:
                moved[path.name] = end
        if not _pid_alive(path.stem) and (
            moved.get(path.name, start) >= size or _torn_tail_only(path, moved.get(path.name, start))
        ):
            finished.append(path)  # its writer is gone: a torn last line will never be completed
    if not moved and not finished:
        return 0
    data = b"".join(chunks)
    frames: dict[str, pl.DataFrame] = {}
    if data:
        schemas = _schemas(con)
        try:
            frames = _frames_fast(data, schemas)
        except Exception:  # noqa: BLE001 - a torn line or an odd value: parse line by line instead
            by_kind: dict[str, list[dict]] = defaultdict(list)
            for record in _parse_lines(data):
                if isinstance(record, dict) and record.get("kind") in TABLES and isinstance(record.get("row"), dict):
                    by_kind[record["kind"]].append(record["row"])
            frames = {kind: _frame(con, TABLES[kind][0], rows) for kind, rows in by_kind.items()}
    try:
        # records are new unless a file is read again (its offset row went with an unlink that did
        # not happen): the plain insert first, the conflict-checking one when a key was seen
        count = _commit(con, frames, moved, finished, known_new=True)
    except duckdb.ConstraintException:
        count = _commit(con, frames, moved, finished, known_new=False)
    for path in finished:  # after the commit: a crash here leaves a file that re-ingests as no-ops
        path.unlink(missing_ok=True)
    return count
