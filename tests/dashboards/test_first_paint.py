"""What a page sends first: its headline tiles before it reads the store (a cold browser loads the
metric's code meanwhile), its figures before the sidebar's filter widgets and the Run explorer's
run picker (a browser spends about a second of CPU building a date picker, six multiselects and a
radio, and shows the figures sent before them first), no tile left empty when a page stops before
its figures, the filters still applying when a visitor changes one, and the Run explorer opened
without a run drawn once, not drawn and then rerun."""

from __future__ import annotations

import pytest
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

import dashboard_store as fx
from fixtures.dashboard_app import render
from workbench.store import queries as q

PAGES = ["overview.py", "prompt_cache.py", "compaction.py", "failures.py", "evals.py", "run_explorer.py"]


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """The page elements drawn and the store's reads, in the order the script made them (the order
    they are sent in): a metric with a digit is a `figure`, one without (a tile waiting) a `tile`."""
    order: list[str] = []
    for name in ("metric", "multiselect", "date_input", "selectbox"):
        drawn = getattr(DeltaGenerator, name)

        def noted(self, *a, _name=name, _drawn=drawn, **k):
            if _name == "metric":
                order.append("figure" if any(ch.isdigit() for ch in str(a[1] if len(a) > 1 else k["value"])) else "tile")
            else:
                order.append(_name)
            return _drawn(self, *a, **k)

        monkeypatch.setattr(DeltaGenerator, name, noted)
    read = q.read
    monkeypatch.setattr(q, "read", lambda *a, **k: order.append("read") or read(*a, **k))
    return order


@pytest.mark.parametrize("page", PAGES)
def test_the_headline_figures_are_sent_before_the_filter_widgets(dashboard_db, monkeypatch, sent, page):
    at = render(dashboard_db, monkeypatch, **({"run_id": "R1"} if page == "run_explorer.py" else {}))
    sent.clear()
    at.switch_page(page).run()
    assert not at.exception and not at.error
    assert "figure" in sent and "multiselect" in sent, sent
    assert sent.index("figure") < sent.index("date_input") < sent.index("multiselect"), sent


@pytest.mark.parametrize("page", PAGES)
def test_the_headline_tiles_are_drawn_before_the_store_is_read(dashboard_db, monkeypatch, sent, page):
    at = render(dashboard_db, monkeypatch, **({"run_id": "R1"} if page == "run_explorer.py" else {}))
    st.cache_data.clear()  # the page reads the store again, as a fresh server does
    sent.clear()
    at.switch_page(page).run()
    assert not at.exception and not at.error
    assert "tile" in sent and "read" in sent, sent
    assert sent.index("tile") < sent.index("read") < sent.index("figure"), sent
    assert all(any(ch.isdigit() for ch in m.value) or m.value in ("ok", "failed", "running", "unknown", "no bill")
               for m in at.metric), [m.value for m in at.metric]  # every tile holds its figure


def test_the_run_explorers_figures_are_sent_before_its_run_picker(dashboard_db, monkeypatch, sent):
    at = render(dashboard_db, monkeypatch, run_id="R1")
    sent.clear()
    at.switch_page("run_explorer.py").run()
    assert not at.exception and not at.error
    assert sent.index("figure") < sent.index("selectbox"), sent
    assert at.selectbox[0].label == "Run" and at.selectbox[0].value == "R1"


def test_a_run_picked_in_the_explorer_is_shown_and_named_in_the_url(dashboard_db, monkeypatch, sent):
    at = render(dashboard_db, monkeypatch, "run_explorer.py", run_id="R1")
    other = next(option for option in at.selectbox[0].options if not option.endswith("R1"))
    run_id = other.rpartition(" · ")[2]
    sent.clear()
    at.selectbox[0].set_value(run_id).run()
    assert not at.exception and not at.error
    assert at.query_params["run_id"] in ([run_id], run_id)
    assert at.selectbox[0].value == run_id
    assert sent.count("date_input") == 1, sent  # shown in one run of the page, not drawn and then rerun
    assert run_id in " ".join(t.value for t in at.text)


@pytest.mark.parametrize("page", ["overview.py", "compaction.py", "failures.py", "evals.py", "run_explorer.py",
                                  "prompt_cache.py"])
def test_a_page_that_stops_before_its_figures_leaves_no_tile_waiting(tmp_path, monkeypatch, page):
    from workbench.store.db import open_store

    with open_store(tmp_path / "empty.duckdb"):
        pass
    at = render(tmp_path / "empty.duckdb", monkeypatch, page)
    assert "workbench demo" in at.info[0].value
    assert not at.metric, [m.value for m in at.metric]


@pytest.mark.parametrize("page", ["compaction.py", "evals.py", "run_explorer.py"])
def test_a_filter_that_matches_nothing_leaves_no_tile_waiting(dashboard_db, monkeypatch, page):
    at = render(dashboard_db, monkeypatch, page, prompt="no-such-prompt")
    assert at.info and not at.metric, [m.value for m in at.metric]


def test_a_filter_changed_in_the_sidebar_applies_and_goes_into_the_url(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch)
    provider = next(box for box in at.multiselect if box.label == "Provider")
    provider.set_value(["anthropic"]).run()
    assert not at.exception and not at.error
    assert {m.label: m.value for m in at.metric}["Calls"] == str(
        sum(1 for call in fx.CALLS if fx.PROVIDERS[call[3]] == "anthropic"))
    assert at.query_params["provider"] in (["anthropic"], "anthropic")
    at.run()  # a refresh keeps the choice
    assert next(box for box in at.multiselect if box.label == "Provider").value == ["anthropic"]
    assert {m.label: m.value for m in at.metric}["Calls"] == "3"


def test_the_run_explorer_without_a_run_shows_the_latest_in_one_run_of_the_page(dashboard_db, monkeypatch, sent):
    at = render(dashboard_db, monkeypatch)
    st.cache_data.clear()  # the page reads the store, as on a fresh server
    sent.clear()
    at.switch_page("run_explorer.py").run()
    assert not at.exception and not at.error
    assert sent.count("date_input") == 1, sent  # the sidebar drawn once: the page was not rerun
    # the runs listed and the latest run read together (the sidebar's options are read after the figures)
    assert sent[:sent.index("figure")].count("read") == 1, sent
    assert at.query_params["run_id"] in ([at.selectbox[0].value], at.selectbox[0].value)
    assert {m.label for m in at.metric} >= {"Status", "Billed"}


def test_the_run_explorer_opened_again_without_a_run_shows_the_latest_not_the_last_picked(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch, "run_explorer.py", run_id="R1")
    del at.query_params["run_id"]  # the navigation's link to the page: the filters, no run
    at.run()
    assert not at.exception and not at.error
    latest = at.query_params["run_id"]
    assert latest not in ("R1", ["R1"]) and at.selectbox[0].value in (latest, *latest)
