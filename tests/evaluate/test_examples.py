"""The example suites of `evals/`, from a fresh copy of what a clone has: they replay offline and
deterministically, record everything the store promises, bill judges apart, replay other prompt
versions, and fail closed on a prompt the cassette never saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from eval_support import OFFLINE_ENV, no_network, workbench_cli
from workbench.capture import flush
from workbench.evaluate.gate import evaluate
from workbench.evaluate.report import to_json, to_junit, to_markdown
from workbench.evaluate.suite import load_suites
from workbench.config import spool_dir_of
from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools


def rows(db, sql, *params) -> list[dict]:
    with open_store(db, read_only=True) as con:
        cursor = con.execute(sql, list(params))
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def test_the_examples_pass_offline_twice_with_byte_identical_reports(examples):
    before = {path: path.read_bytes() for folder in ("evals", "cassettes") for path in (examples / folder).iterdir()}
    reports = []
    for attempt in range(2):
        out = examples / f"out{attempt}"
        result = workbench_cli(examples, "eval", "--junit", str(out / "j.xml"), "--markdown", str(out / "m.md"),
                               "--json", str(out / "r.json"), env=OFFLINE_ENV)
        assert result.returncode == 0, result.stdout + result.stderr
        reports.append([(out / name).read_bytes() for name in ("j.xml", "m.md", "r.json")])
    assert reports[0] == reports[1]
    data = json.loads(reports[0][2])
    assert [(suite["suite"], suite["verdict"], suite["mode"]) for suite in data["suites"]] == [
        ("classifier", "pass", "replay"), ("extractor", "pass", "replay"), ("summarizer", "pass", "replay"),
    ]
    assert [len(suite["cases"]) for suite in data["suites"]] == [8, 5, 4]
    # replay wrote no cassette and no baseline
    after = {path: path.read_bytes() for folder in ("evals", "cassettes") for path in (examples / folder).iterdir()
             if path.is_file() and "__pycache__" not in str(path)}
    assert {path: data for path, data in before.items() if path.is_file()} == after


def test_results_in_the_store_and_judges_billed_apart(examples, store):
    """In-process, every network transport refusing: each suite's eval run and case results carry
    the prompt, model, mode, commit and cost; a judge's calls are in runs of kind `judge`, not in a
    case's cost."""
    subprocess.run(["git", "init", "-q", str(examples)], check=True)
    subprocess.run(["git", "-C", str(examples), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    commit = subprocess.run(["git", "-C", str(examples), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    suites = load_suites([examples / "evals"])
    outcomes = {name: evaluate(suite, network=no_network()) for name, suite in sorted(suites.items())}
    assert {name: outcome.exit_code for name, outcome in outcomes.items()} == {
        "classifier": 0, "extractor": 0, "summarizer": 0}
    flush()

    for name, outcome in outcomes.items():
        prompt = outcome.eval_run.prompt
        [eval_run] = rows(store, "SELECT * FROM eval_runs WHERE eval_run_id = ?", outcome.eval_run.eval_run_id)
        assert (eval_run["suite"], eval_run["prompt_id"], eval_run["prompt_version"], eval_run["prompt_hash"]) == (
            name, prompt.id, prompt.version, prompt.hash)
        assert (eval_run["model"], eval_run["mode"], eval_run["verdict"]) == (prompt.model, "replay", "pass")
        assert eval_run["git_commit"] == commit  # the suite's repository, not the working directory's
        assert eval_run["cases"] == len(suites[name].cases) and eval_run["failed_cases"] == 0
        results = rows(store, "SELECT * FROM eval_results WHERE eval_run_id = ? ORDER BY case_id",
                       outcome.eval_run.eval_run_id)
        assert len(results) == len(suites[name].cases)
        baseline = json.loads(suites[name].baseline_path.read_text())
        epochs = suites[name].epochs
        for result in results:
            # a case's cost is its samples' runs' bills: what every call of the case cost or, replayed,
            # would have cost (the bill paid nothing: every call was replayed)
            samples = rows(store, "SELECT * FROM eval_samples WHERE eval_run_id = ? AND case_id = ? ORDER BY epoch",
                           outcome.eval_run.eval_run_id, result["case_id"])
            assert [sample["epoch"] for sample in samples] == list(range(1, epochs + 1)) == list(
                range(1, result["samples"] + 1))
            assert samples[0]["run_id"] == result["run_id"]
            for sample in samples:
                [case_run] = rows(store, "SELECT * FROM runs WHERE run_id = ?", sample["run_id"])
                assert case_run["kind"] == "eval_case" and case_run["prompt_hash"] == prompt.hash
                assert (case_run["billed_cost_micros"], case_run["billed_calls"]) == (0, 0)
                assert sample["cost_micros"] == case_run["billed_replayed_cost_micros"] > 0
                calls = rows(store, "SELECT replayed, prompt_id, cost_micros FROM calls WHERE run_id IN "
                                    "(SELECT run_id FROM runs WHERE run_id = ? OR parent_run_id = ?)",
                             sample["run_id"], sample["run_id"])
                assert calls and all(call["replayed"] and call["prompt_id"] == prompt.id for call in calls)
                assert sum(call["cost_micros"] for call in calls) == sample["cost_micros"]
                assert not sample["live"] and sample["error"] is None
            assert result["cost_micros"] == sum(sample["cost_micros"] for sample in samples)
            assert result["cost_micros"] == baseline["cases"][result["case_id"]]["cost_micros"]
            assert result["score"] == pytest.approx(sum(sample["score"] for sample in samples) / epochs, abs=1e-6)
        judge_cost = outcome.eval_run.judge_cost_micros
        assert eval_run["cost_micros"] == sum(result["cost_micros"] for result in results) + judge_cost

    summarizer = outcomes["summarizer"].eval_run
    judges = rows(store, "SELECT * FROM runs WHERE kind = 'judge' AND name LIKE 'judge:summarizer:%' "
                         "AND started_at >= ?", summarizer.started_at)
    assert len(judges) == 4 * 3 and all(judge["parent_run_id"] is None for judge in judges)  # 4 cases x 3 epochs
    assert all(judge["prompt_id"] == "summary-judge" and judge["billed_replayed_cost_micros"] > 0 for judge in judges)
    assert summarizer.judge_cost_micros == sum(judge["billed_replayed_cost_micros"] for judge in judges) > 0
    # the judge's calls are in no case's run tree
    case_runs = {sample.run_id for result in summarizer.results for sample in result.samples}
    judge_ids = [judge["run_id"] for judge in judges]
    judge_calls = rows(store, "SELECT c.run_id, r.parent_run_id FROM calls c JOIN runs r USING (run_id) "
                              "WHERE list_contains(?, r.run_id) OR list_contains(?, r.parent_run_id)", judge_ids, judge_ids)
    assert len(judge_calls) == 4 * 3
    assert not {value for call in judge_calls for value in call.values()} & case_runs
    assert outcomes["classifier"].eval_run.judge_cost_micros == 0
    # the judge's hash names its scorer, and the scorer name is in the baseline
    scorer = next(s for s in suites["summarizer"].scorers if s.prompt is not None)
    assert scorer.prompt.hash[4:16] in scorer.name
    assert scorer.name in json.loads(suites["summarizer"].baseline_path.read_text())["scorers"]

    # and the reports of an in-process replay are as deterministic as the CLI's
    again = {name: evaluate(suite, network=no_network()) for name, suite in sorted(suites.items())}
    for render in (to_json, to_junit, to_markdown):
        assert render(list(outcomes.values())) == render(list(again.values()))


def test_another_prompt_version_replays_and_regresses_the_refund_case(examples):
    result = workbench_cli(examples, "eval", "classifier", "--prompt-version", "v2", env=OFFLINE_ENV)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "WB_EVAL_THRESHOLD" in result.stderr and "ticket-classifier@v2" in result.stderr
    assert "refund-double-charge 1.00→0.50 (dropped past tolerance)" in result.stderr  # exact fails, json_valid holds
    assert "invoice-address" not in result.stderr  # only the moved case is named

    compare = workbench_cli(examples, "eval", "compare", "classifier", "v1", "v2", env=OFFLINE_ENV)
    assert compare.returncode == 0, compare.stderr
    line = next(line for line in compare.stdout.splitlines() if "refund-double-charge" in line)
    assert "1.00" in line and "0.50" in line and "-0.50" in line and "billing" in line and "account" in line
    assert "mean 1.0000 → 0.9375" in compare.stdout


def test_a_changed_template_in_replay_is_a_miss_naming_the_cassette(examples):
    (examples / "evals" / "prompts.lock").unlink()  # not released yet: its content may change, the cassette stops it
    suite_file = examples / "evals" / "classifier.py"
    suite_file.write_text(suite_file.read_text().replace(
        'template="<ticket>{{ticket}}</ticket>", output=Ticket,\n    model="claude-haiku-4-5",\n)',
        'template="Ticket: <ticket>{{ticket}}</ticket>", output=Ticket,\n    model="claude-haiku-4-5",\n)', 1))
    assert "Ticket: <ticket>" in suite_file.read_text()
    before = (examples / "cassettes" / "classifier.json").read_bytes()
    result = workbench_cli(examples, "eval", "classifier", env=OFFLINE_ENV)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "WB_REPLAY_MISS" in result.stderr and "classifier.json" in result.stderr
    assert "Traceback" not in result.stderr
    assert (examples / "cassettes" / "classifier.json").read_bytes() == before


def test_a_rising_cost_per_case_fails_the_cost_gate(examples, store):
    suite = load_suites([examples / "evals" / "extractor.py"])["extractor"]
    path = suite.baseline_path
    baseline = json.loads(path.read_text())
    assert evaluate(suite, max_cost_increase=0.1, network=no_network()).exit_code == 0
    for case in baseline["cases"].values():
        case["cost_micros"] = int(case["cost_micros"] * 0.8)  # the run now costs 25% more per case
    path.write_text(json.dumps(baseline))
    outcome = evaluate(suite, max_cost_increase=0.1, network=no_network())
    assert outcome.exit_code == 1 and outcome.error.code == "WB_EVAL_COST"
    assert "+25." in outcome.error.cause and "10%" in outcome.error.cause and "invoice-extractor@v1" in outcome.error.cause
    assert evaluate(suite, network=no_network()).exit_code == 0  # without the flag cost is reported, not gated
    assert evaluate(suite, max_cost_increase=0.3, network=no_network()).exit_code == 0


def test_a_scorer_sees_the_calls_its_case_made_through_the_runtime(examples, store):
    """`llm()` makes its calls in a run of its own inside the case's: the scorer's `context.calls` has them."""
    suite_file = examples / "evals" / "classifier.py"
    suite_file.write_text(suite_file.read_text().replace(
        "[exact(\"category\"), json_valid()]", "[exact(\"category\"), json_valid(), seen]", 1).replace(
        "suite = define_eval(", "SEEN = {}\n\n\ndef seen(context):\n    SEEN[context.case_id] = list(context.calls)\n"
        "    return 1.0\n\n\nsuite = define_eval(", 1))
    suite = load_suites([suite_file])["classifier"]
    outcome = evaluate(suite, network=no_network())
    assert outcome.exit_code == 0, outcome.error
    seen = next(scorer.function.__globals__["SEEN"] for scorer in suite.scorers if scorer.name == "seen")
    assert sorted(seen) == sorted(case.id for case in suite.cases)
    for case_id, calls in seen.items():
        assert len(calls) == 1, case_id  # the one classifier call, not the judge's (none here) nor another case's
        assert calls[0].model_requested == "claude-haiku-4-5" and calls[0].replayed


def test_replay_never_builds_a_network_transport(examples, store):
    """Building an httpx2 network transport costs an SSL context (~20-60 ms): replay must not pay it
    per case (it did: 1,000 cases spent most of their time loading CA certificates)."""
    from workbench.evaluate.runner import Network

    def refuse():
        raise AssertionError("a network transport was built during replay")

    suite = load_suites([examples / "evals" / "classifier.py"])["classifier"]
    assert evaluate(suite, network=Network(sync=refuse, async_=refuse)).exit_code == 0


def test_the_cli_eval_leaves_every_record_in_the_store(examples):
    """`workbench eval` exits without the interpreter's teardown: its exit hooks must still have
    written every run, span, call and result of every case for the next reader."""
    result = subprocess.run([sys.executable, "-m", "workbench", "eval", "classifier"], cwd=examples, text=True,
                            capture_output=True, env={**os.environ, **OFFLINE_ENV, "WORKBENCH_DB": str(examples / "wb.duckdb")},
                            timeout=120)
    assert result.returncode == 0, result.stderr
    ingest_spools(examples / "wb.duckdb", spool_dir_of(examples / "wb.duckdb"))  # waits for the detached one, if it holds the lock
    store = examples / "wb.duckdb"
    cases = len(load_suites([examples / "evals" / "classifier.py"])["classifier"].cases)
    [eval_run] = rows(store, "SELECT * FROM eval_runs")
    assert (eval_run["suite"], eval_run["cases"], eval_run["verdict"]) == ("classifier", cases, "pass")
    results = rows(store, "SELECT * FROM eval_results")
    case_runs = rows(store, "SELECT run_id, status, span_id FROM runs WHERE kind = 'eval_case'")
    assert len(results) == len(case_runs) == cases and all(run["status"] == "ok" for run in case_runs)
    spans = {span["span_id"] for span in rows(store, "SELECT span_id FROM spans")}
    assert {run["span_id"] for run in case_runs} <= spans
    calls = rows(store, "SELECT span_id, replayed, cost_micros FROM calls")
    assert len(calls) >= cases and all(call["replayed"] and call["span_id"] in spans for call in calls)
