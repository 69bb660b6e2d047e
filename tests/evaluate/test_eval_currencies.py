"""An eval's cost is exact per currency: a judge priced in euros (models.toml) beside cases priced in
dollars (the price library) is never one sum, and a judge call nothing priced is counted, never taken
as free. Through `workbench eval` in replay, console and --json, as CI runs it."""

from __future__ import annotations

import json
from pathlib import Path

from eval_support import OFFLINE_ENV, examples_copy, workbench_cli
from fixtures.dashboard_app import render

from workbench.capture.runs import Billed, CurrencyPart
from workbench.config import spool_dir_of
from workbench.evaluate.runner import bill_costs, one_cost
from workbench.money import format_amount, format_exact
from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools

EUROS = "claude-eur-judge"  # the summarizer's judge, replayed, priced by the project's models.toml in EUR
MODELS_TOML = f"""
[[model]]
id = "{EUROS}"
provider = "anthropic"
currency = "EUR"
input = 100
output = 500
context_window = 200000
max_output = 64000
source = "a test's negotiated price"
as_of = 2026-01-01
"""


def _euro_judge(root: Path) -> Path:
    """The example summarizer with its judge's model in euros (the cassette's requests say so too)."""
    project = examples_copy(root)
    cassette = project / "cassettes" / "summarizer.judge.json"
    cassette.write_text(cassette.read_text().replace("claude-haiku-4-5", EUROS))
    suite = project / "evals" / "summarizer.py"
    suite.write_text(suite.read_text().replace('judge="claude-haiku-4-5"', f'judge="{EUROS}"'))
    (project / "models.toml").write_text((project / "models.toml").read_text() + MODELS_TOML)
    return project


def test_a_judge_in_euros_beside_cases_in_dollars_is_never_one_sum(tmp_path):
    _two_currency_eval(tmp_path)


def _two_currency_eval(tmp_path: Path) -> tuple[Path, int, int]:
    """The summarizer with its judge in euros, through `workbench eval --json` then the console;
    its euros and dollars."""
    project = _euro_judge(tmp_path / "p")
    result = workbench_cli(project, "eval", "summarizer", "--json", "out.json", env=OFFLINE_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    [suite] = json.loads((project / "out.json").read_text())["suites"]
    cases = {case["case"]: case for case in suite["cases"]}
    assert all(case["currency"] == "USD" and case["costs"] == {"USD": case["cost_micros"]} and case["cost_micros"] > 0
               for case in cases.values())
    judges = suite["judge_costs"]["EUR"]
    assert suite["judge_costs"] == {"EUR": judges} and judges > 0 and suite["judge_currency"] == "EUR"
    dollars = sum(case["cost_micros"] for case in cases.values())
    # two currencies: no one figure, each kept exact, nothing unpriced
    assert (suite["cost_micros"], suite["currency"], suite["unpriced_calls"]) == (None, None, 0)
    assert suite["costs"] == {"EUR": judges, "USD": dollars}

    console = workbench_cli(project, "eval", "summarizer", env=OFFLINE_ENV)
    assert console.returncode == 0, console.stdout + console.stderr
    both = f"{format_amount(judges, 'EUR')} + {format_amount(dollars, 'USD')}"
    assert f"cost {both} (judges {format_amount(judges, 'EUR')})" in console.stdout.replace("\n", " ")

    # stored (migration 0020): the run's currencies apart, each case's figure named in its currency
    ingest_spools(project / "wb.duckdb", spool_dir_of(project / "wb.duckdb"))
    with open_store(project / "wb.duckdb", read_only=True) as con:
        runs = con.execute("SELECT cost_micros, currency, costs, unpriced_calls FROM eval_runs").fetchall()
        results = con.execute("SELECT DISTINCT currency, costs, unpriced_calls FROM eval_results").fetchall()
        samples = con.execute("SELECT DISTINCT currency, costs, unpriced_calls FROM eval_samples").fetchall()
    assert runs == [(None, None, json.dumps({"EUR": judges, "USD": dollars}), 0)] * 2
    assert results == samples == [("USD", None, 0)]
    return project, judges, dollars


def test_the_evals_page_keeps_the_currencies_apart(tmp_path, monkeypatch):
    project, judges, dollars = _two_currency_eval(tmp_path)
    stored = 2  # both evals
    at = render(project / "wb.duckdb", monkeypatch, "evals.py")
    shown = {metric.label: metric.value for metric in at.metric}
    assert shown["Eval spend"] == f"{format_amount(stored * judges, 'EUR')} + {format_amount(stored * dollars, 'USD')}"
    assert shown["Cost per case"] == "–"  # no one figure of two currencies
    runs = next(frame.value for frame in at.dataframe if "verdict" in frame.value.columns)
    assert list(runs["cost"]) == [f"{format_amount(judges, 'EUR')} + {format_amount(dollars, 'USD')}"] * stored


UNPRICED = "claude-unpriced-judge"
UNPRICED_JUDGE = f"""

def unpriced_judge(prompt, variables, runner):
    \"\"\"The judge on a model the app routes by a registry of its own: nothing the project knows prices it.\"\"\"
    from datetime import date

    from workbench.models import ModelRegistry, ModelSpec
    from workbench.runtime import AnthropicProvider, Gateway, llm

    registry = ModelRegistry(library=False)
    registry.register(ModelSpec(id="{UNPRICED}", provider="anthropic", input=100, output=500, context_window=200000,
                                max_output=64000, source="the app's", as_of=date(2026, 1, 1)))
    provider = AnthropicProvider(models=["claude-*"], transport=runner.network.transport(runner.cassette))
    return llm(Gateway([provider], registry=registry), prompt, variables, output=prompt.output_type,
               model="{UNPRICED}", prompt_cache="auto")


suite = define_eval("""


def test_an_unpriced_judge_is_counted_never_free(tmp_path):
    project = examples_copy(tmp_path / "p")
    cassette = project / "cassettes" / "summarizer.judge.json"
    cassette.write_text(cassette.read_text().replace("claude-haiku-4-5", UNPRICED))
    suite = project / "evals" / "summarizer.py"
    suite.write_text(suite.read_text().replace('judge="claude-haiku-4-5"', "judge=unpriced_judge")
                     .replace("\nsuite = define_eval(", UNPRICED_JUDGE))
    result = workbench_cli(project, "eval", "summarizer", "--json", "out.json", env=OFFLINE_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    [data] = json.loads((project / "out.json").read_text())["suites"]
    dollars = sum(case["cost_micros"] for case in data["cases"])
    assert dollars > 0 and all(case["unpriced_calls"] == 0 for case in data["cases"])
    # 4 cases x 3 epochs judged, each call unpriced: no figure, the calls counted (integ added 0 for them)
    assert (data["judge_cost_micros"], data["judge_costs"], data["judge_unpriced_calls"]) == (None, {}, 12)
    assert (data["cost_micros"], data["costs"], data["unpriced_calls"]) == (None, {"USD": dollars}, 12)

    console = workbench_cli(project, "eval", "summarizer", env=OFFLINE_ENV)
    assert console.returncode == 0, console.stdout + console.stderr
    assert (f"cost {format_amount(dollars, 'USD')} + 12 unpriced (judges unpriced (12 calls))"
            in console.stdout.replace("\n", " "))


def test_an_unpriced_judge_call_is_counted_never_free():
    """The judges' bill added (`Billed.__add__`, as each judge run ends): an unpriced call leaves no
    one figure and is counted; money of two currencies stays apart."""
    priced = Billed(replayed_calls=1, replayed_cost_micros=700, currency="USD")
    unpriced = Billed(replayed_calls=1, replayed_unpriced_calls=1)
    assert bill_costs(priced + unpriced) == ({"USD": 700}, 1)
    assert one_cost(*bill_costs(priced + unpriced)) == (None, None)  # never 700 as if the other were free
    euros = Billed(replayed_calls=1, currency="EUR", replayed_cost_micros=500)
    assert bill_costs(priced + euros) == ({"USD": 700, "EUR": 500}, 0)
    assert one_cost(*bill_costs(priced + euros)) == (None, None)
    assert one_cost(*bill_costs(priced + priced)) == (1400, "USD")
    assert bill_costs(None) == ({}, 0) and one_cost({}, 0) == (0, None)
    assert (priced + euros).other_currencies == {"EUR": CurrencyPart(replayed_cost_micros=500, replayed_calls=1)}


def test_the_reports_say_unpriced_calls_and_each_currency():
    from workbench.evaluate.report import cost_text

    assert cost_text({"costs": {"USD": 700}, "unpriced_calls": 1}) == f"{format_amount(700, 'USD')} + 1 unpriced"
    assert cost_text({"judge_costs": {}, "judge_unpriced_calls": 2}, "judge_") == "unpriced (2 calls)"
    assert cost_text({"costs": {"USD": 700, "EUR": 5}, "unpriced_calls": 0}, exact=True) == (
        f"{format_exact(700, 'USD')} + {format_exact(5, 'EUR')}")
    assert cost_text({"costs": {}, "unpriced_calls": 0}) == format_amount(0)


def test_a_compare_cell_names_its_currency(tmp_path):
    """`workbench eval compare` with one model priced in euros (its models.toml row): that cell's cost
    per case is in euros, the other's in dollars (every cell said USD before)."""
    project = examples_copy(tmp_path / "p")
    toml = project / "models.toml"
    toml.write_text(toml.read_text().replace('id = "gpt-4o-mini"\n', 'id = "gpt-4o-mini"\ncurrency = "EUR"\n', 1))
    result = workbench_cli(project, "eval", "compare", "classifier", "--versions", "v1", "--models",
                           "claude-haiku-4-5,gpt-4o-mini", "--format", "json", env=OFFLINE_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = {cell["model"]: cell for cell in json.loads(result.stdout)["cells"]}
    euros, dollars = cells["gpt-4o-mini"], cells["claude-haiku-4-5"]
    assert (euros["currency"], dollars["currency"]) == ("EUR", "USD")
    assert euros["costs_per_case"] == {"EUR": euros["cost_per_case_micros"]} and euros["cost_per_case_micros"] > 0
    assert dollars["costs_per_case"] == {"USD": dollars["cost_per_case_micros"]}
    table = workbench_cli(project, "eval", "compare", "classifier", "--versions", "v1", "--models",
                          "claude-haiku-4-5,gpt-4o-mini", env=OFFLINE_ENV)
    assert table.returncode == 0, table.stderr
    assert format_exact(euros["cost_per_case_micros"], "EUR") in table.stdout
    assert format_exact(dollars["cost_per_case_micros"], "USD") in table.stdout


def _extractor_in_euros(root: Path) -> Path:
    """The example extractor with its model (gpt-4o-mini) priced in euros by models.toml; its committed
    baseline was recorded in dollars before baselines named a currency."""
    project = examples_copy(root)
    toml = project / "models.toml"
    toml.write_text(toml.read_text().replace('id = "gpt-4o-mini"\n', 'id = "gpt-4o-mini"\ncurrency = "EUR"\n', 1))
    assert "currency" not in json.loads((project / "evals" / "extractor.baseline.json").read_text())
    return project


def test_the_cost_gate_never_compares_euros_with_a_dollar_baseline(tmp_path):
    """`--max-cost-increase` against a baseline in another currency has no verdict on the cost (exit 2,
    `WB_EVAL_COST_CURRENCY`), never a pass from comparing 2,955 micro-cents with 2,955 micro-euro-cents
    (main passed it: +0.0%); re-recorded, the baseline names its currency and the gate judges again."""
    project = _extractor_in_euros(tmp_path / "p")
    gated = workbench_cli(project, "eval", "extractor", "--max-cost-increase", "0.1", "--json", "out.json",
                          env=OFFLINE_ENV)
    assert gated.returncode == 2, gated.stdout + gated.stderr
    assert "WB_EVAL_COST_CURRENCY" in gated.stderr and "in EUR, the baseline's in USD" in gated.stderr
    assert "--record-baseline" in gated.stderr and "Traceback" not in gated.stderr
    [suite] = json.loads((project / "out.json").read_text())["suites"]
    assert (suite["verdict"], suite["error"]["code"], suite["cost_increase"]) == ("error", "WB_EVAL_COST_CURRENCY", None)
    assert all(case["currency"] == "EUR" for case in suite["cases"])
    # the scores are judged as ever: without the cost flag the gate passes
    assert workbench_cli(project, "eval", "extractor", env=OFFLINE_ENV).returncode == 0

    ingest_spools(project / "wb.duckdb", spool_dir_of(project / "wb.duckdb"))
    with open_store(project / "wb.duckdb", read_only=True) as con:
        verdicts = con.execute("SELECT verdict, error_code FROM eval_runs ORDER BY started_at").fetchall()
        baseline_costs = con.execute("SELECT DISTINCT currency, baseline_cost_micros FROM eval_results").fetchall()
    assert verdicts == [("error", "WB_EVAL_COST_CURRENCY"), ("pass", None)]
    assert baseline_costs == [("EUR", None)]  # the dollar baseline's figure never stored as euros

    recorded = workbench_cli(project, "eval", "extractor", "--record-baseline", env=OFFLINE_ENV)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    baseline = json.loads((project / "evals" / "extractor.baseline.json").read_text())
    assert baseline["currency"] == "EUR" and all(case["cost_micros"] > 0 for case in baseline["cases"].values())
    again = workbench_cli(project, "eval", "extractor", "--max-cost-increase", "0.1", env=OFFLINE_ENV)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_baseline_keeps_each_currency_and_the_gate_compares_like_with_like():
    from workbench.evaluate.baseline import Baseline, CostChange, baseline_costs, cost_change

    assert baseline_costs({"a": ({"EUR": 5}, 0), "b": ({"USD": 0}, 0), "c": ({}, 1)}) == (
        {"a": {"cost_micros": 5}, "b": {"cost_micros": 0}, "c": {"cost_micros": None}}, "EUR")
    # cases priced in two currencies: each case's money kept per currency (main left it out, as None)
    assert baseline_costs({"a": ({"EUR": 5}, 0), "b": ({"USD": 7}, 0)}) == (
        {"a": {"cost_micros": None, "costs": {"EUR": 5}}, "b": {"cost_micros": None, "costs": {"USD": 7}}}, None)
    assert baseline_costs({"a": ({"USD": 0}, 0)}) == ({"a": {"cost_micros": 0}}, None)
    header = {"format": 2, "suite": "s", "prompt": {"id": "p", "version": "v1", "hash": "h"}, "scorers": [],
              "tolerance": 0.05, "epochs": 1, "mean": 1.0}
    old = Baseline.model_validate({**header, "cases": {"a": {"score": 1.0, "cost_micros": 100}}})
    assert old.currency == "USD"  # written before baselines named one: dollars, as every cost was shown then
    assert cost_change({"a": ({"USD": 120}, 0)}, 1, old) == CostChange(changes={"USD": 0.2})
    assert cost_change({"a": ({"EUR": 100}, 0)}, 1, old) == CostChange(
        unlike="the run's cost is in EUR, the baseline's in USD")
    assert cost_change({"a": ({"EUR": 0}, 0)}, 1, old).increase == -1.0  # nothing is nothing in any currency
    # an unpriced call on either side: no verdict, naming the cases
    assert cost_change({"a": ({"USD": 120}, 2)}, 1, old) == CostChange(unpriced=["a"])
    unpriced = Baseline.model_validate({**header, "cases": {"a": {"score": 1.0, "cost_micros": None}}})
    assert cost_change({"a": ({"USD": 120}, 0)}, 1, unpriced) == CostChange(baseline_unpriced=["a"])
    # two currencies: each compared with itself; one the run no longer spends in fell by 100%
    both = Baseline.model_validate({**header, "currency": None, "cases": {
        "a": {"score": 1.0, "costs": {"USD": 100}}, "b": {"score": 1.0, "costs": {"EUR": 50, "USD": 100}}}})
    assert cost_change({"a": ({"USD": 100}, 0), "b": ({"EUR": 60, "USD": 100}, 0)}, 1, both).changes == {
        "USD": 0.0, "EUR": 0.2}
    assert cost_change({"a": ({"USD": 100}, 0), "b": ({"USD": 150}, 0)}, 1, both).changes == {"USD": 0.25, "EUR": -1.0}
    # nothing cost anything, then or now: unchanged; from nothing to some money: rose, with no ratio
    free = Baseline.model_validate({**header, "currency": None, "cases": {"a": {"score": 1.0, "cost_micros": 0}}})
    assert cost_change({"a": ({}, 0)}, 1, free).increase == 0.0
    rose = cost_change({"a": ({"USD": 5}, 0)}, 1, free)
    assert (rose.judged, rose.changes, rose.increase) == (True, {"USD": None}, None)
