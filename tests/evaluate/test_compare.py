"""`workbench eval compare SUITE --versions ... --models ...`: the matrix of prompt versions and
models, replayed where recorded and live only where the user allows it, with per cell the mean and
its spread, the cases that moved against a reference cell, the cost per case and the latency, as a
table, Markdown and JSON; and the same figures from the store, for the dashboard."""

from __future__ import annotations

import json
from dataclasses import replace

from eval_support import OFFLINE_ENV, dedent, workbench_cli
from workbench.demo.answers import respond
from workbench.money import ceil_div
from workbench.store import queries
from workbench.store.db import open_store
from workbench.config import spool_dir_of
from workbench.store.ingest import ingest_spools

MATRIX = ["--versions", "v1,v2", "--models", "claude-haiku-4-5,gpt-4o-mini"]


def compare_json(root, *args, env=OFFLINE_ENV):
    result = workbench_cli(root, "eval", "compare", "classifier", *args, "--format", "json", env=env)
    return result, json.loads(result.stdout) if result.stdout.strip() else None


def test_the_example_matrix_replays_offline_with_every_figure(examples):
    result, data = compare_json(examples, *MATRIX)
    assert result.returncode == 0, result.stderr
    cells = {(cell["version"], cell["model"]): cell for cell in data["cells"]}
    assert list(cells) == [("v1", "claude-haiku-4-5"), ("v1", "gpt-4o-mini"), ("v2", "claude-haiku-4-5"),
                           ("v2", "gpt-4o-mini")]
    assert data["reference"] == "v1 · claude-haiku-4-5" and cells[("v1", "claude-haiku-4-5")]["reference"]
    assert [cell["mean"] for cell in cells.values()] == [1.0, 1.0, 0.9375, 0.9375]
    # v2 files the refund under "account" on both models: the one case that moved, and only that one
    assert [(cell["worse"], cell["better"]) for cell in cells.values()] == [
        ([], []), ([], []), (["refund-double-charge"], []), (["refund-double-charge"], [])]
    for cell in cells.values():
        assert cell["source"] == "replayed" and cell["error"] is None and cell["samples"] == 8
        assert cell["latency_ms"] == {"median": None, "p95": None, "live_samples": 0}  # a replay's time is not the model's
        assert cell["cost_per_case_micros"] == ceil_div(cell["cost_micros"], 8) > 0
    assert cells[("v1", "gpt-4o-mini")]["cost_per_case_micros"] < cells[("v1", "claude-haiku-4-5")]["cost_per_case_micros"]
    refund = next(case for case in data["cases"] if case["case"] == "refund-double-charge")
    assert [cell["output"] for cell in refund["cells"]] == [
        '{"category":"billing"}', '{"category":"billing"}', '{"category":"account"}', '{"category":"account"}']

    # another reference: against v2 on gpt-4o-mini, v1's refund case is better
    _, other = compare_json(examples, *MATRIX, "--reference", "v2:gpt-4o-mini")
    assert [(cell["worse"], cell["better"]) for cell in other["cells"]] == [
        ([], ["refund-double-charge"]), ([], ["refund-double-charge"]), ([], []), ([], [])]
    assert workbench_cli(examples, "eval", "compare", "classifier", *MATRIX, "--reference", "v9",
                         env=OFFLINE_ENV).returncode == 2

    # Markdown for a pull-request comment, and the console table
    markdown = workbench_cli(examples, "eval", "compare", "classifier", *MATRIX, "--format", "markdown", "--out",
                             "matrix.md", env=OFFLINE_ENV)
    assert markdown.returncode == 0, markdown.stderr
    text = (examples / "matrix.md").read_text()
    assert "| version | model | answers | mean ± spread |" in text
    assert "| v2 | gpt-4o-mini | replayed | 0.9375 | −1: refund-double-charge |" in text
    table = workbench_cli(examples, "eval", "compare", "classifier", *MATRIX, env=OFFLINE_ENV)
    assert table.returncode == 0 and "reference v1 · claude-haiku-4-5" in table.stdout
    assert json.loads(compare_json(examples, *MATRIX)[0].stdout) == data  # replayed twice, the same bytes


def test_the_matrix_is_in_the_store_with_the_same_figures(examples):
    result, data = compare_json(examples, *MATRIX, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    ingest_spools(examples / "wb.duckdb", spool_dir_of(examples / "wb.duckdb"))
    with open_store(examples / "wb.duckdb", read_only=True) as con:
        [matrix] = queries.eval_matrices(con, queries.Filters()).to_dicts()
        cells = queries.eval_matrix(con, matrix["matrix_id"]).to_dicts()
        refund = queries.eval_matrix_case(con, matrix["matrix_id"], "refund-double-charge").to_dicts()
        order = queries.eval_matrix_case_ids(con, matrix["matrix_id"])["case_id"].to_list()
        history = queries.eval_history(con, queries.Filters())
    assert (matrix["suite"], matrix["cells"], matrix["versions"], matrix["models"]) == (
        "classifier", 4, ["v1", "v2"], ["claude-haiku-4-5", "gpt-4o-mini"])
    for stored, shown in zip(cells, data["cells"], strict=True):
        assert (stored["prompt_version"], stored["model"], stored["mean_score"]) == (
            shown["version"], shown["model"], shown["mean"])
        assert stored["cost_per_case_micros"] == shown["cost_per_case_micros"]
        assert (stored["worse"], stored["better"], stored["samples"]) == (len(shown["worse"]), 0, 8)
        assert stored["worse_cases"] == (shown["worse"] or None)
    shown_refund = next(case for case in data["cases"] if case["case"] == "refund-double-charge")
    assert [row["output"] for row in refund] == [cell["output"] for cell in shown_refund["cells"]]
    assert order[0] == "refund-double-charge"  # the case that moved comes first
    assert history.is_empty()  # a matrix's cells are not gate runs


SUITE = '''
import os
from typing import Literal
from pydantic import BaseModel
import workbench
from workbench.evaluate import define_eval, define_prompt, exact
from workbench.runtime import OpenAIProvider

for name, price in (("fake-a", 100), ("fake-b", 30), ("fake-c", 10)):
    workbench.register_model(id=name, provider="openai", context_window=100_000, max_output=4096,
                             input=price, output=4 * price, source="test", as_of="2026-01-01")


class Ticket(BaseModel):
    category: Literal["billing", "account", "bug", "other"]


SYSTEM = "You classify support tickets into exactly one category: billing, account, bug or other."
v1 = define_prompt("live-classifier", "v1", system=SYSTEM, template="<ticket>{{ticket}}</ticket>", output=Ticket,
                   model="fake-a")
v2 = define_prompt("live-classifier", "v2", system=SYSTEM + " Refunds are account issues.",
                   template="<ticket>{{ticket}}</ticket>", output=Ticket, model="fake-a")
define_eval("classifier", v1, [
    {"id": "refund", "vars": {"ticket": "Please refund my payment"}, "expected": {"category": "billing"}},
    {"id": "crash", "vars": {"ticket": "The app crashes"}, "expected": {"category": "bug"}},
    {"id": "login", "vars": {"ticket": "I cannot log in"}, "expected": {"category": "account"}},
], [exact("category")], providers=lambda transport: [
    OpenAIProvider(os.environ["FAKE_URL"] + "/v1", "sk-test", ["fake-*"], transport=transport)])
'''


def test_live_only_where_the_user_allows_it(tmp_path, fake_url, fake_provider):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "classifier.py").write_text(dedent(SUITE))
    fake_provider.responder = lambda request: replace(respond(request), delay_s=0.02)
    env = {"FAKE_URL": fake_url}
    matrix = ["--versions", "v1,v2", "--models", "fake-a,fake-b"]

    # replay (the default): nothing is recorded, so no cell runs, and no call reaches the provider
    result, data = compare_json(tmp_path, *matrix, env=env)
    assert result.returncode == 2 and "WB_REPLAY_MISS" in result.stderr and "cell v1 · fake-a not run" in result.stderr
    assert [cell["error"]["code"] for cell in data["cells"]] == ["WB_REPLAY_MISS"] * 4
    assert fake_provider.requests == []

    # --mode record: live calls for what is not recorded, and recorded
    result, live = compare_json(tmp_path, *matrix, "--mode", "record", env=env)
    assert result.returncode == 0, result.stderr
    assert len(fake_provider.requests) == 12  # 4 cells x 3 cases
    for cell in live["cells"]:
        latency = cell["latency_ms"]
        assert cell["source"] == "live" and latency["live_samples"] == 3
        assert 20 <= latency["median"] <= latency["p95"]  # the provider took at least its 20 ms
    assert [cell["worse"] for cell in live["cells"]] == [[], [], ["refund"], ["refund"]]
    assert live["cells"][1]["cost_per_case_micros"] < live["cells"][0]["cost_per_case_micros"]  # fake-b is cheaper

    # replayed from then on: the same scores, no call, no latency figure
    result, replayed = compare_json(tmp_path, *matrix, env=env)
    assert result.returncode == 0 and len(fake_provider.requests) == 12
    assert [cell["mean"] for cell in replayed["cells"]] == [cell["mean"] for cell in live["cells"]]
    assert all(cell["source"] == "replayed" and cell["latency_ms"]["median"] is None for cell in replayed["cells"])

    # a new model: only its cells go live, and only when allowed
    wider = ["--versions", "v1,v2", "--models", "fake-a,fake-b,fake-c"]
    result, partial = compare_json(tmp_path, *wider, env=env)
    assert result.returncode == 2 and [cell["error"] is None for cell in partial["cells"]] == [
        True, True, False, True, True, False]
    assert len(fake_provider.requests) == 12
    result, _ = compare_json(tmp_path, *wider, "--mode", "record", env=env)
    assert result.returncode == 0 and len(fake_provider.requests) == 12 + 6
    assert [cell["source"] for cell in _["cells"]] == ["replayed", "replayed", "live", "replayed", "replayed", "live"]


def test_epochs_in_a_matrix_give_each_cell_a_spread(examples):
    result = workbench_cli(examples, "eval", "compare", "summarizer", "--format", "json", env=OFFLINE_ENV)
    assert result.returncode == 0, result.stderr
    [cell] = json.loads(result.stdout)["cells"]
    assert (cell["samples"], cell["mean"], cell["spread"]) == (12, 0.975, 0.025)  # 4 cases x 3 epochs
    assert json.loads(result.stdout)["cases"][0]["cells"][0]["samples"] == [1.0, 0.95, 0.975]
