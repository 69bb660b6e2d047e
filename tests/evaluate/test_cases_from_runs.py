"""Datasets from traffic: `workbench eval cases-from-runs` turns captured llm() runs of a prompt
(their variables and answers) into JSONL cases that define_eval loads."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import workbench
from workbench.capture import flush
from workbench.cli import app
from workbench.demo.answers import respond
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider
from workbench.errors import WorkbenchError
from workbench.evaluate import define_eval, define_prompt, exact
from workbench.evaluate.gate import evaluate
from workbench.runtime import Gateway, OpenAIProvider, llm
from workbench.store.db import open_store

MODEL = "gpt-traffic"


class Ticket(BaseModel):
    category: Literal["billing", "account", "bug", "other"]


@pytest.fixture
def gateway(store):
    workbench.register_model(id=MODEL, provider="openai", context_window=100_000, max_output=4096,
                             input=100, output=400, source="test", as_of="2026-01-01")
    fake = FakeProvider(responder=respond)
    return Gateway([OpenAIProvider("http://traffic.test/v1", "sk-test", [MODEL], transport=AsyncFakeTransport(fake))],
                   default_model=MODEL)


def cli(*args):
    result = CliRunner().invoke(app, list(args), catch_exceptions=True)
    return result


def test_captured_runs_become_cases_that_a_suite_loads(gateway, store, tmp_path):
    prompt = define_prompt("traffic-classifier", "v3", system="You classify support tickets into a category.",
                           template="<ticket>{{ticket}}</ticket>", output=Ticket, model=MODEL)
    text_prompt = define_prompt("traffic-other", "v1", system="Say hi.", template="{{name}}", model=MODEL)
    tickets = ["I was charged twice", "The app crashes on export", "My password reset never arrives"]
    for ticket in tickets:
        llm(gateway, prompt, {"ticket": ticket}, output=Ticket)
    llm(gateway, text_prompt, {"name": "Ada"})  # another prompt: not exported
    flush()

    out = tmp_path / "traffic.jsonl"
    result = cli("eval", "cases-from-runs", "--prompt", "traffic-classifier", "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert len(lines) == 3
    cases = [json.loads(line) for line in lines]
    with open_store(store, read_only=True) as con:
        runs = con.execute("SELECT run_id, prompt_version, started_at FROM runs WHERE prompt_id = 'traffic-classifier'"
                           " ORDER BY started_at").fetchall()
    assert [case["metadata"]["run_id"] for case in cases] == [row[0] for row in runs]
    assert [case["id"] for case in cases] == [f"run-{row[0][:12]}" for row in runs]
    assert [case["vars"] for case in cases] == [{"ticket": ticket} for ticket in tickets]
    # the answer of the `respond` tool, parsed
    assert [case["expected"] for case in cases] == [{"category": "billing"}, {"category": "bug"}, {"category": "account"}]
    assert {case["metadata"]["prompt_version"] for case in cases} == {"v3"}
    assert all(case["metadata"]["started_at"] for case in cases)

    # the JSONL is an eval set: loaded by define_eval and passing against the same "model"
    suite = define_eval("traffic", prompt, out, [exact("category")], baseline=tmp_path / "traffic.baseline.json",
                        cassette=tmp_path / "traffic.cassette.json",
                        providers=lambda transport: [OpenAIProvider("http://traffic.test/v1", "sk", [MODEL],
                                                                    transport=transport)])
    assert [case.vars for case in suite.cases] == [{"ticket": ticket} for ticket in tickets]
    from workbench.evaluate.runner import Network

    fake = FakeProvider(responder=respond)
    outcome = evaluate(suite, mode="record", record_baseline=True,
                       network=Network(async_=lambda: AsyncFakeTransport(fake)))
    assert outcome.eval_run.mean == 1.0


def test_text_answers_since_and_limit(gateway, store, tmp_path):
    prompt = define_prompt("traffic-summary", "v1", system="You summarize articles in one sentence.",
                           template="<article>{{article}}</article>", model=MODEL)
    articles = [f"Item {n} happened. Then more." for n in range(4)]
    for article in articles:
        llm(gateway, prompt, {"article": article})
    flush()

    result = cli("eval", "cases-from-runs", "--prompt", "traffic-summary", "--limit", "2")
    assert result.exit_code == 0, result.output
    cases = [json.loads(line) for line in result.stdout.splitlines()]
    # the latest two, oldest first; a text answer is the expected text
    assert [case["vars"]["article"] for case in cases] == articles[2:]
    assert [case["expected"] for case in cases] == ["Item 2 happened.", "Item 3 happened."]

    later = cli("eval", "cases-from-runs", "--prompt", "traffic-summary", "--since", "2999-01-01")
    assert isinstance(later.exception, WorkbenchError) and later.exception.code == "WB_RUN_NOT_FOUND"
    today = cli("eval", "cases-from-runs", "--prompt", "traffic-summary", "--since", "2000-01-01")
    assert len(today.stdout.splitlines()) == 4
    bad = cli("eval", "cases-from-runs", "--prompt", "traffic-summary", "--since", "yesterday")
    assert isinstance(bad.exception, WorkbenchError) and bad.exception.code == "WB_CONFIG_INVALID"


def test_an_eval_case_around_an_llm_run_is_written_once(store, tmp_path):
    """Eval traffic (kind eval_case) counts too; the case around a runtime call gives way to its llm run."""
    workbench.register_model(id=MODEL, provider="openai", context_window=100_000, max_output=4096,
                             input=100, output=400, source="test", as_of="2026-01-01")
    prompt = define_prompt("traffic-eval", "v1", system="You classify support tickets.",
                           template="<ticket>{{ticket}}</ticket>", output=Ticket, model=MODEL)
    suite = define_eval("traffic-eval", prompt, [{"id": "a", "vars": {"ticket": "refund me"}},
                                                 {"id": "b", "vars": {"ticket": "it crashes"}}],
                        [exact("category")], baseline=tmp_path / "b.json", cassette=tmp_path / "c.json",
                        providers=lambda transport: [OpenAIProvider("http://traffic.test/v1", "sk", [MODEL],
                                                                    transport=transport)])
    from workbench.evaluate.runner import Network

    fake = FakeProvider(responder=respond)
    evaluate(suite, mode="record", record_baseline=True, network=Network(async_=lambda: AsyncFakeTransport(fake)))
    flush()
    result = cli("eval", "cases-from-runs", "--prompt", "traffic-eval")
    assert result.exit_code == 0, result.output
    cases = sorted((json.loads(line) for line in result.stdout.splitlines()), key=lambda case: case["vars"]["ticket"])
    assert [(case["vars"], case["expected"]) for case in cases] == [
        ({"ticket": "it crashes"}, {"category": "bug"}), ({"ticket": "refund me"}, {"category": "billing"}),
    ]
    with open_store(store, read_only=True) as con:
        kinds = dict(con.execute("SELECT run_id, kind FROM runs WHERE prompt_id = 'traffic-eval'").fetchall())
    assert {kinds[case["metadata"]["run_id"]] for case in cases} == {"llm"}


def test_no_runs_is_an_error_not_an_empty_file(store, tmp_path):
    flush()
    result = cli("eval", "cases-from-runs", "--prompt", "never-seen", "--out", str(tmp_path / "x.jsonl"))
    assert isinstance(result.exception, WorkbenchError) and result.exception.code == "WB_RUN_NOT_FOUND"
    assert not (tmp_path / "x.jsonl").exists()
