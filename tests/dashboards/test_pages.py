"""Every page rendered by Streamlit's AppTest against the fixture store: no exception, no error box,
and the headline figures shown equal the ones computed here from the fixture's rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from pandas.api.types import is_numeric_dtype
from streamlit.testing.v1 import AppTest

import dashboard_store as fx
from fixtures.dashboard_app import APP, render
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


D = {call[0]: call for call in fx.TWO_CURRENCIES}
TWO = {c["call_id"]: c["cost_micros"] for c in fx.call_rows(fx.TWO_CURRENCIES)}


@pytest.mark.parametrize(("calls", "billed", "replayed"), [
    # R2 failed: a call priced and one nothing priced (two currencies: test_two_currency_bills.py)
    ([D["d01"], ("d02", "R2", *D["d02"][2:]), D["d07"]], f"{format_amount(TWO['d02'], 'USD')} + 1 unpriced", None),
    # R2's calls priced in euros only: its bill is in euros, as the runtime names it
    ([D["d01"], D["d05"], D["d06"]], format_amount(TWO["d05"] + TWO["d06"], "EUR"), None),
    ([D["d01"], D["d07"]], "unpriced (1 calls)", None),  # nothing priced in the failed runs: never 0
    ([D["d01"]], format_amount(0, "USD"), None),  # nothing billed to them at all
    # a replayed call inside a failed run: counted apart, with what it would have cost
    ([D["d01"], ("d04", "R2", *D["d04"][2:])], format_amount(0, "USD"), format_amount(TWO["d04"], "USD")),
])
def test_failures_bill_each_currency_and_the_unpriced_calls(tmp_path, monkeypatch, calls, billed, replayed):
    at = render(fx.build(tmp_path / "workbench.duckdb", evals=False, calls=calls, compactions=[]), monkeypatch,
                "failures.py")
    assert metrics(at)["Billed to failed runs"] == billed
    usage = next(caption.value for caption in at.caption if caption.value.startswith("Usage billed"))
    assert (f"1 calls that would cost {replayed}." in usage) if replayed else "Replayed" not in usage


def test_cache_figures(dashboard_db, monkeypatch):
    from test_queries import _savings

    shown = metrics(render(dashboard_db, monkeypatch, "prompt_cache.py"))
    read, write = _savings(CALLS)
    assert shown["Net savings"] == format_amount(read - write)
    assert shown["Request hit rate"] == "40.0%"



def test_cache_savings_in_two_currencies_are_shown_apart(tmp_path, monkeypatch):
    from test_queries import _savings

    db = fx.build(tmp_path / "workbench.duckdb", evals=False, calls=fx.TWO_CURRENCIES, compactions=[])
    calls = fx.call_rows(fx.TWO_CURRENCIES)
    at = render(db, monkeypatch, "prompt_cache.py")
    shown = metrics(at)
    dollars = _savings([c for c in calls if c["currency"] != "EUR"])
    euros = _savings([c for c in calls if c["currency"] == "EUR"])
    assert shown["Net savings"] == (f"{format_amount(dollars[0] - dollars[1], 'USD')} + "
                                    f"{format_amount(euros[0] - euros[1], 'EUR')}")
    assert shown["Saved by reads"] == f"{format_amount(dollars[0], 'USD')} + {format_amount(euros[0], 'EUR')}"
    hits = sum(c["cache_read_tokens"] > 0 for c in calls)
    assert shown["Request hit rate"] == f"{100 * hits / len(calls):.1f}%" == "71.4%"  # in any currency
    assert any("other currencies are in the table" in caption.value for caption in at.caption)

def test_summary_cost_in_two_currencies_is_shown_apart(tmp_path, monkeypatch):
    """Compactions whose summary calls were priced in dollars and in euros: the headline labels each
    amount with its calls' currency and never adds them (it said USD for both before)."""
    db = fx.build_two_currency_compactions(tmp_path / "workbench.duckdb")
    at = render(db, monkeypatch, "compaction.py")
    assert metrics(at)["Summary cost"] == f"{format_amount(70_000_000, 'EUR')} + {format_amount(155_000_000, 'USD')} + 1 unpriced"
    sources = next(frame.value for frame in at.dataframe if "source" in frame.value.columns)
    assert list(sources["summary"]) == [f"{format_amount(70_000_000, 'EUR')} + {format_amount(155_000_000, 'USD')}"]
    # the runs that compacted most: each run's summaries per currency; every compaction in its own
    top = next(frame.value for frame in at.dataframe if "run" in frame.value.columns)
    assert dict(zip(top["run"], top["summary"])) == {
        "run_explorer?run_id=R2": f"{format_amount(70_000_000, 'EUR')} + {format_amount(5_000_000, 'USD')}",
        "run_explorer?run_id=R1": format_amount(150_000_000, "USD")}
    events = next(frame.value for frame in at.dataframe if "compaction_id" in frame.value.columns)
    assert dict(zip(events["compaction_id"], events["cost"])) == {
        "x1": format_amount(150_000_000, "USD"), "x2": format_amount(70_000_000, "EUR"),
        "x3": "–", "x4": format_amount(5_000_000, "USD")}


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
    texts = " ".join(t.value for t in at.text)
    assert "Tool call: lookup_person" in texts and "Hello, Ada Lovelace!" in texts


def test_missing_and_empty_stores_explain_how_to_fill_them(tmp_path, monkeypatch):
    at = render(tmp_path / "missing.duckdb", monkeypatch)
    assert "workbench demo" in at.info[0].value
    from workbench.store.db import open_store

    with open_store(tmp_path / "empty.duckdb"):
        pass
    for page in PAGES:
        at = render(tmp_path / "empty.duckdb", monkeypatch, page)
        assert "workbench demo" in at.info[0].value


def export(at: AppTest, target: str, replace: bool = False) -> AppTest:
    at.text_input[0].set_value(target)
    at.checkbox[0].set_value(replace)
    return next(b for b in at.button if "Export" in b.label).click().run()


def test_export_writes_a_cassette_and_case_in_the_projects_cassette_folder(dashboard_db, monkeypatch, tmp_path):
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'shop'\n")
    monkeypatch.chdir(project / "app")  # the dashboard started below the project's root
    at = render(dashboard_db, monkeypatch, "run_explorer.py", run_id="R1")
    assert at.text_input[0].value == "exported/run-R1.json"
    export(at, "exported/run-R1.json")
    assert at.success and not at.warning, [w.value for w in at.warning]
    assert (project / "cassettes" / "exported" / "run-R1.json").is_file()
    assert (project / "cassettes" / "exported" / "run-R1.case.jsonl").is_file()


@pytest.mark.parametrize("target", ["../outside.json", "/tmp/workbench-export-absolute.json", "exported/../../up.json",
                                    "exported/run.sh", ".", "link/run.json"])
def test_export_never_writes_outside_the_cassette_folder(dashboard_db, monkeypatch, tmp_path, target):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cassettes").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cassettes" / "link").symlink_to(tmp_path / "elsewhere")  # a link out of the folder
    before = {path for path in Path("/tmp").glob("workbench-export-*")} | set(tmp_path.rglob("*"))
    at = export(render(dashboard_db, monkeypatch, "run_explorer.py", run_id="R1"), target)
    assert not at.success and "WB_EXPORT_REFUSED" in at.warning[0].value
    assert ({path for path in Path("/tmp").glob("workbench-export-*")} | set(tmp_path.rglob("*"))) == before


def test_export_replaces_a_file_only_when_asked(dashboard_db, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cassette = tmp_path / "cassettes" / "keep.json"
    cassette.parent.mkdir()
    cassette.write_text("mine")
    at = export(render(dashboard_db, monkeypatch, "run_explorer.py", run_id="R1"), "keep.json")
    assert "WB_EXPORT_REFUSED" in at.warning[0].value and "already exist" in at.warning[0].value
    assert cassette.read_text() == "mine" and not (tmp_path / "cassettes" / "keep.case.jsonl").exists()
    at = export(at, "keep.json", replace=True)
    assert at.success and cassette.read_text() != "mine"


def test_prompt_versions_read_as_written_and_calls_outside_prompts_as_no_prompt(dashboard_db, monkeypatch):
    at = render(dashboard_db, monkeypatch)
    by_prompt = next(d.value for d in at.dataframe if "prompt" in d.value.columns)
    assert sorted(by_prompt["prompt"]) == ["(no prompt)", "greet v1", "greet v2", "summarize v2"]
    assert not any("prompt_id" in d.value.columns for d in at.dataframe)
    evals = render(dashboard_db, monkeypatch, "evals.py")
    labels = evals.selectbox[0].options
    assert any(" greet v2 " in label for label in labels) and not any("vv" in label for label in labels)
    assert ui_label("ticket-classifier", "v1") == "ticket-classifier v1" and ui_label(None, None) == "(no prompt)"


def ui_label(prompt_id, version):
    import sys

    sys.path.insert(0, str(Path(APP).parent))
    from _common import prompt_label

    return prompt_label(prompt_id, version)


def test_count_axes_have_whole_number_ticks(dashboard_db, monkeypatch):
    import json

    at = render(dashboard_db, monkeypatch, "compaction.py")
    specs = [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]
    counts = [spec["encoding"]["y"] for spec in specs if spec["encoding"]["y"]["field"] == "events"]
    assert counts and all(y["axis"] == {"format": "d", "tickMinStep": 1} for y in counts)


MONEY = ("cost", "net_savings", "read_savings", "write_premium", "cost_per_case")


@pytest.mark.parametrize("page", PAGES)
def test_costs_come_right_after_the_labels_of_every_table(dashboard_db, monkeypatch, page):
    at = render(dashboard_db, monkeypatch, page, **({"run_id": "R1"} if page == "run_explorer.py" else {}))
    for frame in (d.value for d in at.dataframe):
        columns = list(frame.columns)
        money = [c for c in columns if c in MONEY]
        if not money:
            continue
        before = columns[:columns.index(money[0])]
        assert len(before) <= 4, columns  # the run link and at most three labels: visible without scrolling
        assert not any(is_numeric_dtype(frame[c]) for c in before), columns  # labels only: no count before it
        assert not {"priced_calls", "currency"} & set(columns)
        if "cost" in columns:  # a rounded total names its unpriced calls itself
            assert "unpriced_calls" not in columns


def test_a_password_guards_every_page_when_one_is_set(dashboard_db, monkeypatch):
    monkeypatch.setenv("WORKBENCH_DASHBOARD_PASSWORD", "correct horse battery")
    monkeypatch.setenv("WORKBENCH_DB", str(dashboard_db))
    monkeypatch.setenv("WORKBENCH_SPOOL_DIR", str(dashboard_db.parent / "spool"))
    for page in PAGES:
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        if page != "overview.py":
            at.switch_page(page).run()
        assert not at.metric and not at.dataframe and at.text_input[0].label == "Password", page
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.text_input[0].input("wrong guess")
    at.button[0].click().run()
    assert at.error and not at.metric
    at.text_input[0].input("correct horse battery")
    at.button[0].click().run()
    assert metrics(at)["Calls"] == "11"


CANARY = "http://127.0.0.1:9/canary"


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory) -> Path:
    import hostile_store

    return hostile_store.build(tmp_path_factory.mktemp("hostile") / "workbench.duckdb", CANARY)


HOSTILE_VIEWS = [("overview.py", {}), ("prompt_cache.py", {}), ("compaction.py", {}), ("failures.py", {}),
                 ("evals.py", {"eval_run_id": "E2"}), ("run_explorer.py", {"run_id": "R1"}),
                 ("run_explorer.py", {"run_id": "R2"}), ("run_explorer.py", {"run_id": "R2a"})]


@pytest.mark.parametrize(("page", "params"), HOSTILE_VIEWS)
def test_recorded_text_never_reaches_markdown(hostile_db, monkeypatch, page, params):
    at = render(hostile_db, monkeypatch, page, **params)
    markdown = [*at.markdown, *at.caption, *at.info, *at.warning, *at.error, *at.success, *at.title, *at.subheader]
    rendered = [element.value for element in markdown] + [m.value for m in at.metric] + [m.label for m in at.metric]
    assert not [text for text in rendered if CANARY in text or "bold-" in text]
    if page == "run_explorer.py" and params["run_id"] != "R2a":  # what was said is there, as itself
        import hostile_store

        shown = [t.value for t in at.text] + [c.value for c in at.code]
        assert any(hostile_store.hostile("Say hello to Ada", "prompt", CANARY) in text for text in shown)
        assert any("run-error" in text for text in shown) == (params["run_id"] == "R2")


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


def test_the_dashboard_runs_without_magic_and_no_page_needs_it(monkeypatch):
    """`workbench dashboard` turns Streamlit's magic off (a script's bare expressions written to the
    page), so a page that relied on it would silently show less: none does."""
    import ast
    import os

    from streamlit.runtime.scriptrunner import magic

    from workbench.cli.project import dashboard

    class Served(Exception):
        pass

    def serve(path, command, env):
        raise Served(command)

    monkeypatch.setattr(os, "execve", serve)
    with pytest.raises(Served) as served:
        dashboard(db=None, port=8501, host="127.0.0.1", open_browser=False)
    flags = served.value.args[0]
    assert flags[flags.index("--runner.magicEnabled") + 1] == "false"
    for script in Path(APP).parent.glob("*.py"):
        rewritten = ast.dump(magic.add_magic(script.read_text(encoding="utf-8"), str(script)))
        assert "transparent_write" not in rewritten, f"{script.name} writes a bare expression to the page"
