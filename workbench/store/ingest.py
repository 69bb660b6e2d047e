"""Spool files into DuckDB: in batches (polars frames, not row by row), under a file lock so one
process ingests at a time, idempotent by key, with each file's offset committed in the same
transaction as its rows — a crash between the two cannot double-count.

A backlog goes in bounded batches (`BATCH_BYTES` of spool lines per transaction), so memory stays
bounded whatever the backlog, and an ingester killed halfway keeps every batch it committed. A
record the store cannot take (not JSON, an unknown kind, a value out of its column's range, a key
missing) is quarantined — kept in the `quarantine` table with its reason — and never blocks the
records behind it."""

from __future__ import annotations

import gc
import importlib
import json
import logging
import os
import re
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import polars as pl

from workbench.config import is_lake, spool_dir_of, work_dir_of
from workbench.errors import WorkbenchError
from workbench.locks import exclusive
from workbench.store import lake, rollup
from workbench.store.db import is_lock_error, open_store, sole_connection
from workbench.store.frames import parse_frames, record_schemas, table_frame
from workbench.store.pricing import priced_at_ingestion
from workbench.store.records import TABLES

# spool bytes per transaction: bounds memory (about 10x this at the peak) and the work a killed
# ingester loses
BATCH_BYTES = 8 * 1024 * 1024
# the longest text of a quarantined record kept
QUARANTINE_TEXT_CAP = 65536
_TAIL_BLOCK = 65536  # bytes read at a time looking for the end of a line
# DuckDB's memory while it ingests (its default is most of the machine's, kept as a cache of the
# blocks it wrote): a batch needs far less, and what does not fit spills to its temporary folder. A
# batch DuckDB cannot do within it is done again within 4x as much, MEMORY_RAISES times (what a
# commit needs grows with the store: 64 MB failed at COMMIT on a 186 MB store), then without the
# limit: never left out.
INGEST_MEMORY_LIMIT = "64MB"
MEMORY_RAISES = 2

log = logging.getLogger("workbench.store")
# Derived data (cache verdicts, inferred compactions) is computed from each batch before it is
# written, by the insight layer, which comes after the store in the import order: the store names
# it here rather than importing it. `derive(con, frames)` returns the frames to write and the keys
# of stored rows they supersede.
DERIVE = "workbench.insight.ingest"


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


def _read_lines(path: Path, offset: int, limit: int | None = None) -> tuple[bytes, int]:
    """The complete lines after `offset` (bytes; about `limit` of them at most, or one line when a
    single line is longer), and the new offset."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read() if limit is None else handle.read(limit)
        end = data.rfind(b"\n")
        while end < 0 and limit is not None:  # one line longer than the budget: read on to its end
            more = handle.read(limit)
            if not more:
                break
            data += more
            end = data.rfind(b"\n")
    if end < 0:
        return b"", offset
    if limit is not None and len(data) >= limit:  # cut by the budget: end the batch between calls
        end = _before_last_call(data, end)
    # no torn tail (the usual case): the bytes as read, not a copy of megabytes
    return (data if end == len(data) - 1 else data[: end + 1]), offset + end + 1


_CALL_LINE = re.compile(rb'\n\{"kind": ?"(call|call_prefix)"')


def _before_last_call(data: bytes, end: int) -> int:
    """Where to end a batch of the lines in `data[:end + 1]` so the last call's records go in
    together with the next batch: insight judges a call with its prefix, once. The recorder spools
    the call, its body, then its prefix; a prefix line right before the call (the ingest benchmark's
    order) goes with it too. `end` itself when no call starts after the first line. The lines are
    read from the end, not by matching the megabytes before them."""
    cut = end
    while (cut := data.rfind(b'\n{"kind":', 0, cut)) >= 0:
        match = _CALL_LINE.match(data, cut, end)
        if match and match.group(1) == b"call":
            break
    if cut < 0:  # a prefix here follows its call: the first line, or a line of the batch before
        return end
    line_before = data.rfind(b"\n", 0, cut)
    match = _CALL_LINE.match(data, line_before, end) if line_before >= 0 else None
    if match and match.group(1) == b"call_prefix":
        cut = line_before  # the prefix line right before it
    return cut if cut > 0 else end


def _derived(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame]
             ) -> tuple[dict[str, pl.DataFrame], dict[str, list[str]]]:
    """The batch with insight's columns and rows; as it came when insight fails (logged: the
    records still go in, without verdicts)."""
    try:
        return importlib.import_module(DERIVE).derive(con, frames)
    except duckdb.OutOfMemoryException:
        raise  # the store's problem, not insight's: the batch is done again with more memory
    except Exception as exc:  # noqa: BLE001 - derived data never keeps a record out of the store
        log.warning("workbench could not derive cache verdicts and compactions for a batch: %s", exc, exc_info=True)
        return frames, {}


def commit_frames(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame], moved: dict[str, int],
            finished: list[Path], known_new: bool, superseded: dict[str, list[str]] | None = None) -> int:
    """Every frame, the stored rows they supersede and the files' new offsets in one transaction
    (on a lake: retried while another writer's commit conflicts with it)."""
    on_lake = lake.is_lake_connection(con)
    if on_lake:
        return lake.retrying(con, lambda: _transaction(con, frames, moved, finished, False, superseded, True))
    return _transaction(con, frames, moved, finished, known_new, superseded, False)


def _transaction(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame], moved: dict[str, int],
                 finished: list[Path], known_new: bool, superseded: dict[str, list[str]] | None,
                 on_lake: bool) -> int:
    count = 0
    con.execute("BEGIN TRANSACTION")
    try:
        if on_lake:
            lake.claim_write(con)
        for kind, keys in (superseded or {}).items():
            table, (key, *_), _ = TABLES[kind]
            con.execute(f"DELETE FROM {table} WHERE list_contains($keys, {key})", {"keys": keys})
        for kind in TABLES:  # table order: a run before its tags, calls before their bodies
            if kind in frames and frames[kind].height:
                count += write_frame(con, kind, frames[kind], known_new, on_lake)
        if on_lake:  # no key to replace by: the old offsets go first
            files = list(moved) + [path.name for path in finished]
            con.execute("DELETE FROM spool_offsets WHERE list_contains($files, file)", {"files": files})
            for name, end in moved.items():
                con.execute("INSERT INTO spool_offsets VALUES (?, ?)", [name, end])
        else:
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
    """Whether everything after `offset` is one unterminated line (a write cut by a crash). Read a
    block at a time: after every batch of a large backlog, the rest of the file was read whole (a
    300 MB file: the ingester's peak)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            while block := handle.read(_TAIL_BLOCK):
                if b"\n" in block:
                    return False
            return True
    except OSError:
        return False


def write_rows(con: duckdb.DuckDBPyConnection, kind: str, rows: list[dict]) -> int:
    """Insert `rows` of one record kind in one transaction (calls with the rollup: `rollup.add_calls`);
    existing keys are kept or replaced."""
    return commit_frames(con, {kind: table_frame(con, TABLES[kind][0], rows)}, {}, [], known_new=False)


class ArrowStream:
    """A frame as DuckDB scans it: through the Arrow C stream interface, each scan a new stream of
    the same buffers. `frame.to_arrow()` would import pyarrow (and numpy), about 0.5 s of CPU and
    40 MB in every short-lived ingester, for a copy DuckDB reads once."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema=None):
        return self.frame.__arrow_c_stream__(requested_schema)


def write_frame(con: duckdb.DuckDBPyConnection, kind: str, frame: pl.DataFrame, known_new: bool = False,
                on_lake: bool = False) -> int:
    """Insert a frame of one record kind (the table's columns) in one statement. `known_new`: the
    keys are not in the table yet, so the plain insert (half the cost of a conflict-checking one)
    is safe; it raises a constraint error if they were. A lake enforces no key: there, stored rows
    of the same keys are deleted first (a replacing kind) or the batch's rows already stored are
    left out (an anti-join), inside the caller's transaction."""
    table, key, replace = TABLES[kind]
    if replace or not known_new or on_lake:  # a repeated key inside a known-new batch fails the insert instead
        frame = frame.unique(subset=list(key), keep="last" if replace else "first", maintain_order=True)
    con.register("_batch", ArrowStream(frame))
    # on an error the transaction is aborted (no unregister possible then); the next register replaces the view
    if kind == "call":  # the daily rollup takes the new calls in this same transaction
        rollup.add_calls(con, "_batch", only_new=on_lake or not known_new, append=on_lake)
    elif kind == "cache_read":  # and the reads, with their writers' keys (stored just before)
        rollup.add_reads(con, "_batch", append=on_lake)
    if on_lake:
        same = " AND ".join(f"{table}.{name} = b.{name}" for name in key)
        if replace:
            con.execute(f"DELETE FROM {table} WHERE EXISTS (SELECT 1 FROM _batch b WHERE {same})")
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _batch")
        else:
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _batch b "
                        f"WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE {same})")
    else:
        verb = "INSERT OR REPLACE INTO" if replace else ("INSERT INTO" if known_new else "INSERT OR IGNORE INTO")
        con.execute(f"{verb} {table} BY NAME SELECT * FROM _batch")
    if kind == "compaction":  # their runs' saved tokens, counted again with them
        rollup.recount_compactions(con, "_batch")
    con.unregister("_batch")
    return frame.height


def ingest_spools(db_path: Path, spool_dir: Path, wait: bool = True, closed: Sequence[str] = (),
                  own_process: bool = False) -> int:
    """Ingest every spool file under `spool_dir`; returns the records ingested. With `wait=False`
    (a recorder), returns 0 at once when another process is ingesting or holds the store.
    `closed`: names of files whose writer will write no more (an exiting process hands its file
    over): read to the end, they are removed although the writer may still be alive.
    DuckDB's memory is limited while it works when the caller is an ingester process (`own_process`)
    or holds no other connection to the store: the limit is the database instance's, which this
    process's other connections to the file share (an app's or a dashboard's queries); without it,
    DuckDB keeps every block it wrote cached, and a backlog's ingest grew with the backlog (a fresh
    process ingesting 40,000 calls peaked at 765 MB)."""
    return _ingest_spools(db_path, spool_dir, wait, frozenset(closed), own_process) or 0


# a standing-by ingester keeps the store open this long after a drain for the next word (a recorder
# at full speed closes a file a second or so): the store opened and closed once, not each drain;
# idle longer, it closes the store, which readers may then open
STANDBY_GRACE_S = 1.0


def ingest_spools_when_told(db_path: Path, spool_dir: Path, fd: int = 0) -> None:
    """The standing-by ingester (`Spool.stand_by`): it reads its parent's words on `fd`, one a line.
    `drain FILE...`: files the parent closed while it goes on recording, ingested now (only those:
    another process's file waits for the end), skipped when another process ingests or holds the
    store (they stay, and the end names them again). `ingest FILE...`: the parent's end, its files
    named: every spool is ingested, as a detached ingester does, and it leaves. End of input without
    `ingest` (the parent was killed, or had nothing to ingest): it leaves; what it drained is stored,
    the rest stays in the spool for the next ingestion."""
    from contextlib import ExitStack

    work_dir = work_dir_of(db_path)
    words = _words(fd)
    held = ExitStack()  # the ingest lock and the store, while drains follow each other
    con: duckdb.DuckDBPyConnection | None = None
    raised = 0  # what the store's commits needed so far (`_Invalidated`): it only grows with the store
    try:
        while True:
            line = words(STANDBY_GRACE_S if con is not None else None)
            if line == "":  # idle: let readers in
                held.close()
                con = None
                continue
            verb, *names = (line or "end").split()
            if verb == "drain":
                while True:
                    try:
                        con = con or _hold_store(held, db_path, spool_dir)
                        if con is not None:
                            files = sorted(path for path in Path(spool_dir).glob("*.jsonl") if path.name in names)
                            # the limit the drains before needed: the store's commits need more as it grows
                            limited = _limit_memory(con, raised)
                            _, raised = _ingest(con, files, work_dir, frozenset(names), limited, raised)
                    except _Invalidated as exc:  # at once again, on a new connection with more memory
                        held.close()
                        con, raised = None, exc.raised
                        continue
                    except Exception as exc:  # noqa: BLE001 - the files stay; the end names them again
                        log.warning("workbench could not ingest a drained spool file (kept): %s", exc)
                        held.close()
                        con = None
                    break
                continue
            if verb == "ingest" and con is not None:
                # the store still open from a drain: the end's ingest on it, not after a close (a
                # checkpoint) and an open of its own
                try:
                    spools = sorted(Path(spool_dir).glob("*.jsonl")) + _legacy_spools(Path(db_path), Path(spool_dir))
                    _ingest_files(con, spools, work_dir, frozenset(names), True, raised)
                    return
                except _Invalidated:  # on a new connection, as any ingester
                    pass
            held.close()
            con = None
            if verb == "ingest":
                ingest_spools(db_path, spool_dir, closed=names, own_process=True)
            return
    finally:
        held.close()


def _words(fd: int):
    """A reader of `fd`'s lines: each call returns the next line, "" when none came within `timeout`
    seconds (None: wait for it), None at the end of input."""
    import select

    buffered = [b""]

    def next_line(timeout: float | None) -> str | None:
        while b"\n" not in buffered[0]:
            if timeout is not None and not select.select([fd], [], [], timeout)[0]:
                return ""
            data = os.read(fd, 65536)
            if not data:
                return None
            buffered[0] += data
        line, buffered[0] = buffered[0].split(b"\n", 1)
        return line.decode()

    return next_line


def _hold_store(held, db_path: Path, spool_dir: Path) -> duckdb.DuckDBPyConnection | None:
    """The ingest lock and the store, kept in `held`; None when another process has either."""
    if not held.enter_context(exclusive(Path(spool_dir) / ".ingest.lock", wait=False)):
        return None
    try:
        return held.enter_context(open_store(db_path, wait_s=0.0))
    except WorkbenchError as exc:
        if exc.code != "WB_STORE_LOCKED":
            raise
    except duckdb.Error as exc:
        if not is_lock_error(exc):
            raise
    held.close()
    return None


def try_ingest(db_path: Path, spool_dir: Path) -> int | None:
    """Ingest without waiting; None when it was skipped (another process is ingesting or holds
    the store), so the caller knows to try again later."""
    return _ingest_spools(db_path, spool_dir, wait=False)


def _ingest_spools(db_path: Path, spool_dir: Path, wait: bool, closed: frozenset[str] = frozenset(),
                   own_process: bool = False) -> int | None:
    spool_dir = Path(spool_dir)
    work_dir = work_dir_of(db_path)
    legacy = _legacy_spools(Path(db_path), spool_dir)
    if not spool_dir.is_dir() and not legacy:
        return 0
    with exclusive(spool_dir / ".ingest.lock", wait) as acquired:
        if not acquired:
            return None
        files = sorted(spool_dir.glob("*.jsonl")) + legacy
        if not files:
            return 0
        raised = 0
        try:
            while True:
                try:
                    with open_store(db_path, wait_s=10.0 if wait else 0.0) as con:
                        return _ingest_files(con, files, work_dir, closed, own_process or sole_connection(db_path),
                                             raised)
                except _Invalidated as exc:  # a new connection, with the memory the batch needs
                    raised = exc.raised
        except WorkbenchError as exc:
            if not wait and exc.code == "WB_STORE_LOCKED":
                return None
            raise
        except duckdb.Error as exc:
            if not wait and is_lock_error(exc):
                return None
            raise


def _ingest_files(con: duckdb.DuckDBPyConnection, files: list[Path], work_dir: Path | None, closed: frozenset[str],
                  alone: bool, raised: int) -> int:
    """`_ingest` on a store held with the ingest lock, within the memory limit when `alone` (no other
    connection of this process shares the database instance)."""
    limited = alone and _limit_memory(con, raised)
    try:
        return _ingest(con, files, work_dir, closed, limited, raised)[0]
    finally:
        if limited:  # the instance may be shared with another of this process's connections
            _reset_memory(con)


@dataclass
class _Chunk:
    """Complete spool lines of one file, from byte `start`."""

    file: str
    start: int
    data: bytes


_SPOOL_FILE = re.compile(r".+-\d+-[0-9a-f]{8}\.jsonl")


def _legacy_spools(db_path: Path, spool_dir: Path) -> list[Path]:
    """Spool files that Workbench 0.1 wrote into a bare `spool/` folder beside the store, before
    the store had a working folder: drained with the rest, so an upgrade loses no record."""
    legacy = db_path.parent / "spool"
    if is_lake(db_path) or spool_dir.resolve() != spool_dir_of(db_path).resolve() or not legacy.is_dir():
        return []
    return sorted(path for path in legacy.glob("*.jsonl") if _SPOOL_FILE.fullmatch(path.name))


def _limit_memory(con: duckdb.DuckDBPyConnection, raised: int = 0) -> bool:
    """Whether the store's memory limit was lowered for this ingest (a lake's is left alone; past
    MEMORY_RAISES raises, none is set)."""
    if lake.is_lake_connection(con) or raised > MEMORY_RAISES:
        return False
    con.execute(f"SET memory_limit = '{_memory_limit(raised)}'")
    return True


class _Invalidated(Exception):
    """DuckDB ran out of memory at a COMMIT and invalidated the database ("Failed to flush table
    spans during commit"): the connection takes no statement more, not even the raised limit, so
    every retry on it failed, and every later ingester at the same batch (a 100,000-case eval's
    store stopped at 51,168 calls). Only a new connection goes on, within `raised` raises."""

    def __init__(self, raised: int) -> None:
        super().__init__(f"the store needed more than {_memory_limit(raised - 1)} at a commit")
        self.raised = raised


def _memory_limit(raised: int) -> str:
    """INGEST_MEMORY_LIMIT raised `raised` times (4x each)."""
    number, unit = re.fullmatch(r"(\d+)\s*([A-Za-z]+)", INGEST_MEMORY_LIMIT).groups()
    return f"{int(number) * 4 ** raised}{unit}"


def _reset_memory(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("RESET memory_limit")
    except duckdb.Error:  # a connection a failure has invalidated: it closes next anyway
        pass


def _ingest(con: duckdb.DuckDBPyConnection, files: list[Path], work_dir: Path | None,
            closed: frozenset[str] = frozenset(), limited: bool = False, raised: int = 0) -> tuple[int, int]:
    """Every spool file's new lines, batch by batch, each batch committed with its offsets: the
    records ingested, and the times the memory limit was raised (`raised`: already, before).
    `work_dir`: the store's working folder, where the price lookups are kept (`priced_at_ingestion`)."""
    positions = dict(con.execute('SELECT file, "offset" FROM spool_offsets').fetchall())
    schemas: dict[str, dict[str, pl.DataType]] | None = None
    total = 0
    files = list(files)
    while files:
        chunks: list[_Chunk] = []
        moved: dict[str, int] = {}
        finished: list[Path] = []
        torn: list[_Chunk] = []
        budget = BATCH_BYTES
        for path in list(files):
            if budget <= 0:
                break
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                files.remove(path)
                continue
            start = positions.get(path.name, 0)
            end = start
            if size > start:
                data, end = _read_lines(path, start, budget)
                if end != start:
                    chunks.append(_Chunk(path.name, start, data))
                    moved[path.name] = end
                    budget -= len(data)
            if end >= size or _torn_tail_only(path, end):
                files.remove(path)  # read to its end (for now)
                if path.name in closed or not _pid_alive(path.stem):
                    finished.append(path)  # its writer is done: a torn last line will never be completed
                    if end < size:
                        torn.append(_Chunk(path.name, end, _tail(path, end)))
        if not chunks and not finished:
            break

        def commit() -> int:  # the batch (its tables' columns read once per ingest)
            nonlocal schemas
            schemas = schemas or record_schemas(con)
            # a batch allocates a few objects per record and leaves almost no cycles: the collections
            # it set off found nothing to free, and each full one walked every object of the process;
            # what it leaves is collected after. Only on the main thread: a spool's flush thread in an
            # app must not switch the app's collector while the app's own threads run (and toggle it)
            collecting = gc.isenabled() and threading.current_thread() is threading.main_thread()
            if collecting:
                gc.disable()
            try:
                return _commit_batch(con, chunks, moved, finished, torn, schemas, work_dir)
            finally:
                if collecting:
                    gc.enable()

        while True:
            try:
                total += commit()
                break
            except duckdb.Error as exc:
                if not limited or not _out_of_memory(exc):
                    raise
                raised += 1
                if _invalidated(exc):
                    raise _Invalidated(raised) from exc
                if raised <= MEMORY_RAISES:
                    log.info("a batch needed more than %s of DuckDB's memory: ingesting within %s",
                             _memory_limit(raised - 1), _memory_limit(raised))
                    con.execute(f"SET memory_limit = '{_memory_limit(raised)}'")
                else:
                    log.info("a batch needed more than %s of DuckDB's memory: ingesting without the limit",
                             _memory_limit(raised - 1))
                    _reset_memory(con)
                    limited = False
        positions.update(moved)
        for path in finished:  # after the commit: a crash here leaves a file that re-ingests as no-ops
            path.unlink(missing_ok=True)
    return total, raised


# DuckDB's buffer manager's words for it ("could not allocate block of size 256.0 KiB", "failed to pin block")
_NO_MEMORY = re.compile(r"(could not|failed to) (allocate|pin) ")


def _out_of_memory(exc: duckdb.Error) -> bool:
    """DuckDB ran out of the memory it may use. At COMMIT it says so as a TransactionException: what
    the commit needs grows with the store (a 100,000-case eval's store failed there at ~48,000 cases,
    186 MB), and every later ingester failed at the same batch: nothing more was ever stored."""
    return isinstance(exc, duckdb.OutOfMemoryException) or _NO_MEMORY.search(str(exc)) is not None


def _invalidated(exc: duckdb.Error) -> bool:
    return isinstance(exc, duckdb.FatalException) or "invalidated" in str(exc)


def _tail(path: Path, offset: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(QUARANTINE_TEXT_CAP)


def _commit_batch(con: duckdb.DuckDBPyConnection, chunks: list[_Chunk], moved: dict[str, int],
                  finished: list[Path], torn: list[_Chunk], schemas: dict[str, dict[str, pl.DataType]],
                  work_dir: Path | None) -> int:
    """One batch into the store with its offsets. The fast path parses it natively; a batch it
    cannot read, or the store refuses, is checked record by record and the bad ones quarantined."""
    quarantined = [_quarantine_row(chunk.file, chunk.start, None, "torn last line: its writer died mid-write",
                                   chunk.data) for chunk in torn]
    data = b"".join(chunk.data for chunk in chunks)
    try:
        frames = priced_at_ingestion(con, parse_frames(data, schemas), work_dir) if data else {}
        return _commit_any(con, frames, moved, finished, quarantined, schemas)
    except Exception as exc:  # noqa: BLE001 - an odd value, a torn line, a refused record: look closer
        if _store_problem(exc):
            raise
    records, bad = _checked_records(chunks, schemas)
    quarantined += bad
    try:
        return _commit_any(con, _frames_of(con, records, work_dir), moved, finished, quarantined, schemas)
    except Exception as exc:  # noqa: BLE001
        if _store_problem(exc):
            raise
    # a record that passed the checks and still failed (DuckDB refused it): find it by halves
    good, refused = _isolate(con, records, work_dir)
    quarantined += refused
    _commit_any(con, {}, moved, finished, quarantined, schemas)
    return good


_STORE_ERRORS = (duckdb.IOException, duckdb.OutOfMemoryException, duckdb.FatalException, duckdb.InternalException,
                 duckdb.TransactionException, OSError, MemoryError, WorkbenchError)


def _store_problem(exc: BaseException) -> bool:
    """Whether a failure is the store's (a full disk, a lock, I/O: retried later, the spool kept)
    rather than a record's (quarantined)."""
    text = str(exc)
    return isinstance(exc, _STORE_ERRORS) or (isinstance(exc, duckdb.Error) and is_lock_error(exc)) or (
        "No space left" in text or "Could not write" in text or "invalidated" in text)


def _commit_any(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame], moved: dict[str, int],
                finished: list[Path], quarantined: list[dict], schemas: dict[str, dict[str, pl.DataType]]) -> int:
    """Commit the frames (with insight's derived rows), the quarantined records and the offsets;
    returns the records stored."""
    frames, superseded = _derived(con, frames)
    if quarantined:
        frames = {**frames, "quarantine": pl.DataFrame(quarantined, schema=schemas["quarantine"])}
    try:
        # records are new unless a file is read again (its offset row went with an unlink that did
        # not happen): the plain insert first, the conflict-checking one when a key was seen
        count = commit_frames(con, frames, moved, finished, known_new=True, superseded=superseded)
    except duckdb.ConstraintException:
        count = commit_frames(con, frames, moved, finished, known_new=False, superseded=superseded)
    return count - len(quarantined)


_BIGINT = (-(2**63), 2**63 - 1)
_INTEGER = (-(2**31), 2**31 - 1)


def _value_problem(value, kind: pl.DataType) -> str | None:
    """Why `value` cannot go into a column of polars type `kind` (None: it can)."""
    if value is None:
        return None
    if kind in (pl.Int64, pl.Int32):
        low, high = _BIGINT if kind == pl.Int64 else _INTEGER
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{value!r} is not an integer"
        return None if low <= value <= high else f"{value} is out of range [{low}, {high}]"
    if kind == pl.Boolean:
        return None if isinstance(value, bool) else f"{value!r} is not a boolean"
    if kind == pl.Float64:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else f"{value!r} is not a number"
    if isinstance(kind, pl.List):
        if not isinstance(value, list):
            return f"{str(value)[:80]} is not a list"
        return next(filter(None, (_value_problem(item, kind.inner) for item in value)), None)
    return None if isinstance(value, str) else f"{str(value)[:80]!r} is not a text"


def _record_problem(record, schemas: dict[str, dict[str, pl.DataType]]) -> str | None:
    if not isinstance(record, dict) or not isinstance(record.get("row"), dict):
        return "not a record (a mapping with `kind` and `row`)"
    kind = record.get("kind")
    if kind not in TABLES:
        return f"unknown record kind {kind!r}"
    table, key, _ = TABLES[kind]
    row = record["row"]
    for name in key:
        if row.get(name) is None:
            return f"{table}.{name} (its key) is missing"
    for name, column_type in schemas[table].items():
        problem = _value_problem(row.get(name), column_type)
        if problem is not None:
            return f"{table}.{name}: {problem}"
    return None


def _checked_records(chunks: list[_Chunk], schemas) -> tuple[list[tuple[dict, dict]], list[dict]]:
    """The batch line by line: (record, its quarantine row should the store refuse it) for each
    record that fits its table, and the quarantine rows of those that do not."""
    records, bad = [], []
    for chunk in chunks:
        position = chunk.start
        for line in chunk.data.split(b"\n"):
            if line.strip():
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError) as exc:
                    record, problem = None, f"not JSON: {exc}"
                else:
                    problem = _record_problem(record, schemas)
                kind = record.get("kind") if isinstance(record, dict) and isinstance(record.get("kind"), str) else None
                if problem is None:
                    records.append((record, _quarantine_row(chunk.file, position, kind, "", line)))
                else:
                    bad.append(_quarantine_row(chunk.file, position, kind, problem, line))
            position += len(line) + 1
    return records, bad


def _frames_of(con: duckdb.DuckDBPyConnection, records: list[tuple[dict, dict]], work_dir: Path | None
               ) -> dict[str, pl.DataFrame]:
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for record, _ in records:
        by_kind[record["kind"]].append(record["row"])
    return priced_at_ingestion(con, {kind: table_frame(con, TABLES[kind][0], rows) for kind, rows in by_kind.items()},
                               work_dir)


def _isolate(con: duckdb.DuckDBPyConnection, records: list[tuple[dict, dict]], work_dir: Path | None
             ) -> tuple[int, list[dict]]:
    """Commit what the store takes, by halves (a few transactions per refused record), and return
    how many went in and the quarantine rows, with DuckDB's reason, of those refused."""
    if not records:
        return 0, []
    try:
        return commit_frames(con, _frames_of(con, records, work_dir), {}, [], known_new=False), []
    except Exception as exc:  # noqa: BLE001
        if _store_problem(exc):
            raise
        if len(records) == 1:
            return 0, [{**records[0][1], "reason": f"the store refused it: {str(exc).splitlines()[0][:500]}"}]
    middle = len(records) // 2
    first, first_bad = _isolate(con, records[:middle], work_dir)
    second, second_bad = _isolate(con, records[middle:], work_dir)
    return first + second, first_bad + second_bad


def _quarantine_row(file: str, offset: int, kind: str | None, reason: str, line: bytes) -> dict:
    return {"quarantine_id": f"{file}:{offset}", "spool_file": file, "line_offset": offset, "kind": kind,
            "reason": reason, "record": line[:QUARANTINE_TEXT_CAP].decode("utf-8", "replace"),
            "quarantined_at": datetime.now(timezone.utc).isoformat()}
