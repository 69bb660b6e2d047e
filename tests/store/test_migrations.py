"""Migrations: numbered, forward-only, each in its own transaction; from an empty store and from
every earlier version to the latest; idempotent; a store newer than the code is refused."""

from __future__ import annotations

import duckdb
import pytest

from workbench.errors import WorkbenchError
from workbench.store import schema
from workbench.store.db import open_store
from workbench.store.schema import MIGRATIONS, current_version, migrate

LATEST = len(MIGRATIONS)


def _shape(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute(
        "SELECT table_name, column_name, data_type, ordinal_position FROM information_schema.columns "
        "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall()


def _fresh_shape(tmp_path) -> list[tuple]:
    con = duckdb.connect(str(tmp_path / "reference.duckdb"))
    try:
        migrate(con)
        return _shape(con)
    finally:
        con.close()


def test_migrations_are_numbered_and_named():
    names = [name for name, _ in MIGRATIONS]
    assert len(set(names)) == len(names)
    for number, name in enumerate(names, start=1):
        assert name.startswith(f"{number:04d}_"), name


def test_migrate_from_an_empty_file(tmp_path):
    path = tmp_path / "new.duckdb"
    con = duckdb.connect(str(path))
    try:
        assert current_version(con) == 0
        assert migrate(con) == LATEST
        assert current_version(con) == LATEST
        versions = con.execute("SELECT version, name FROM schema_version ORDER BY version").fetchall()
        assert versions == [(number, name) for number, (name, _) in enumerate(MIGRATIONS, start=1)]
        tables = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert {"calls", "runs", "spans", "span_events", "compactions", "prompts", "models", "schema_version",
                "call_bodies", "run_tags", "spool_offsets"} <= tables
    finally:
        con.close()


def test_open_store_creates_and_migrates(tmp_path):
    path = tmp_path / "deeper" / "wb.duckdb"
    with open_store(path) as con:
        assert current_version(con) == LATEST
    with open_store(path, read_only=True) as con:
        assert current_version(con) == LATEST


def test_remigration_is_idempotent(tmp_path):
    con = duckdb.connect(str(tmp_path / "twice.duckdb"))
    try:
        migrate(con)
        con.execute("INSERT INTO calls (call_id, input_tokens) VALUES ('c1', 5)")
        shape = _shape(con)
        assert migrate(con) == LATEST
        assert migrate(con) == LATEST
        assert _shape(con) == shape
        assert con.execute("SELECT count(*) FROM schema_version").fetchall()[0][0] == LATEST
        assert con.execute("SELECT input_tokens FROM calls").fetchall() == [(5,)]
    finally:
        con.close()


@pytest.mark.parametrize("start", range(LATEST + 1))
def test_migrate_from_every_earlier_version(tmp_path, start):
    reference = _fresh_shape(tmp_path)
    con = duckdb.connect(str(tmp_path / f"from-{start}.duckdb"))
    try:
        assert migrate(con, target=start) == start
        assert current_version(con) == start
        assert migrate(con) == LATEST
        assert current_version(con) == LATEST
        assert _shape(con) == reference
    finally:
        con.close()


def test_store_newer_than_the_code_is_refused(tmp_path):
    path = tmp_path / "future.duckdb"
    con = duckdb.connect(str(path))
    try:
        migrate(con)
        con.execute("INSERT INTO schema_version VALUES (?, 'from_the_future', now())", [LATEST + 1])
        with pytest.raises(WorkbenchError) as raised:
            migrate(con)
        assert raised.value.code == "WB_STORE_INVALID"
    finally:
        con.close()
    with pytest.raises(WorkbenchError) as raised, open_store(path):
        pass
    assert raised.value.code == "WB_STORE_INVALID"


def test_a_failing_migration_leaves_the_store_at_its_version(tmp_path, monkeypatch):
    broken = [*MIGRATIONS, ("9999_broken", "CREATE TABLE half_done (x INTEGER); SELECT * FROM no_such_table;")]
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    con = duckdb.connect(str(tmp_path / "broken.duckdb"))
    try:
        with pytest.raises(duckdb.Error):
            schema.migrate(con)
        assert current_version(con) == LATEST  # every good migration committed, the bad one rolled back
        tables = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert "half_done" not in tables
    finally:
        con.close()
