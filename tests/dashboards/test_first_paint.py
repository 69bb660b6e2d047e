"""What a page sends first: its headline figures before the sidebar's filter widgets (a browser
spends about a second of CPU building a date picker, six multiselects and a radio, and shows the
figures sent before them first), the filters still applying when a visitor changes one, and the
Run explorer opened without a run drawn once, not drawn and then rerun."""

from __future__ import annotations

import pytest
from streamlit.delta_generator import DeltaGenerator

import dashboard_store as fx
from fixtures.dashboard_app import render

PAGES = ["overview.py", "prompt_cache.py", "compaction.py", "failures.py", "evals.py", "run_explorer.py"]


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """The page elements drawn, in the order the script drew them (the order they are sent in)."""
    order: list[str] = []
    for name in ("metric", "multiselect", "date_input"):
        drawn = getattr(DeltaGenerator, name)
        monkeypatch.setattr(DeltaGenerator, name,
                            lambda self, *a, _name=name, _drawn=drawn, **k: order.append(_name) or _drawn(self, *a, **k))
    return order


@pytest.mark.parametrize("page", PAGES)
def test_the_headline_figures_are_sent_before_the_filter_widgets(dashboard_db, monkeypatch, sent, page):
    at = render(dashboard_db, monkeypatch, **({"run_id": "R1"} if page == "run_explorer.py" else {}))
    sent.clear()
    at.switch_page(page).run()
    assert not at.exception and not at.error
    assert "metric" in sent and "multiselect" in sent, sent
    assert sent.index("metric") < sent.index("date_input") < sent.index("multiselect"), sent


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
    sent.clear()
    at.switch_page("run_explorer.py").run()
    assert not at.exception and not at.error
    assert sent.count("date_input") == 1, sent  # the sidebar drawn once: the page was not rerun
    assert at.query_params["run_id"] in ([at.selectbox[0].value], at.selectbox[0].value)
    assert {m.label for m in at.metric} >= {"Status", "Billed"}
