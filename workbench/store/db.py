"""The one way into the store: open, work, close. DuckDB locks the whole file per process, so no
process holds it between operations; a lock conflict is retried for a short while, then reported."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from workbench.errors import WorkbenchError
from workbench.store.schema import MIGRATIONS, current_version, migrate

_migrated: set[Path] = set()
_migrate_lock = threading.Lock()


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


@contextmanager
def open_store(
    path: Path | str | None = None, read_only: bool = False, wait_s: float = 10.0
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to the store at `path` (default: the `db` setting), migrated, closed on exit."""
    path = Path(path) if path is not None else default_path()
    resolved = path.resolve()
    if resolved not in _migrated or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with _migrate_lock:
            con = _connect(path, False, wait_s)
            try:
                migrate(con)
            finally:
                con.close()
            _migrated.add(resolved)
    con = _connect(path, read_only, wait_s)
    try:
        if read_only and current_version(con) != len(MIGRATIONS):
            raise WorkbenchError(
                "WB_STORE_INVALID",
                f"{path} is at schema version {current_version(con)}, expected {len(MIGRATIONS)}",
                "open it once read-write (any `workbench` command) to migrate it",
            )
        yield con
    finally:
        con.close()
