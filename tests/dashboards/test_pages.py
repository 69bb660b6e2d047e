"""Every page rendered by Streamlit's AppTest against the fixture store: no exception, no error box,
and the headline figures shown equal the ones computed here from the fixture's rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import dashboard_store as fx
from workbench.money import format_exact, format_micros

APP = str(Path(__file__).resolve().parents[2] / "dashboards" / "app.py")
CALLS = fx.call_rows()
COST = {c["call_id"]: c["cost_micros"] or 0 for c in CALLS}
PAGES = ["overview.py", "prompt_cache.py", "compaction.py", "failures.py", "evals.py", "run_explorer.py"]


def render(db: Path, monkeypatch: pytest.MonkeyPatch, page: str = "overview.py", **params: str) -> AppTest:
    monkeypatch.setenv("WORKBENCH_DB", str(db))
    monkeypatch.setenv("WORKBENCH_SPOOL_DIR", str(db.parent / "spool"))
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    if page != "overview.py":
        at.switch_page(page)
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders(dashboard_db, monkeypatch, page):
    at = render(dashboard_db, monkeypatch, page)
    assert at.metric or at.info, f"{page} showed nothing"


def test_overview_figures(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch)
    shown = metrics(at)
    assert shown["Spend"] == format_micros(sum(COST.values()))
    spend = next(m for m in at.metric if m.label == "Spend")
    assert spend.delta == "+ 1 unpriced calls"  # flagged beside the total, never counted as free
    assert shown["Calls"] == "11" and shown["Runs"] == "5" and shown["Unpriced calls"] == "1"
    assert shown["Run failure rate"] == "50.0%"  # 2 failed of 4 finished top-level runs


def test_failures_figures(dashboard_db, monkeypatch):
    shown = metrics(render(dashboard_db, monkeypatch, "failures.py"))
    failed = sum(COST[i] for i in ("c04", "c05", "c07", "c08"))
    assert shown["Billed to failed runs"] == format_micros(failed)
    assert shown["Share of spend"] == f"{100 * failed / sum(COST.values()):.1f}%"
    assert shown["Failed runs"] == "2" and shown["Unsettled calls"] == "1"


def test_cache_figures(dashboard_db, monkeypatch):
    from test_queries import _savings

    shown = metrics(render(dashboard_db, monkeypatch, "prompt_cache.py"))
    read, write = _savings(CALLS)
    assert shown["Net savings"] == format_exact(read - write)
    assert shown["Request hit rate"] == "40.0%"


def test_compaction_and_evals_figures(dashboard_db, monkeypatch):
    shown = metrics(render(dashboard_db, monkeypatch, "compaction.py"))
    assert shown["Summary cost"] == format_micros(sum(x[8] for x in fx.COMPACTIONS))
    assert shown["Failed"] == "1"
    shown = metrics(render(dashboard_db, monkeypatch, "evals.py"))
    assert shown["Eval runs"] == "2" and shown["Failed gates"] == "1"


def test_filters_come_from_the_url(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch, provider="anthropic")
    assert metrics(at)["Calls"] == "3"
    assert at.query_params["provider"] == ["anthropic"] or at.query_params["provider"] == "anthropic"


def test_run_explorer_shows_the_run_from_the_url(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch, "run_explorer.py", run_id="R1")
    shown = metrics(at)
    assert shown["Status"] == "ok"
    assert shown["Billed"] == format_micros(sum(COST[i] for i in ("c01", "c02", "c03")))
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


def test_evals_shows_the_matrix_and_a_case_side_by_side(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch, "evals.py", matrix_id="MX", case="grace")
    assert any(box.label == "Matrix" for box in at.selectbox)
    texts = [code.value for code in at.code]
    # each cell's output as text, and its difference from the reference cell
    assert "Hi Grace" in texts and "Bye Grace" in texts
    assert any("-Hi Grace" in text and "+Bye Grace" in text for text in texts)
    assert "same as the reference" in texts  # beta's first answer to grace is the reference's
    captions = " ".join(caption.value for caption in at.caption)
    assert "score 1.00" in captions and "score 0.00" in captions and "score 0.50 ±0.71" in captions
