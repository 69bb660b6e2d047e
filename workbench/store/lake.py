"""A DuckLake as the store: a catalog database (PostgreSQL, for many writers on many machines)
that many processes share with transactions, and Parquet data files in a shared folder or object
storage. The same tables and queries as the local file; what differs lives here: how DuckDB gets
the extensions, how the lake is attached, the migrations' SQL (DuckLake enforces no PRIMARY KEY
or index) and the maintenance that keeps small, frequent commits from leaving a swamp of tiny files.

A lake enforces no key, so the ingest is idempotent by itself (an anti-join on the keys inside its
transaction), and every writing transaction also bumps the one row of `lake_writes`: two writers
that committed at once then conflict, and the later one retries on the snapshot that holds the
other's rows, instead of both inserting the same key."""

from __future__ import annotations

import hashlib
import importlib.util
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb

from workbench.config import LAKE_PREFIX as PREFIX
from workbench.errors import WorkbenchError

# the one-row table every writing transaction updates, so that concurrent writers conflict
WRITE_TOKEN = "lake_writes"
# rows a small commit keeps in the catalog instead of writing a Parquet file (flushed by `maintain`)
INLINE_ROWS = 1000
T = TypeVar("T")
_CATALOG_EXTENSIONS = {"postgres": "postgres_scanner", "sqlite": "sqlite_scanner"}
_EXTRA_FIX = "pip install 'replay-workbench[lake]'"


def shown(db: Path | str) -> str:
    """The lake's name fit for a message or a log: a password in it is masked."""
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", str(db), flags=re.IGNORECASE)


def _packaged(name: str) -> Path | None:
    """The extension file the `duckdb-extension-<name>` package ships for this DuckDB, if installed."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
        if candidate.is_file():
            return candidate
    return None


# how this process loaded each extension: a name (installed) or a packaged file's path
_loaded_by: dict[str, str] = {}


def load_extension(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """LOAD `name`: by name first (installed by `INSTALL`, or built in), then from the PyPI package
    built for this DuckDB (DuckDB cannot download extensions everywhere). Never downloads: a
    download attempt costs every connection a network timeout where there is no network."""
    if name in _loaded_by:
        con.execute(f"LOAD {_loaded_by[name]}")
        return
    con.execute("SET autoinstall_known_extensions = false")
    try:
        con.execute(f"LOAD {name}")
        _loaded_by[name] = name
        return
    except duckdb.Error as by_name:
        first = str(by_name).splitlines()[0]
    path = _packaged(name)
    if path is not None:
        try:
            con.execute(f"LOAD {_literal(str(path))}")
            _loaded_by[name] = _literal(str(path))
            return
        except duckdb.Error as exc:
            first = f"{first}; {path}: {str(exc).splitlines()[0]}"
    raise WorkbenchError(
        "WB_LAKE_EXTENSION_MISSING",
        f"DuckDB {duckdb.__version__} cannot load its {name} extension, which a DuckLake store needs ({first})",
        f"{_EXTRA_FIX} (it brings DuckDB and the extensions built for it), or in DuckDB run `INSTALL {name}`",
    )


# one in-memory DuckDB per process holds the extensions: loading them costs seconds, so each open
# is a cursor on it. The lake is attached afresh on each open (and detached on close): an attachment
# kept open would read a catalog another process has since changed (maintenance drops inlined rows).
_instance: duckdb.DuckDBPyConnection | None = None
_instance_lock = threading.Lock()


def connect(db: Path | str, data_path: str | None) -> duckdb.DuckDBPyConnection:
    """A connection (a cursor of the process's DuckDB) with lake `db` attached and in use; give it
    back with `release`."""
    global _instance
    url = str(db)
    catalog = url[len(PREFIX):].split(":", 1)[0]
    with _instance_lock:
        if _instance is None:
            instance = duckdb.connect()
            load_extension(instance, "ducklake")
            if catalog in _CATALOG_EXTENSIONS:
                load_extension(instance, _CATALOG_EXTENSIONS[catalog])
            _instance = instance
        elif catalog in _CATALOG_EXTENSIONS:
            load_extension(_instance, _CATALOG_EXTENSIONS[catalog])
        con = _instance.cursor()
    alias = "lake_" + uuid.uuid4().hex[:12]
    options = [f"DATA_INLINING_ROW_LIMIT {INLINE_ROWS}"]
    if data_path:
        options.append("DATA_PATH " + _literal(data_path))
    try:
        con.execute("SET enable_progress_bar = false")  # a slow query must not draw on a command's output
        for attempt in range(5):
            try:
                con.execute(f"ATTACH {_literal(url)} AS {alias} ({', '.join(options)})")
                break
            except duckdb.Error as exc:
                # machines attaching a new lake at once race to create its catalog tables: the
                # loser finds them made, and attaches the lake the winner created
                if "duplicate key" not in str(exc) or attempt == 4:
                    raise
                time.sleep(random.uniform(0.05, 0.2))
    except duckdb.Error as exc:
        con.close()
        raise _unreachable(url, exc, data_path) from exc
    con.execute(f"USE {alias}")
    return con


def release(con: duckdb.DuckDBPyConnection) -> None:
    """Detach the lake a `connect` attached, and close the cursor."""
    try:
        alias = con.execute("SELECT current_database()").fetchall()[0][0]
        con.execute("USE memory")
        con.execute(f"DETACH {alias}")
    except duckdb.Error:
        pass  # closing anyway: the instance forgets a cursor's failed state
    finally:
        con.close()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _unreachable(url: str, exc: duckdb.Error, data_path: str | None) -> WorkbenchError:
    reason = shown(str(exc).splitlines()[0])
    if "DATA_PATH" in str(exc) or "data path" in str(exc).lower():
        return WorkbenchError(
            "WB_CONFIG_INVALID", f"the lake {shown(url)} is new and needs a data path: {reason}",
            "set WORKBENCH_LAKE_DATA_PATH (or [tool.workbench] lake_data_path) to a folder every machine "
            "shares, or an s3:// prefix",
        )
    return WorkbenchError(
        "WB_LAKE_UNREACHABLE", f"cannot attach the lake {shown(url)} (data path {data_path!r}): {reason}",
        "check that its catalog database is up and reachable with the host, port, user and dbname given "
        "(a PostgreSQL password goes in PGPASSWORD or ~/.pgpass, not in the setting)",
    )


def migration_sql(sql: str) -> str:
    """A migration as DuckLake takes it: without the keys and indexes it does not support (the
    ingest keeps keys unique itself)."""
    sql = re.sub(r",\s*PRIMARY KEY\s*\([^)]*\)", "", sql)
    sql = re.sub(r"\s+PRIMARY KEY\b", "", sql)
    return re.sub(r"(CREATE|DROP) INDEX[^;]*;", "", sql)


def is_lake_connection(con: duckdb.DuckDBPyConnection) -> bool:
    rows = con.execute("SELECT type FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    return bool(rows) and rows[0][0] == "ducklake"


def prepare(con: duckdb.DuckDBPyConnection) -> None:
    """The lake's own table: the write token every writing transaction bumps (made and filled in
    one transaction, so two processes making it at once conflict rather than fill it twice)."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(f"CREATE TABLE IF NOT EXISTS {WRITE_TOKEN} (writes BIGINT)")
        if con.execute(f"SELECT count(*) FROM {WRITE_TOKEN}").fetchall()[0][0] == 0:
            con.execute(f"INSERT INTO {WRITE_TOKEN} VALUES (0)")
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass  # a failed COMMIT has already ended the transaction


def retrying(con: duckdb.DuckDBPyConnection, work: Callable[[], T], attempts: int = 50) -> T:
    """`work` (whole transactions, safe to redo) again while it fails on a conflict with another
    writer, with a short random pause; the last conflict is raised."""
    for attempt in range(attempts):
        try:
            return work()
        except duckdb.Error as exc:
            if not is_conflict(exc) or attempt == attempts - 1:
                raise
            _rollback(con)
            time.sleep(random.uniform(0.005, 0.05) * min(attempt + 1, 10))
    raise AssertionError("unreachable")


def claim_write(con: duckdb.DuckDBPyConnection) -> None:
    """Inside a writing transaction: make it conflict with any other committed meanwhile."""
    con.execute(f"UPDATE {WRITE_TOKEN} SET writes = writes + 1")


def is_conflict(exc: BaseException) -> bool:
    """Whether a commit failed because another writer committed first (retrying it is safe)."""
    text = str(exc)
    return "Transaction conflict" in text or "Failed to commit DuckLake" in text or "conflict" in text.lower()


def fold_rollups(con: duckdb.DuckDBPyConnection) -> int:
    """Every rollup's rows merged into one row per group, each group's figures exactly as a reader
    merges them (`Rollup.merged`: sums, firsts and lasts). A lake's ingests append a group's rows
    instead of merging them (`rollup.add_calls`), so a busy fleet leaves a row per group per commit;
    folded, the pages read one. One transaction a rollup, a write that conflicts with it is redone
    on what the other committed. Returns the rows folded away."""
    from workbench.store.rollup import ROLLUPS

    def fold(table: str, merged_sql: str) -> int:
        con.execute("BEGIN TRANSACTION")
        try:
            claim_write(con)
            rows = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
            merged = con.sql(merged_sql).to_arrow_table()
            if merged.num_rows < rows:  # else already one row a group: nothing to rewrite
                con.register("_wb_folded", merged)
                con.execute(f"DELETE FROM {table}")
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _wb_folded")
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise
        finally:
            con.unregister("_wb_folded")
        return rows - merged.num_rows

    return sum(retrying(con, lambda spec=spec: fold(spec.table, spec.merged(f"SELECT * FROM {spec.table}")))
               for spec in ROLLUPS)


def maintain(con: duckdb.DuckDBPyConnection, keep_days: float) -> dict[str, int]:
    """The rollups folded (`fold_rollups`), then DuckLake's own maintenance, in order: the rows
    small commits kept inline go into Parquet files, adjacent small files are merged, snapshots
    older than `keep_days` expire (time travel before them ends), and the files no snapshot needs
    any more are deleted. Returns what each step touched."""
    def count(function: str, arguments: str = "", params: dict | None = None) -> int:
        # counted in SQL: the rows carry timestamps, which Python would need pytz to take
        return con.execute(f"SELECT count(*) FROM {function}(current_database(){arguments})", params).fetchall()[0][0]

    done = {"folded_rollup_rows": fold_rollups(con), "flushed_tables": count("ducklake_flush_inlined_data"),
            "merged_files": count("ducklake_merge_adjacent_files")}
    done["expired_snapshots"] = count("ducklake_expire_snapshots", ", older_than => now() - to_microseconds($us)",
                                      {"us": int(keep_days * 86400 * 1_000_000)})
    done["deleted_files"] = count("ducklake_cleanup_old_files", ", cleanup_all => true")
    return done


def maintain_store(db: Path | str, keep_days: float) -> dict[str, int]:
    """`maintain` on the store `db`, with the data files before and after; a local file store only
    checkpoints (DuckDB keeps one file, with nothing to merge or expire)."""
    from workbench.store.db import open_store

    with open_store(db) as con:
        if not is_lake_connection(con):
            con.execute("CHECKPOINT")
            return {}
        before = data_files(con)
        done = maintain(con, keep_days)
        return {"data_files_before": before, **done, "data_files_after": data_files(con)}


def data_files(con: duckdb.DuckDBPyConnection) -> int:
    """The Parquet data files the lake's current snapshot reads."""
    tables = [name for (name,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database()").fetchall()]
    return sum(con.execute("SELECT count(*) FROM ducklake_list_files(current_database(), ?)", [name]).fetchall()[0][0]
               for name in tables)
