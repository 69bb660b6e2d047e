"""The dashboard's reads are cached until the store changes: a call written after a page was drawn
shows on the next refresh at once (whether the write is still in DuckDB's write-ahead log or was
checkpointed into the file), and a refresh of an unchanged store reads nothing and shows the same
figures."""

from __future__ import annotations

import shutil

import duckdb
import pytest

import dashboard_store as fx
from fixtures.dashboard_app import render
from workbench.store.db import open_store
from workbench.store.ingest import write_rows


def figures(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.fixture
def db(dashboard_db, tmp_path):
    """A copy of the fixture store this test may write to."""
    return shutil.copy(dashboard_db, tmp_path / "workbench.duckdb")


def add_call(db, call_id: str, checkpoint: bool) -> None:
    """A call written by another connection, as the ingester writes one: left in the write-ahead log,
    or checkpointed into the file (what closing a connection does by default)."""
    new = {**fx.call_rows()[0], "call_id": call_id}
    with open_store(db) as con:
        if not checkpoint:
            con.execute("PRAGMA disable_checkpoint_on_shutdown")
        write_rows(con, "call", [new])


@pytest.mark.parametrize("checkpoint", [False, True], ids=["in the log", "checkpointed"])
def test_a_call_written_after_the_page_was_drawn_shows_on_the_next_refresh(db, monkeypatch, checkpoint):
    at = render(db, monkeypatch)
    assert figures(at)["Calls"] == "11"
    add_call(db, "c-new-1", checkpoint)
    assert db.with_name(db.name + ".wal").exists() is not checkpoint  # the write is where the case says
    at.run()  # a refresh, well within what a time-based cache would have kept
    assert figures(at)["Calls"] == "12"
    add_call(db, "c-new-2", checkpoint)
    at.run()
    assert figures(at)["Calls"] == "13"


@pytest.mark.parametrize("page", ["overview.py", "failures.py", "prompt_cache.py", "compaction.py", "evals.py",
                                  "run_explorer.py"])
def test_a_refresh_of_an_unchanged_store_reads_nothing_and_shows_the_same_figures(db, monkeypatch, page):
    opened = []
    connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: opened.append(a) or connect(*a, **k))
    at = render(db, monkeypatch, page)
    first = figures(at)
    assert first and opened, f"{page}: drew no figures from the store"
    opened.clear()
    at.run()
    assert figures(at) == first
    assert opened == [], f"{page} read the store again although it had not changed"


def test_the_overview_reads_its_run_sets_once_for_its_parts_and_shows_the_filtered_figures(db, monkeypatch):
    """The Overview is two reads (its headline, then its tables): the runs its provider filter keeps
    are read once, and both parts show the figures of the filtered calls."""
    from workbench.store import queries as q

    read = []
    run_sets = q.run_sets
    monkeypatch.setattr(q, "run_sets", lambda con, f: read.append(f) or run_sets(con, f))
    at = render(db, monkeypatch, provider="anthropic")
    assert read == [q.Filters(providers=("anthropic",))]
    assert figures(at)["Calls"] == str(sum(1 for call in fx.CALLS if fx.PROVIDERS[call[3]] == "anthropic"))
    assert figures(at)["Runs"] == "1"  # R2, the top-level run around the anthropic calls
    at.run()  # a refresh of an unchanged store: read from the cache, nothing again
    assert len(read) == 1


def test_the_overviews_tables_take_the_spend_cube_its_headline_read(db, monkeypatch):
    """Under a tag the Overview's headline reads the spend cube from the per-run rollup; its tables,
    read after it on another connection, regroup that cube instead of reading it again."""
    from workbench.store import queries as q
    from workbench.store.queries import spend

    read = []
    rrq = spend._rrq
    monkeypatch.setattr(spend, "_rrq", lambda con, f, body, *a: read.append(f) or rrq(con, f, body, *a))
    at = render(db, monkeypatch, tag="env=prod")
    f = q.Filters(tags=("env=prod",))
    assert read == [f]
    with open_store(db, read_only=True) as con:
        assert figures(at)["Calls"] == f"{q.call_totals(con, f)['calls'][0]:,}" != "0"
