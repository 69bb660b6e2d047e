"""Migrations: numbered, forward-only, each in its own transaction; from an empty store and from
every earlier version to the latest; idempotent; a store newer than the code is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

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
    with duckdb.connect(str(tmp_path / "reference.duckdb")) as con:
        migrate(con)
        return _shape(con)


def test_migrations_are_numbered_and_named():
    names = [name for name, _ in MIGRATIONS]
    assert len(set(names)) == len(names)
    for number, name in enumerate(names, start=1):
        assert name.startswith(f"{number:04d}_"), name


def test_migrate_from_an_empty_file(tmp_path):
    path = tmp_path / "new.duckdb"
    with duckdb.connect(str(path)) as con:
        assert current_version(con) == 0
        assert migrate(con) == LATEST
        assert current_version(con) == LATEST
        versions = con.execute("SELECT version, name FROM schema_version ORDER BY version").fetchall()
        assert versions == [(number, name) for number, (name, _) in enumerate(MIGRATIONS, start=1)]
        tables = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert {"calls", "runs", "spans", "span_events", "compactions", "prompts", "models", "schema_version",
                "call_bodies", "run_tags", "spool_offsets"} <= tables


def test_open_store_creates_and_migrates(tmp_path):
    path = tmp_path / "deeper" / "wb.duckdb"
    with open_store(path) as con:
        assert current_version(con) == LATEST
    with open_store(path, read_only=True) as con:
        assert current_version(con) == LATEST


def test_remigration_is_idempotent(tmp_path):
    with duckdb.connect(str(tmp_path / "twice.duckdb")) as con:
        migrate(con)
        con.execute("INSERT INTO calls (call_id, input_tokens) VALUES ('c1', 5)")
        shape = _shape(con)
        assert migrate(con) == LATEST
        assert migrate(con) == LATEST
        assert _shape(con) == shape
        assert con.execute("SELECT count(*) FROM schema_version").fetchall()[0][0] == LATEST
        assert con.execute("SELECT input_tokens FROM calls").fetchall() == [(5,)]


@pytest.mark.parametrize("start", range(LATEST + 1))
def test_migrate_from_every_earlier_version(tmp_path, start):
    reference = _fresh_shape(tmp_path)
    with duckdb.connect(str(tmp_path / f"from-{start}.duckdb")) as con:
        assert migrate(con, target=start) == start
        assert current_version(con) == start
        assert migrate(con) == LATEST
        assert current_version(con) == LATEST
        assert _shape(con) == reference


def test_store_newer_than_the_code_is_refused(tmp_path):
    path = tmp_path / "future.duckdb"
    with duckdb.connect(str(path)) as con:
        migrate(con)
        con.execute("INSERT INTO schema_version VALUES (?, 'from_the_future', now())", [LATEST + 1])
        with pytest.raises(WorkbenchError) as raised:
            migrate(con)
        assert raised.value.code == "WB_STORE_INVALID"
    with pytest.raises(WorkbenchError) as raised, open_store(path):
        pass
    assert raised.value.code == "WB_STORE_INVALID"


def test_a_failing_migration_leaves_the_store_at_its_version(tmp_path, monkeypatch):
    broken = [*MIGRATIONS, ("9999_broken", "CREATE TABLE half_done (x INTEGER); SELECT * FROM no_such_table;")]
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    with duckdb.connect(str(tmp_path / "broken.duckdb")) as con:
        with pytest.raises(duckdb.Error):
            schema.migrate(con)
        assert current_version(con) == LATEST  # every good migration committed, the bad one rolled back
        tables = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert "half_done" not in tables


@contextmanager
def _migrated_from(tmp_path, suffix: str, *rows: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A store at the version just before the migration whose name ends with `suffix`, with `rows`
    (INSERT statements) written the old way, then migrated to the latest: its connection, closed after."""
    before = next(number for number, (name, _) in enumerate(MIGRATIONS) if name.endswith(suffix))
    with duckdb.connect(str(tmp_path / f"before{suffix}.duckdb")) as con:
        migrate(con, target=before)
        for insert in rows:
            con.execute(insert)
        migrate(con)
        yield con


def test_old_price_rows_move_to_the_reference_scale(tmp_path):
    # written the old way: scale counted places below the cent (1: tenths of a cent)
    with _migrated_from(tmp_path, "_ledger_price_scale", """INSERT INTO models VALUES
            ('mini@2025-08-01', 'mini', 'openai', '{"input": 150, "output": 600, "scale": 1}'),
            ('big@2025-08-01', 'big', 'openai', '{"input": 300, "output": 1500}'),
            ('yen@2025-08-01', 'yen', 'x', '{"input": 3, "output": 4, "currency": "JPY"}')""") as con:
        scales = dict(con.execute("SELECT id, json_extract(spec, '$.scale')::INTEGER FROM models").fetchall())
    assert scales == {"mini": 3, "big": 2, "yen": 0}  # the same prices: $0.150, $3.00, 3 yen per million


def test_old_bills_no_longer_count_replayed_calls_as_paid(tmp_path):
    # R1 (with R1a inside) billed 1 live and 2 replayed calls as 3 paid ones; R2 made no call
    with _migrated_from(tmp_path, "_ledger_replayed_apart", """INSERT INTO runs (run_id, parent_run_id, name,
            billed_input_tokens, billed_cache_read_tokens, billed_cache_write_tokens, billed_output_tokens,
            billed_reasoning_tokens, billed_cost_micros, billed_unpriced_calls, billed_calls, billed_unsettled) VALUES
            ('R1', NULL, 'a', 60, 0, 0, 6, 0, 600, 1, 3, 0), ('R1a', 'R1', 'b', 50, 0, 0, 5, 0, 500, 1, 2, 0),
            ('R2', NULL, 'c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)""",
                        """INSERT INTO calls (call_id, run_id, settled, replayed, input_tokens, cache_read_tokens,
            cache_write_tokens, output_tokens, reasoning_tokens, cost_micros) VALUES
            ('c1', 'R1', true, false, 10, 0, 0, 1, 0, 100), ('c2', 'R1a', true, true, 20, 0, 0, 2, 0, 500),
            ('c3', 'R1a', true, true, 30, 0, 0, 3, 0, NULL)""") as con:
        rows = {row[0]: row[1:] for row in con.execute(
            "SELECT run_id, billed_calls, billed_input_tokens, billed_output_tokens, billed_cost_micros, "
            "billed_unpriced_calls, billed_replayed_calls, billed_replayed_cost_micros, billed_replayed_unpriced_calls "
            "FROM runs").fetchall()}
    assert rows == {"R1": (1, 10, 1, 100, 0, 2, 500, 1), "R1a": (0, 0, 0, 0, 0, 2, 500, 1),
                    "R2": (None, None, None, None, None, None, None, None)}


def test_old_bills_of_two_currencies_are_split_again(tmp_path):
    # R1 (with R1a inside) summed 100 USD and 20 EUR (and 7 EUR replayed) as one figure; R2 paid
    # euros only, stored as if they were dollars; R3 made no call
    with _migrated_from(tmp_path, "_currency_run_bills", """INSERT INTO runs (run_id, parent_run_id, name,
            billed_cost_micros, billed_unpriced_calls, billed_calls, billed_replayed_calls, billed_replayed_cost_micros,
            billed_replayed_unpriced_calls) VALUES
            ('R1', NULL, 'a', 120, 0, 2, 1, 7, 0), ('R1a', 'R1', 'b', 20, 0, 1, 1, 7, 0),
            ('R2', NULL, 'c', 9, 0, 1, 0, 0, 0), ('R3', NULL, 'd', NULL, NULL, NULL, NULL, NULL, NULL)""",
                        """INSERT INTO calls (call_id, run_id, settled, replayed, cost_micros, currency, started_at) VALUES
            ('c1', 'R1', true, false, 100, 'USD', '2025-01-01 10:00+00'),
            ('c2', 'R1a', true, false, 20, 'EUR', '2025-01-01 10:01+00'),
            ('c3', 'R1a', true, true, 7, 'EUR', '2025-01-01 10:02+00'),
            ('c4', 'R2', true, false, 9, 'EUR', '2025-01-01 11:00+00')""") as con:
        rows = {row[0]: row[1:] for row in con.execute(
            "SELECT run_id, billed_currency, billed_cost_micros, billed_replayed_cost_micros, billed_other_currencies "
            "FROM runs").fetchall()}
    assert rows["R1"][:3] == ("USD", 100, 0)
    assert json.loads(rows["R1"][3]) == {"EUR": {"calls": 1, "cost_micros": 20, "replayed_calls": 1,
                                                 "replayed_cost_micros": 7}}
    assert rows["R1a"] == ("EUR", 20, 7, None)
    assert rows["R2"] == ("EUR", 9, 0, None)
    assert rows["R3"] == (None, None, None, None)


def test_old_compactions_get_the_currency_of_their_calls(tmp_path):
    # x1's summary and re-caching were paid in euros, x2's summary in dollars; x3 has no summary call
    # recorded, x4's summary call is not in the store
    with _migrated_from(tmp_path, "_compaction_currencies", """INSERT INTO calls (call_id, cost_micros, currency) VALUES
            ('s1', 5, 'EUR'), ('a1', 7, 'EUR'), ('s2', 9, 'USD'), ('a2', 1, 'USD')""",
                        """INSERT INTO compactions (compaction_id, cost_micros, summary_call_id, after_call_id,
            recache_cost_micros) VALUES ('x1', 5, 's1', 'a1', 3), ('x2', 9, 's2', 'a2', NULL),
            ('x3', 4, NULL, NULL, NULL), ('x4', 2, 'gone', 'a2', 6)""") as con:
        rows = dict((row[0], row[1:]) for row in con.execute(
            "SELECT compaction_id, summary_currency, recache_currency FROM compactions").fetchall())
    assert rows == {"x1": ("EUR", "EUR"), "x2": ("USD", None), "x3": (None, None), "x4": (None, "USD")}


def test_the_spans_index_by_trace_goes_and_the_spans_stay(tmp_path):
    with _migrated_from(tmp_path, "_no_trace_index",
                        "INSERT INTO spans (span_id, trace_id, run_id) VALUES ('s1', 't1', 'r1'), ('s2', 't1', NULL)") as con:
        indexes = {name for (name,) in con.execute(
            "SELECT index_name FROM duckdb_indexes() WHERE table_name = 'spans'").fetchall()}
        spans = con.execute("SELECT span_id FROM spans WHERE trace_id = 't1' ORDER BY 1").fetchall()
    assert indexes == {"spans_run"}
    assert spans == [("s1",), ("s2",)]
