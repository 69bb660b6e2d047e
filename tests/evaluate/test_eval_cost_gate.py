"""The cost gate (`workbench eval SUITE --max-cost-increase X`) never passes, and never fails as a
regression, without a verdict on the cost: an unpriced call (in the run, or in the baseline when it
was recorded) is no verdict (exit 2, `WB_EVAL_COST_UNPRICED`, naming the cases, calls and models);
a suite priced in two currencies is compared like with like, per currency. Through the CLI, as CI
runs it: exit code and message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval_support import OFFLINE_ENV, examples_copy, workbench_cli
from workbench.errors import WorkbenchError
from workbench.evaluate.baseline import read_baseline

EURO_MODEL = "gpt-4o-mini-eur"  # what two of the extractor's five answers say served them, priced in EUR
EURO_ROW = f"""
[[model]]
id = "{EURO_MODEL}"
provider = "openai"
currency = "EUR"
context_window = 128000
max_output = 16384
scale = 3
input = 150
cache_read = 75
output = 600
source = "a test's negotiated price"
as_of = 2026-01-01
"""
UNPRICED = "gpt-unpriced"
UNPRICED_TARGET = f"""

def unpriced_target(variables, context):
    \"\"\"The prompt on a model the app routes by a registry of its own: nothing the project knows prices it.\"\"\"
    from datetime import date

    from workbench.models import ModelRegistry, ModelSpec
    from workbench.runtime import Gateway, OpenAIProvider, llm

    registry = ModelRegistry(library=False)
    registry.register(ModelSpec(id="{UNPRICED}", provider="openai", input=100, output=500, context_window=128000,
                                max_output=16384, source="the app's", as_of=date(2026, 1, 1)))
    provider = OpenAIProvider(models=["gpt-*"], transport=context.transport)
    return llm(Gateway([provider], registry=registry), context.prompt, variables, output=context.prompt.output_type,
               model="{UNPRICED}", prompt_cache="auto")


suite = define_eval("""


def _gate(project: Path, *extra: str):
    return workbench_cli(project, "eval", "extractor", "--max-cost-increase", "0.1", *extra, env=OFFLINE_ENV)


def _baseline(project: Path) -> dict:
    return json.loads((project / "evals" / "extractor.baseline.json").read_text())


def _unpriced_run(root: Path) -> Path:
    """The example extractor answered by a model nothing prices (its cassette's requests name it)."""
    project = examples_copy(root)
    cassette = project / "cassettes" / "extractor.json"
    cassette.write_text(cassette.read_text().replace("gpt-4o-mini", UNPRICED))
    suite = project / "evals" / "extractor.py"
    suite.write_text(suite.read_text().replace("\nsuite = define_eval(", UNPRICED_TARGET)
                     .replace("exact(\"vendor\")],\n)", "exact(\"vendor\")],\n    target=unpriced_target,\n)"))
    assert "target=unpriced_target" in suite.read_text()
    return project


def test_an_unpriced_call_in_the_run_is_no_verdict_on_the_cost(tmp_path):
    """main: `WB_EVAL_COST` "not comparable (a call was unpriced)", exit 1, as if the cost had risen."""
    project = _unpriced_run(tmp_path / "p")
    assert workbench_cli(project, "eval", "extractor", env=OFFLINE_ENV).returncode == 0  # the scores judge as ever
    gated = _gate(project, "--json", "out.json")
    assert gated.returncode == 2, gated.stdout + gated.stderr
    assert "WB_EVAL_COST_UNPRICED" in gated.stderr and "Traceback" not in gated.stderr
    message = " ".join(gated.stderr.split())
    assert "5 calls in cases acme, globex, hooli, initech, umbrella had no price" in message
    assert f"(models {UNPRICED})" in message and f"price {UNPRICED} in models.toml" in message
    [suite] = json.loads((project / "out.json").read_text())["suites"]
    assert (suite["verdict"], suite["error"]["code"], suite["cost_increase"]) == ("error", "WB_EVAL_COST_UNPRICED", None)


def test_an_unpriced_baseline_is_no_verdict_on_the_cost(tmp_path):
    """A baseline that keeps no cost for a case (a call was unpriced when it was recorded) cannot be
    compared with: exit 2, naming the case and the baseline, never exit 1."""
    project = examples_copy(tmp_path / "p")
    assert _gate(project).returncode == 0
    path = project / "evals" / "extractor.baseline.json"
    path.write_text(path.read_text().replace('"hooli": {"cost_micros": 2820,', '"hooli": {"cost_micros": null,'))
    gated = _gate(project)
    assert gated.returncode == 2, gated.stdout + gated.stderr
    message = " ".join(gated.stderr.split())
    assert "WB_EVAL_COST_UNPRICED" in message and "extractor.baseline.json" in message
    assert "keeps no cost for cases hooli" in message and "--record-baseline" in message
    # recorded from a priced run, the baseline judges again
    assert workbench_cli(project, "eval", "extractor", "--record-baseline", env=OFFLINE_ENV).returncode == 0
    assert _gate(project).returncode == 0


def test_a_baseline_from_an_unpriced_run_keeps_no_figure_never_zero(tmp_path):
    project = _unpriced_run(tmp_path / "p")
    recorded = workbench_cli(project, "eval", "extractor", "--record-baseline", env=OFFLINE_ENV)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    baseline = _baseline(project)
    assert all(case["cost_micros"] is None for case in baseline["cases"].values())
    assert baseline["cost_micros"] is None


def _two_currencies(root: Path) -> Path:
    """The example extractor with two of its five cases served (the cassette says) by a model priced in EUR."""
    project = examples_copy(root)
    cassette = project / "cassettes" / "extractor.json"
    data = json.loads(cassette.read_text())
    for interaction in data["interactions"][:2]:
        body = interaction["response"]["body"]
        body["string"] = body["string"].replace('"model": "gpt-4o-mini"', f'"model": "{EURO_MODEL}"', 1)
    cassette.write_text(json.dumps(data))
    (project / "models.toml").write_text((project / "models.toml").read_text() + EURO_ROW)
    return project


def test_a_suite_in_two_currencies_is_gated_per_currency(tmp_path):
    """main kept a two-currency baseline's costs as null (currency null), and the gate then failed it
    as a regression, "not comparable (a call was unpriced)", with every call priced."""
    project = _two_currencies(tmp_path / "p")
    recorded = workbench_cli(project, "eval", "extractor", "--record-baseline", env=OFFLINE_ENV)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    baseline = _baseline(project)
    assert baseline["currency"] is None
    costs = {case_id: case["costs"] for case_id, case in baseline["cases"].items()}
    assert sorted(currency for money in costs.values() for currency in money) == ["EUR", "EUR", "USD", "USD", "USD"]
    assert all(micros > 0 for money in costs.values() for micros in money.values())

    gated = _gate(project, "--json", "out.json")
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert json.loads((project / "out.json").read_text())["suites"][0]["cost_increase"] == 0.0

    # the euro price doubles: the euro cost per case rose by 100%, the dollar one did not move
    toml = project / "models.toml"
    toml.write_text(toml.read_text().replace(EURO_ROW, EURO_ROW.replace("input = 150", "input = 300")
                                             .replace("output = 600", "output = 1200")))
    risen = _gate(project)
    assert risen.returncode == 1, risen.stdout + risen.stderr
    message = " ".join(risen.stderr.split())
    assert "WB_EVAL_COST" in message and "+0.0% in USD" in message and "+100.0% in EUR" in message


def test_a_baseline_in_one_currency_against_a_run_in_two_is_no_verdict(tmp_path):
    """The committed baseline is in dollars; a run whose cases now also spend euros has money the
    baseline has none in, and no rate converts it: exit 2, never a pass on the dollars alone."""
    project = _two_currencies(tmp_path / "p")
    gated = _gate(project)
    assert gated.returncode == 2, gated.stdout + gated.stderr
    message = " ".join(gated.stderr.split())
    assert "WB_EVAL_COST_CURRENCY" in message and "the run's cost is in EUR and USD, the baseline's in USD" in message


@pytest.mark.parametrize("currency,costs,message", [
    (None, {"EUR": -5, "USD": 3}, "greater than or equal to 0"),  # money is never negative
    ("USD", {"EUR": 5, "USD": 3}, "costs per currency, but the baseline's are all in USD"),  # two answers to one question
    (None, "lots", "valid dictionary"),
])
def test_a_baseline_whose_costs_per_currency_do_not_hold_is_invalid(tmp_path, currency, costs, message):
    path = tmp_path / "x.baseline.json"
    path.write_text(json.dumps({"format": 2, "suite": "x", "prompt": {"id": "p", "version": "v1", "hash": "h"},
                                "scorers": ["exact"], "tolerance": 0.05, "epochs": 1, "mean": 1.0, "currency": currency,
                                "cases": {"a": {"score": 1.0, "costs": costs}}}))
    with pytest.raises(WorkbenchError) as caught:
        read_baseline(path, "x")
    assert caught.value.code == "WB_EVAL_BASELINE_INVALID" and message in caught.value.cause
