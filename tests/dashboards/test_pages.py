"""Every page rendered by Streamlit's AppTest against the fixture store: no exception, no error box,
and the headline figures shown equal the ones computed here from the fixture's rows."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

import dashboard_store as fx
from fixtures.dashboard_app import render
from workbench.money import format_amount

CALLS = fx.call_rows()
COST = {c["call_id"]: c["cost_micros"] or 0 for c in CALLS}
PAID = sum(c["cost_micros"] or 0 for c in CALLS if not c["replayed"])  # c09 was replayed: never paid
PAGES = ["overview.py", "prompt_cache.py", "compaction.py", "failures.py", "evals.py", "run_explorer.py"]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders(dashboard_db, monkeypatch, page):
    at = render(dashboard_db, monkeypatch, page)
    assert at.metric or at.info, f"{page} showed nothing"


def test_overview_figures(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch)
    shown = metrics(at)
    assert shown["Spend"] == format_amount(PAID)  # exact, not rounded up to the cent
    spend = next(m for m in at.metric if m.label == "Spend")
    assert spend.delta == "+ 1 unpriced calls"  # flagged beside the total, never counted as free
    assert shown["Replayed: would cost"] == format_amount(COST["c09"])  # apart, never added to the spend
    assert shown["Calls"] == "11" and shown["Runs"] == "5" and shown["Unpriced calls"] == "1"
    assert shown["Run failure rate"] == "50.0%"  # 2 failed of 4 finished top-level runs


def test_failures_figures(dashboard_db, monkeypatch):
    shown = metrics(render(dashboard_db, monkeypatch, "failures.py"))
    failed = sum(COST[i] for i in ("c04", "c05", "c07", "c08"))
    assert shown["Billed to failed runs"] == format_amount(failed)
    assert shown["Share of spend"] == f"{100 * failed / PAID:.1f}%"
    assert shown["Failed runs"] == "2" and shown["Unsettled calls"] == "1"


def test_cache_figures(dashboard_db, monkeypatch):
    from test_queries import _savings

    shown = metrics(render(dashboard_db, monkeypatch, "prompt_cache.py"))
    read, write = _savings(CALLS)
    assert shown["Net savings"] == format_amount(read - write)
    assert shown["Request hit rate"] == "40.0%"


def test_compaction_and_evals_figures(dashboard_db, monkeypatch):
    shown = metrics(render(dashboard_db, monkeypatch, "compaction.py"))
    assert shown["Summary cost"] == format_amount(sum(x[8] for x in fx.COMPACTIONS))
    assert shown["Failed"] == "1"
    shown = metrics(render(dashboard_db, monkeypatch, "evals.py"))
    assert shown["Eval runs"] == "2" and shown["Failed gates"] == "1"


def test_overview_breaks_spend_down_by_a_tag_with_everything_else(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch)
    at.selectbox[0].set_value("env").run()
    at.number_input[0].set_value(1).run()
    assert not at.exception and not at.error
    frame = at.dataframe[0].value
    assert list(frame["env"]) == ["prod", "everything else"]  # the top one, and the rest in one row
    assert list(frame["calls"]) == [6, 5]


def test_filters_come_from_the_url(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch, provider="anthropic")
    assert metrics(at)["Calls"] == "3"
    assert at.query_params["provider"] == ["anthropic"] or at.query_params["provider"] == "anthropic"


def test_run_explorer_shows_the_run_from_the_url(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch, "run_explorer.py", run_id="R1")
    shown = metrics(at)
    assert shown["Status"] == "ok"
    assert shown["Billed"] == format_amount(sum(COST[i] for i in ("c01", "c02", "c03")))
    texts = " ".join(m.value for m in at.markdown)
    assert "lookup_person" in texts and "Hello, Ada Lovelace!" in texts


def test_missing_and_empty_stores_explain_how_to_fill_them(tmp_path, monkeypatch):
    at = render(tmp_path / "missing.duckdb", monkeypatch)
    assert "workbench demo" in at.info[0].value
    from workbench.store.db import open_store

    with open_store(tmp_path / "empty.duckdb"):
        pass
    for page in PAGES:
        at = render(tmp_path / "empty.duckdb", monkeypatch, page)
        assert "workbench demo" in at.info[0].value


def test_export_button_writes_a_cassette(dashboard_db, monkeypatch, tmp_path):
    at = render(dashboard_db, monkeypatch, "run_explorer.py", run_id="R1")
    target = tmp_path / "exported" / "run-r1.json"
    at.text_input[0].set_value(str(target)).run()
    next(b for b in at.button if "Export" in b.label).click().run()
    assert not at.exception and not at.error
    assert at.success, [w.value for w in at.warning]
    assert target.exists()
