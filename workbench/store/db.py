"""The one way into the store: open, work, close. DuckDB locks the whole file per process, so no
process holds it between operations; a lock conflict is retried for a short while, then reported."""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from workbench.config import is_lake, work_dir_of
from workbench.errors import WorkbenchError
from workbench.locks import exclusive
from workbench.store.lake import WRITE_TOKEN
from workbench.store.schema import MIGRATIONS, current_version, migrate

_migrated: set[Path] = set()
_migrate_lock = threading.Lock()
# this process's open connections per store file: DuckDB shares one database instance (and its
# memory limit) among them
_open: dict[Path, int] = {}
_open_lock = threading.Lock()


def is_lock_error(exc: BaseException) -> bool:
    text = str(exc)
    return (
        "Could not set lock" in text or "Conflicting lock" in text or "lock on file" in text
        # the same conflict inside one process: a read-only and a read-write connection at once
        or "different configuration than existing connections" in text
    )


def default_path() -> Path:
    from workbench.config import settings

    return Path(settings().db)


def _connect(path: Path, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + wait_s
    delay = 0.01
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            if not is_lock_error(exc) or time.monotonic() >= deadline:
                if is_lock_error(exc):
                    raise WorkbenchError(
                        "WB_STORE_LOCKED",
                        f"{path} stayed locked by another process for {wait_s:.0f}s: {exc}",
                        "close the other process that holds the store open (a DuckDB shell, a notebook), then retry",
                    ) from exc
                raise WorkbenchError(
                    "WB_STORE_INVALID", f"cannot open {path}: {exc}", f"check that {path} is a Workbench DuckDB store"
                ) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.2)


def _foreign(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tables of a DuckDB file that is not a Workbench store (tables, but no `schema_version`)."""
    tables = [name for (name,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database()").fetchall()]
    # a lake's write token alone: another machine making this lake is between its two first commits
    return [] if "schema_version" in tables or tables == [WRITE_TOKEN] else sorted(tables)


def _refuse_foreign(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    tables = _foreign(con)
    if tables:
        shown = ", ".join(tables[:5]) + (", …" if len(tables) > 5 else "")
        raise WorkbenchError(
            "WB_STORE_INVALID",
            f"{path} is a DuckDB file of something else (tables {shown}; no schema_version): left untouched",
            "point WORKBENCH_DB (or --db) at a Workbench store, or at a path where a new one may be created",
        )


def _unwritable(path: Path, exc: OSError | duckdb.Error) -> WorkbenchError:
    return WorkbenchError(
        "WB_STORE_UNWRITABLE", f"cannot create the store {path}: {exc}",
        f"free space on the disk of {path.parent} or make it writable, or point WORKBENCH_DB elsewhere",
    )


def _create(path: Path) -> None:
    """A new store, atomically: built and migrated under a temporary name, owner-only, then linked
    into place. A full disk or a crash leaves at most the temporary file, never a half-made store
    at `path` that every later command would refuse. A 0-byte file at `path` (left by an older
    version on a full disk) holds nothing and is replaced."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with exclusive(work_dir_of(path) / "locks" / "create.lock", wait=True):
            if path.exists() and path.stat().st_size > 0:
                return  # another process created it meanwhile
            temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.creating")
            try:
                con = duckdb.connect(str(temporary))
                try:
                    migrate(con)
                    # into the file itself, now: a close that cannot checkpoint (a full disk) says
                    # nothing, and would leave the tables only in the write-ahead log
                    con.execute("CHECKPOINT")
                finally:
                    con.close()
                if temporary.with_name(temporary.name + ".wal").exists():
                    raise OSError(f"DuckDB could not write {temporary.name} whole")
                os.chmod(temporary, 0o600)
                if path.exists():  # 0 bytes: nothing in it to keep
                    path.unlink()
                os.link(temporary, path)
            finally:
                for leftover in (temporary, temporary.with_name(temporary.name + ".wal")):
                    leftover.unlink(missing_ok=True)
    except (OSError, duckdb.Error) as exc:
        raise _unwritable(path, exc) from exc


def _prepare(path: Path, wait_s: float) -> None:
    """Create the store, or migrate it (refusing a DuckDB file that is not a Workbench store)."""
    if not path.exists() or path.stat().st_size == 0:
        _create(path)
        return
    con = _connect(path, False, wait_s)
    try:
        _refuse_foreign(con, path)
        migrate(con)
    finally:
        con.close()


def store_exists(path: Path) -> bool:
    """Whether `path` holds a store (a 0-byte file, left by a full disk, is no store). A lake is
    made on first use, as a file store is by its first write."""
    if is_lake(path):
        return True
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


@contextmanager
def open_store(
    path: Path | str | None = None, read_only: bool = False, wait_s: float = 10.0
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the store at `path` (default: the `db` setting), migrated, closed on exit.
    Read-only, it writes nothing while the store is current (so a store on a read-only file system
    reads), and migrates it first only when it is behind."""
    path = Path(path) if path is not None else default_path()
    if is_lake(path):
        with _open_lake(path, read_only) as con:
            yield con
        return
    resolved = path.resolve()
    if read_only:
        con = _connect(path, True, wait_s)
        try:
            version = current_version(con)
            if version != len(MIGRATIONS):
                _refuse_foreign(con, path)
        except BaseException:
            con.close()
            raise
        if version == len(MIGRATIONS):
            with _counted(resolved, con):
                yield con
            return
        con.close()
        try:
            with _migrate_lock:
                _prepare(path, wait_s)
        except (WorkbenchError, duckdb.Error) as exc:
            if isinstance(exc, WorkbenchError) and exc.code != "WB_STORE_INVALID":
                raise
            raise WorkbenchError(
                "WB_STORE_INVALID",
                f"{path} is at schema version {version}, expected {len(MIGRATIONS)}, and could not be migrated: {exc}",
                "open it once read-write (any `workbench` command where the store is writable) to migrate it",
            ) from exc
        _migrated.add(resolved)
    con = None
    if not read_only and (resolved not in _migrated or not store_exists(path)):
        with _migrate_lock:
            if store_exists(path):  # checked and migrated on the connection it then yields: one open, not two
                con = _connect(path, False, wait_s)
                try:
                    _refuse_foreign(con, path)
                    migrate(con)
                except BaseException:
                    con.close()
                    raise
            else:
                _create(path)
            _migrated.add(resolved)
    if con is None:
        con = _connect(path, read_only, wait_s)
    with _counted(resolved, con):
        yield con


@contextmanager
def _counted(resolved: Path, con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """`con` counted among this process's open connections to `resolved` until it is closed."""
    with _open_lock:
        _open[resolved] = _open.get(resolved, 0) + 1
    try:
        yield
    finally:
        with _open_lock:
            _open[resolved] -= 1
        con.close()


def sole_connection(path: Path | str) -> bool:
    """Whether the one connection this process has open on the file store `path` is the caller's:
    no other of its queries shares the database instance's settings."""
    with _open_lock:
        return _open.get(Path(path).resolve(), 0) == 1


@contextmanager
def _open_lake(url: Path, read_only: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the lake `url`, migrated (once per process, as a file store is)."""
    from workbench.config import settings
    from workbench.store import lake

    data_path = settings().lake_data_path
    if url not in _migrated:
        with _migrate_lock:
            con = lake.connect(url, data_path)
            try:
                _refuse_foreign(con, Path(lake.shown(url)))
                lake.retrying(con, lambda: (lake.prepare(con), migrate(con)))
            finally:
                lake.release(con)
            _migrated.add(url)
    con = lake.connect(url, data_path)
    try:
        yield con
    finally:
        lake.release(con)
