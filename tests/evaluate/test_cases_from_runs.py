"""Datasets from traffic: `workbench eval cases-from-runs` turns captured production llm() runs of a
prompt (their variables and answers) into JSONL cases that define_eval loads: live runs only, outside
evals and judges, one case per distinct input, and an input answered two ways reported, not written."""

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
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, Reply
from workbench.errors import WorkbenchError
from workbench.evaluate import define_eval, define_prompt, exact, llm_judge
from workbench.evaluate.gate import evaluate
from workbench.evaluate.runner import Network
from workbench.replay.clients import AsyncReplayTransport
from workbench.replay.session import Cassette
from workbench.runtime import Gateway, OpenAIProvider, llm
from workbench.store.db import open_store

MODEL = "gpt-traffic"
BASE = "http://traffic.test/v1"


class Ticket(BaseModel):
    category: Literal["billing", "account", "bug", "other"]


@pytest.fixture
def registered(store):
    workbench.register_model(id=MODEL, provider="openai", context_window=100_000, max_output=4096,
                             input=100, output=400, source="test", as_of="2026-01-01")


def gateway_on(transport) -> Gateway:
    return Gateway([OpenAIProvider(BASE, "sk-test", [MODEL], transport=transport)], default_model=MODEL)


@pytest.fixture
def gateway(registered):
    return gateway_on(AsyncFakeTransport(FakeProvider(responder=respond)))


def cli(*args):
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def classifier(version: str = "v3", prompt_id: str = "traffic-classifier"):
    return define_prompt(prompt_id, version, system="You classify support tickets into a category.",
                         template="<ticket>{{ticket}}</ticket>", output=Ticket, model=MODEL)


def test_captured_runs_become_one_case_per_input_that_a_suite_loads(gateway, store, tmp_path):
    prompt = classifier()
    text_prompt = define_prompt("traffic-other", "v1", system="Say hi.", template="{{name}}", model=MODEL)
    tickets = ["I was charged twice", "The app crashes on export", "I was charged twice",
               "My password reset never arrives", "I was charged twice"]
    for ticket in tickets:
        llm(gateway, prompt, {"ticket": ticket}, output=Ticket)
    llm(gateway, text_prompt, {"name": "Ada"})  # another prompt: not exported
    flush()

    out = tmp_path / "traffic.jsonl"
    result = cli("eval", "cases-from-runs", "--prompt", "traffic-classifier", "--out", str(out))
    assert result.exit_code == 0, result.output
    cases = lines(out.read_text())
    # identical inputs are one case, in the order first seen; the answer of the `respond` tool, parsed
    assert [case["vars"] for case in cases] == [{"ticket": ticket} for ticket in
                                                ["I was charged twice", "The app crashes on export",
                                                 "My password reset never arrives"]]
    assert [case["expected"] for case in cases] == [{"category": "billing"}, {"category": "bug"}, {"category": "account"}]
    with open_store(store, read_only=True) as con:
        runs = [row[0] for row in con.execute(
            "SELECT r.run_id FROM runs r JOIN run_tags t USING (run_id) WHERE r.prompt_id = 'traffic-classifier' "
            "AND t.key = 'vars' AND t.value LIKE '%charged twice%' ORDER BY r.started_at").fetchall()]
    assert cases[0]["metadata"]["runs"] == 3 and cases[0]["metadata"]["run_ids"] == runs
    assert [case["metadata"]["runs"] for case in cases] == [3, 1, 1]
    assert all(case["metadata"]["prompt_versions"] == ["v3"] and case["metadata"]["first_seen"] for case in cases)
    assert len({case["id"] for case in cases}) == 3 and all(case["id"].startswith("input-") for case in cases)
    assert "5 runs of prompt traffic-classifier: 3 cases" in " ".join(result.stderr.split())
    # the same traffic gives the same ids: a baseline recorded on the file survives a re-export
    again = cli("eval", "cases-from-runs", "--prompt", "traffic-classifier")
    assert [case["id"] for case in lines(again.stdout)] == [case["id"] for case in cases]

    # the JSONL is an eval set: loaded by define_eval and passing against the same "model"
    suite = define_eval("traffic", prompt, out, [exact("category")], baseline=tmp_path / "traffic.baseline.json",
                        cassette=tmp_path / "traffic.cassette.json",
                        providers=lambda transport: [OpenAIProvider(BASE, "sk", [MODEL], transport=transport)])
    assert len(suite.cases) == 3
    fake = FakeProvider(responder=respond)
    outcome = evaluate(suite, mode="record", record_baseline=True,
                       network=Network(async_=lambda: AsyncFakeTransport(fake)))
    assert outcome.eval_run.mean == 1.0


def test_an_input_answered_two_ways_is_reported_and_not_written(registered, store, tmp_path):
    answer = ["billing"]
    fake = FakeProvider(responder=lambda request: Reply(tool_calls=[("respond", {"category": answer[0]})]))
    gateway = gateway_on(AsyncFakeTransport(fake))
    prompt = classifier(prompt_id="traffic-conflict")
    for ticket, category in (("Refund me", "billing"), ("Refund me", "account"), ("Refund me", "billing"),
                             ("It crashes", "bug")):
        answer[0] = category
        llm(gateway, prompt, {"ticket": ticket}, output=Ticket)
    flush()

    out, review = tmp_path / "cases.jsonl", tmp_path / "conflicts.jsonl"
    result = cli("eval", "cases-from-runs", "--prompt", "traffic-conflict", "--out", str(out), "--conflicts", str(review))
    assert result.exit_code == 0, result.output
    assert [(case["vars"], case["expected"]) for case in lines(out.read_text())] == [
        ({"ticket": "It crashes"}, {"category": "bug"})]  # the conflicting input is not silently written
    said = " ".join(result.stderr.split())  # as wrapped by the console
    assert "conflict" in said and "Refund me" in said and "answered 2 ways" in said
    assert "1 inputs with conflicting answers left out" in said
    [conflict] = lines(review.read_text())
    assert conflict["vars"] == {"ticket": "Refund me"}
    assert [(answer["expected"], answer["runs"]) for answer in conflict["answers"]] == [
        ({"category": "billing"}, 2), ({"category": "account"}, 1)]


def test_only_live_production_runs_by_default(registered, store, tmp_path):
    """Eval cases, judges and anything inside them, and answers replayed from a cassette, are not
    production traffic: they are left out unless asked for."""
    prompt = classifier(prompt_id="traffic-mixed")
    judge_prompt = define_prompt("traffic-judge", "v1", system="You grade summaries: reply with JSON {\"score\": 0..1}.",
                                 template="<article>{{input}}</article>\n<summary>{{output}}</summary>", model=MODEL)
    fake = FakeProvider(responder=respond)
    live = gateway_on(AsyncFakeTransport(fake))
    llm(live, prompt, {"ticket": "I was charged twice"}, output=Ticket)  # production, live

    cassette_path = tmp_path / "app.json"
    recording = gateway_on(AsyncReplayTransport(Cassette(cassette_path, "record"), AsyncFakeTransport(fake)))
    llm(recording, prompt, {"ticket": "The app crashes"}, output=Ticket)  # live, and recorded
    replaying = gateway_on(AsyncReplayTransport(Cassette(cassette_path, "replay")))
    llm(replaying, prompt, {"ticket": "The app crashes"}, output=Ticket)  # the same, replayed

    suite = define_eval("traffic-mixed", prompt, [{"id": "a", "vars": {"ticket": "refund me"}},
                                                  {"id": "b", "vars": {"ticket": "it crashes"}}],
                        [exact("category"), llm_judge(judge_prompt)], baseline=tmp_path / "b.json",
                        cassette=tmp_path / "c.json", judge=MODEL,
                        providers=lambda transport: [OpenAIProvider(BASE, "sk", [MODEL], transport=transport)])
    evaluate(suite, mode="record", record_baseline=True, network=Network(async_=lambda: AsyncFakeTransport(fake)))
    flush()

    default = cli("eval", "cases-from-runs", "--prompt", "traffic-mixed")
    assert default.exit_code == 0, default.output
    assert [case["vars"] for case in lines(default.stdout)] == [{"ticket": "I was charged twice"},
                                                                {"ticket": "The app crashes"}]
    assert lines(default.stdout)[1]["metadata"]["runs"] == 1  # its replay is not a second sighting
    replayed = cli("eval", "cases-from-runs", "--prompt", "traffic-mixed", "--include-replayed")
    assert lines(replayed.stdout)[1]["metadata"]["runs"] == 2
    with_evals = cli("eval", "cases-from-runs", "--prompt", "traffic-mixed", "--include-evals")
    tickets = {case["vars"]["ticket"] for case in lines(with_evals.stdout)}
    assert tickets == {"I was charged twice", "The app crashes", "refund me", "it crashes"}
    # an eval case around its llm() run is written once, from the inner llm run
    with open_store(store, read_only=True) as con:
        kinds = dict(con.execute("SELECT run_id, kind FROM runs WHERE prompt_id = 'traffic-mixed'").fetchall())
    eval_cases = [case for case in lines(with_evals.stdout) if case["vars"]["ticket"] in ("refund me", "it crashes")]
    assert [case["metadata"]["runs"] for case in eval_cases] == [1, 1]
    assert {kinds[case["metadata"]["run_ids"][0]] for case in eval_cases} == {"llm"}
    # the judge's own calls are judge traffic: no production run of its prompt
    judged = cli("eval", "cases-from-runs", "--prompt", "traffic-judge")
    assert isinstance(judged.exception, WorkbenchError) and judged.exception.code == "WB_RUN_NOT_FOUND"
    assert "--include-evals" in judged.exception.fix
    assert len(lines(cli("eval", "cases-from-runs", "--prompt", "traffic-judge", "--include-evals").stdout)) == 2


def test_text_answers_since_and_limit(gateway, store, tmp_path):
    prompt = define_prompt("traffic-summary", "v1", system="You summarize articles in one sentence.",
                           template="<article>{{article}}</article>", model=MODEL)
    articles = [f"Item {n} happened. Then more." for n in range(4)]
    for article in articles:
        llm(gateway, prompt, {"article": article})
    flush()

    result = cli("eval", "cases-from-runs", "--prompt", "traffic-summary", "--limit", "2")
    assert result.exit_code == 0, result.output
    cases = lines(result.stdout)
    # the latest two, oldest first; a text answer is the expected text
    assert [case["vars"]["article"] for case in cases] == articles[2:]
    assert [case["expected"] for case in cases] == ["Item 2 happened.", "Item 3 happened."]

    later = cli("eval", "cases-from-runs", "--prompt", "traffic-summary", "--since", "2999-01-01")
    assert isinstance(later.exception, WorkbenchError) and later.exception.code == "WB_RUN_NOT_FOUND"
    today = cli("eval", "cases-from-runs", "--prompt", "traffic-summary", "--since", "2000-01-01")
    assert len(lines(today.stdout)) == 4
    bad = cli("eval", "cases-from-runs", "--prompt", "traffic-summary", "--since", "yesterday")
    assert isinstance(bad.exception, WorkbenchError) and bad.exception.code == "WB_CONFIG_INVALID"


def test_no_runs_is_an_error_not_an_empty_file(store, tmp_path):
    flush()
    result = cli("eval", "cases-from-runs", "--prompt", "never-seen", "--out", str(tmp_path / "x.jsonl"))
    assert isinstance(result.exception, WorkbenchError) and result.exception.code == "WB_RUN_NOT_FOUND"
    assert not (tmp_path / "x.jsonl").exists()
