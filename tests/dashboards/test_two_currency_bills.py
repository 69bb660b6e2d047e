"""A run whose calls were priced in two currencies (genai-prices' dollars beside a models.toml row in
euros), driven through the real runtime against the local fake provider: its bill keeps each
currency's money apart, exactly, in `Billed`, the runs table, `workbench runs list` / `runs show` /
`report failures` and the dashboard's pages; a cost budget never counts a call of another currency."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import workbench
from fixtures.dashboard_app import render
from workbench.capture import billed_of, configure, flush
from workbench.capture.runs import Billed, CurrencyPart
from workbench.cli import app
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider
from workbench.errors import WorkbenchError
from workbench.models import load_registry
from workbench.money import format_amount, format_bill
from workbench.runtime import AnthropicProvider, Gateway, OpenAIProvider, llm
from workbench.runtime.budget import Budget, budget_scope
from workbench.store.db import open_store

DOLLARS = "claude-haiku-4-5"  # priced by the price library shipped with the package, in USD
EUROS = "gpt-eur-negotiated"  # priced by the project's models.toml, in EUR
MODELS_TOML = f"""
[[model]]
id = "{EUROS}"
provider = "openai"
currency = "EUR"
input = 250
output = 1000
context_window = 128000
max_output = 4096
source = "negotiated price"
as_of = 2026-01-01
"""


def _gateway(tmp: Path, fake: FakeProvider) -> Gateway:
    configure(db=tmp / "workbench.duckdb")
    (tmp / "models.toml").write_text(MODELS_TOML)
    load_registry(tmp / "models.toml")
    return Gateway([AnthropicProvider("http://anthropic.test", "sk-ant-test", [DOLLARS], transport=AsyncFakeTransport(fake)),
                    OpenAIProvider("http://openai.test/v1", "sk-test", [EUROS], transport=AsyncFakeTransport(fake))],
                   default_model=DOLLARS)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A failed run with one call priced in dollars and one in euros; its bill, calls and store."""
    tmp = tmp_path_factory.mktemp("two_currencies")
    fake = FakeProvider().script("Hello", "Bonjour")
    gateway = _gateway(tmp, fake)
    with pytest.raises(RuntimeError) as caught:
        with workbench.run("mixed", team="audit") as run:
            llm(gateway, "Say hello", model=DOLLARS)
            llm(gateway, "Dis bonjour", model=EUROS)
            raise RuntimeError("the app failed after both calls")
    flush()
    with open_store(tmp / "workbench.duckdb", read_only=True) as con:
        cursor = con.execute("SELECT * FROM calls WHERE list_contains($ids, run_id) ORDER BY started_at",
                             {"ids": [row[0] for row in con.execute(
                                 "SELECT run_id FROM runs WHERE parent_run_id = ?", [run.run_id]).fetchall()]})
        names = [column[0] for column in cursor.description]
        calls = [dict(zip(names, row)) for row in cursor.fetchall()]
        cursor = con.execute("SELECT * FROM runs WHERE run_id = ?", [run.run_id])
        row = dict(zip([column[0] for column in cursor.description], cursor.fetchone()))
    [dollars] = [call for call in calls if call["currency"] == "USD"]
    [euros] = [call for call in calls if call["currency"] == "EUR"]
    return {"db": tmp / "workbench.duckdb", "billed": billed_of(caught.value), "row": row, "run_id": run.run_id,
            "usd": dollars["cost_micros"], "eur": euros["cost_micros"]}


def _both(mixed: dict) -> str:
    return f"{format_amount(mixed['usd'], 'USD')} + {format_amount(mixed['eur'], 'EUR')}"


def test_the_bill_keeps_each_currency_apart_exactly(mixed):
    billed = mixed["billed"]
    assert mixed["usd"] > 0 and mixed["eur"] > 0
    assert (billed.currency, billed.cost_micros, billed.calls) == ("USD", mixed["usd"], 2)
    assert billed.other_currencies == {"EUR": CurrencyPart(cost_micros=mixed["eur"], calls=1)}
    assert billed.full_cost_micros is None  # no one figure is the sum of dollars and euros
    text = str(billed)
    assert f"{_both(mixed)} exact" in text
    assert f"bill {format_bill(mixed['usd'], 'USD')} + {format_bill(mixed['eur'], 'EUR')}" in text


def test_the_runs_table_stores_both_amounts(mixed):
    row = mixed["row"]
    assert (row["billed_currency"], row["billed_cost_micros"], row["billed_calls"]) == ("USD", mixed["usd"], 2)
    assert json.loads(row["billed_other_currencies"]) == {
        "EUR": {"cost_micros": mixed["eur"], "calls": 1, "replayed_cost_micros": 0, "replayed_calls": 0}}
    assert Billed.of_row(row) == mixed["billed"]


def workbench_cli(db: Path, *args: str):
    result = CliRunner().invoke(app, [*args, "--db", str(db)], catch_exceptions=True)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_cli_shows_both_amounts(mixed):
    rows = json.loads(workbench_cli(mixed["db"], "runs", "list", "--format", "json"))
    mine = [(row["currency"], row["cost_micros"], row["calls"]) for row in rows if row["run_id"] == mixed["run_id"]]
    assert mine == [("USD", mixed["usd"], 1), ("EUR", mixed["eur"], 1)]  # a row per currency, never one sum
    table = workbench_cli(mixed["db"], "runs", "list")
    assert format_amount(mixed["usd"], "USD") in table and format_amount(mixed["eur"], "EUR") in table
    assert str(mixed["billed"]) in workbench_cli(mixed["db"], "runs", "show", mixed["run_id"]).replace("\n", " ")
    failures = json.loads(workbench_cli(mixed["db"], "report", "failures", "--format", "json"))
    assert sorted((row["currency"], row["cost_micros"], row["runs"]) for row in failures) == [
        ("EUR", mixed["eur"], 0), ("USD", mixed["usd"], 1)]  # the run counted once, on its main currency's row


def test_the_dashboard_shows_both_amounts(mixed, monkeypatch):
    at = render(mixed["db"], monkeypatch, "failures.py")
    shown = {metric.label: metric.value for metric in at.metric}
    assert shown["Billed to failed runs"] == _both(mixed)
    assert shown["Share of spend"] == "100.0% of USD · 100.0% of EUR"
    assert shown["Failed runs"] == "1" and shown["Calls answered"] == "2"
    at = render(mixed["db"], monkeypatch, "run_explorer.py", run_id=mixed["run_id"])
    assert {metric.label: metric.value for metric in at.metric}["Billed"] == _both(mixed)
    tree = at.dataframe[-1].value
    assert list(tree["billed"])[0] == _both(mixed)  # the run's row; its two llm runs a currency each
    assert sorted(list(tree["billed"])[1:]) == sorted([format_amount(mixed["usd"], "USD"),
                                                       format_amount(mixed["eur"], "EUR")])
    at = render(mixed["db"], monkeypatch)
    top = next(frame.value for frame in at.dataframe if "run" in frame.value.columns and "status" in frame.value.columns)
    assert sorted(top["cost"]) == sorted([format_amount(mixed["usd"], "USD"), format_amount(mixed["eur"], "EUR")])


def test_a_cost_budget_refuses_a_call_priced_in_another_currency(tmp_path):
    fake = FakeProvider().script("Hello", "Bonjour")
    gateway = _gateway(tmp_path, fake)
    with budget_scope(Budget(cost_per_run_micros=10**9), "capped"):
        llm(gateway, "Say hello", model=DOLLARS)  # the first call counted names the budget's currency
        with pytest.raises(WorkbenchError) as caught:
            llm(gateway, "Dis bonjour", model=EUROS)
    assert caught.value.code == "WB_BUDGET_CURRENCY" and "priced in EUR" in caught.value.cause
    assert len(fake.requests) == 1  # refused before it was sent
    with budget_scope(Budget(cost_per_run_micros=10**9, currency="EUR"), "in euros"):
        assert llm(gateway, "Dis bonjour", model=EUROS) == "Bonjour"
