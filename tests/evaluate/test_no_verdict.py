"""No verdict, no pass: everything that keeps the gate from judging exits 2 naming what could not be
judged, never passes, and never writes a baseline. Each case through `workbench eval`, as CI runs it."""

from __future__ import annotations

import json

import pytest

from eval_support import OFFLINE_ENV, dedent, workbench_cli

CASES = ["c0", "c1", "c2", "c3"]

# a suite whose target, scorer and judge do what `behaviour.json` says, case by case
SUITE = '''
import json, pathlib, sys
from workbench.errors import WorkbenchError
from workbench.evaluate import Score, define_eval, define_prompt, llm_judge

HERE = pathlib.Path(__file__).parent
PROMPT = define_prompt("robust", "v1", system="Answer.", template="{{{{key}}}}")
JUDGE = define_prompt("robust-judge", "v1", system="Grade.", template="{{{{output}}}}")


class Halt(BaseException):
    """Not an Exception: what a careless library might raise."""


def behaviour(part, key):
    return json.loads((HERE / "behaviour.json").read_text()).get(part, {{}}).get(key, "ok")


def act(what):
    if what == "exit":
        sys.exit(0)
    if what == "raise":
        raise ValueError("the app broke")
    if what == "halt":
        raise Halt("stopped")
    if what == "invalid":
        raise WorkbenchError("WB_LLM_OUTPUT_INVALID", "the model never called the respond tool", "fix the prompt")


def target(vars, ctx):
    what = behaviour("target", vars["key"])
    act(what)
    return "wrong" if what == "wrong" else "ok"


def checked(context):
    what = behaviour("scorer", context.case_id)
    act(what)
    if what == "nan":
        return Score(float("nan"))
    if what == "five":
        return 5
    return context.output == "ok"


def judge(prompt, variables, runner):
    reply = behaviour("judge", json.loads(variables["input"])["key"])
    return '{{"score": 1}}' if reply == "ok" else reply


define_eval("robust", PROMPT, [{{"id": key, "vars": {{"key": key}}}} for key in {cases!r}],
            [checked, llm_judge(JUDGE)], target=target, judge=judge{options})
'''


@pytest.fixture
def robust(tmp_path):
    """A project with the `robust` suite, its behaviour all "ok", and a baseline recorded from that."""

    def make(options: str = "", record: bool = True):
        (tmp_path / "evals").mkdir(exist_ok=True)
        (tmp_path / "evals" / "robust.py").write_text(SUITE.format(cases=CASES, options=options))
        behave(tmp_path)
        if record:
            result = workbench_cli(tmp_path, "eval", "--record-baseline")
            assert result.returncode == 0, result.stderr
        return tmp_path

    return make


def behave(root, **parts) -> None:
    (root / "evals" / "behaviour.json").write_text(json.dumps(parts))


def baseline_bytes(root) -> bytes | None:
    path = root / "evals" / "robust.baseline.json"
    return path.read_bytes() if path.exists() else None


def assert_no_verdict(result, *named: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "verdict pass" not in result.stdout
    said = " ".join(result.stderr.split())
    for text in named:
        assert text in said, (text, said)


@pytest.mark.parametrize("what,named", [
    ("invalid", ["WB_LLM_OUTPUT_INVALID", "the model never called the respond tool"]),
    ("raise", ["the target raised ValueError: the app broke"]),
    ("exit", ["the target called sys.exit(0)"]),
    ("halt", ["the target raised Halt: stopped"]),
])
def test_a_target_that_errors_leaves_no_verdict_and_records_nothing(robust, what, named):
    root = robust()
    recorded = baseline_bytes(root)
    behave(root, target={key: what for key in CASES})  # every case ends in an error
    gate = workbench_cli(root, "eval", "--json", "out.json")
    assert_no_verdict(gate, "WB_EVAL_CASE_ERROR", "4 of 4 cases ended in an error", "there is no verdict",
                      "c0, c1, c2, c3", *named)
    report = json.loads((root / "out.json").read_text())["suites"][0]
    assert report["verdict"] == "error" and report["errored_cases"] == 4 and report["mean"] is None
    assert all(case["score"] is None and case["status"] == "error" for case in report["cases"])  # never scored 0
    record = workbench_cli(root, "eval", "--record-baseline")
    assert_no_verdict(record, "WB_EVAL_CASE_ERROR", "cannot record a baseline", "c0, c1, c2, c3")
    assert baseline_bytes(root) == recorded


def test_one_errored_case_among_passing_ones_still_leaves_no_verdict(robust):
    root = robust()
    behave(root, target={"c2": "raise"})
    result = workbench_cli(root, "eval")
    assert_no_verdict(result, "1 of 4 cases ended in an error", "(cases c2)", "errors_are_failures=True")
    assert "c0" not in result.stderr.split("(cases")[1]  # only the errored case is named


def test_a_suite_that_declares_errors_as_failures_fails_instead(robust):
    root = robust(", errors_are_failures=True")
    recorded = baseline_bytes(root)
    behave(root, target={"c1": "invalid"})
    result = workbench_cli(root, "eval")
    assert result.returncode == 1, result.stderr
    said = " ".join(result.stderr.split())
    assert "WB_EVAL_CASE_FAILED" in said and "declares errors as failures (c1)" in said
    assert "c1 error (WB_LLM_OUTPUT_INVALID" in said
    # still never a baseline's number
    assert_no_verdict(workbench_cli(root, "eval", "--record-baseline"), "cannot record a baseline", "(cases c1)")
    assert baseline_bytes(root) == recorded
    # a broken scorer is not the target's error: still no verdict
    behave(root, scorer={"c3": "raise"})
    assert_no_verdict(workbench_cli(root, "eval"), "WB_EVAL_CASE_ERROR", "scorer checked raised ValueError")


@pytest.mark.parametrize("part,what,named", [
    ("scorer", "nan", ["WB_EVAL_SCORE_INVALID", "scorer checked", "a score of nan is not a number in [0, 1]"]),
    ("scorer", "five", ["WB_EVAL_SCORE_INVALID", "scorer checked returned 5"]),
    ("judge", '{"score": NaN}', ["WB_EVAL_SCORE_INVALID", "llm_judge[robust-judge@v1", "returned nan"]),
    ("judge", '{"score": 5}', ["WB_EVAL_SCORE_INVALID", "llm_judge[robust-judge@v1", "returned 5"]),
    ("scorer", "exit", ["scorer checked called sys.exit(0)"]),
    ("scorer", "halt", ["scorer checked raised Halt: stopped"]),
])
def test_a_scorer_or_judge_that_cannot_score_leaves_no_verdict(robust, part, what, named):
    root = robust()
    recorded = baseline_bytes(root)
    behave(root, **{part: {"c3": what}})
    assert_no_verdict(workbench_cli(root, "eval"), "WB_EVAL_CASE_ERROR", "1 of 4 cases", "(cases c3)", *named)
    assert_no_verdict(workbench_cli(root, "eval", "--record-baseline"), "cannot record a baseline", *named)
    assert baseline_bytes(root) == recorded


def test_errored_cases_are_stored_unscored(robust):
    from workbench.config import spool_dir_of
    from workbench.store.db import open_store
    from workbench.store.ingest import ingest_spools

    root = robust()
    behave(root, target={"c0": "raise"})
    assert workbench_cli(root, "eval").returncode == 2
    ingest_spools(root / "wb.duckdb", spool_dir_of(root / "wb.duckdb"))
    with open_store(root / "wb.duckdb", read_only=True) as con:
        [(verdict, errored, code)] = con.execute(
            "SELECT verdict, errored_cases, error_code FROM eval_runs WHERE verdict <> 'recorded'").fetchall()
        rows = dict(con.execute("SELECT r.case_id, r.score FROM eval_results r JOIN eval_runs e USING (eval_run_id) "
                                "WHERE e.verdict = 'error'").fetchall())
        [status] = con.execute("SELECT DISTINCT r.status FROM runs r JOIN run_tags t USING (run_id) "
                               "WHERE t.key = 'case' AND t.value = 'c0' AND r.kind = 'eval_case' "
                               "AND r.error_type = 'ValueError'").fetchall()
    assert (verdict, errored, code) == ("error", 1, "WB_EVAL_CASE_ERROR")
    assert rows["c0"] is None and rows["c1"] == 1.0  # no score, not 0
    assert status == ("failed",)  # the case's run is stored as failed, with what it raised


def test_sys_exit_in_a_suite_file_is_no_verdict(tmp_path):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "quits.py").write_text("import sys\nsys.exit(0)\n")
    for args in (["eval"], ["eval", "--record-baseline"], ["eval", "evals/quits.py"]):
        assert_no_verdict(workbench_cli(tmp_path, *args), "WB_EVAL_SUITE_INVALID", "quits.py failed to import: called sys.exit(0)")
    (tmp_path / "evals" / "quits.py").write_text("raise KeyError('setting')\n")
    assert_no_verdict(workbench_cli(tmp_path, "eval"), "failed to import: KeyError: 'setting'")


def test_a_suite_named_on_the_command_line_is_found_in_its_own_file_first(tmp_path):
    (tmp_path / "evals").mkdir()
    suite = dedent("""
        from workbench.evaluate import define_eval, define_prompt, exact
        define_eval("{name}", define_prompt("{name}", "v1", template="{{{{{{{{x}}}}}}}}"),
                    [{{"id": "c1", "vars": {{"x": "x"}}, "expected": "x"}}], [exact()], target=lambda vars, ctx: "x")
    """)
    (tmp_path / "evals" / "greet.py").write_text(suite.format(name="greet"))
    (tmp_path / "evals" / "misc.py").write_text(suite.format(name="named-elsewhere"))
    (tmp_path / "evals" / "broken.py").write_text("raise KeyError('setting')\n")
    # its own file alone is imported: a broken neighbour does not stop it
    assert workbench_cli(tmp_path, "eval", "greet", "--record-baseline").returncode == 0
    assert "verdict pass" in workbench_cli(tmp_path, "eval", "greet").stdout
    # a suite in a file of another name is still found, among every file, so the broken one is named
    assert_no_verdict(workbench_cli(tmp_path, "eval", "named-elsewhere"), "broken.py failed to import")
    assert_no_verdict(workbench_cli(tmp_path, "eval"), "broken.py failed to import")
    (tmp_path / "evals" / "broken.py").unlink()
    assert workbench_cli(tmp_path, "eval", "named-elsewhere", "--record-baseline").returncode == 0


@pytest.mark.parametrize("cases", ["[]", "'empty.jsonl'"])
def test_zero_cases_is_no_verdict_with_or_without_recording(tmp_path, cases):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "empty.jsonl").write_text("")
    (tmp_path / "evals" / "hollow.py").write_text(dedent(f"""
        from workbench.evaluate import define_eval, define_prompt, exact
        define_eval("hollow", define_prompt("hollow", "v1", template="{{{{x}}}}"), {cases}, [exact()],
                    target=lambda vars, ctx: "x")
    """))
    for args in (["eval"], ["eval", "--record-baseline"], ["check"]):
        assert_no_verdict(workbench_cli(tmp_path, *args), "WB_EVAL_SUITE_INVALID", "suite hollow", "has no cases")
    assert not (tmp_path / "evals" / "hollow.baseline.json").exists()


def test_no_suite_found_is_no_verdict(tmp_path):
    assert_no_verdict(workbench_cli(tmp_path, "eval"), "WB_EVAL_SUITE_INVALID", "evals is not a suite file (.py) or folder")
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "helpers.py").write_text("TOLERANCE = 0.05\n")  # a file that defines no suite
    assert_no_verdict(workbench_cli(tmp_path, "eval"), "no suites under evals")
    assert_no_verdict(workbench_cli(tmp_path, "eval", "--record-baseline"), "no suites under evals")
    assert_no_verdict(workbench_cli(tmp_path, "eval", "nowhere"), "no single suite named 'nowhere'")
    assert_no_verdict(workbench_cli(tmp_path, "eval", "evals/helpers.py"), "no single suite named 'evals/helpers.py'")


def test_the_gate_refuses_a_released_prompt_whose_content_moved(examples):
    """The lock check of `workbench check`, in `workbench eval` itself: a CI that runs only the gate
    cannot be fooled by a released prompt edited in place (its cassette would even replay it when
    only, say, the output schema's description moved)."""
    suite_file = examples / "evals" / "classifier.py"
    suite_file.write_text(suite_file.read_text().replace(
        'SYSTEM = "You classify support tickets', 'SYSTEM = "You carefully classify support tickets', 1))
    for args in (["eval", "classifier"], ["eval", "classifier", "--record-baseline"],
                 ["eval", "classifier", "--prompt-version", "v2"], ["eval", "compare", "classifier", "v1", "v2"]):
        result = workbench_cli(examples, *args, env=OFFLINE_ENV)
        assert_no_verdict(result, "WB_PROMPT_VERSION", "ticket-classifier version", "changed since it was released",
                          "bump the version")
        assert "cases" not in result.stdout  # nothing ran
    from workbench.config import spool_dir_of
    from workbench.store.db import open_store
    from workbench.store.ingest import ingest_spools

    ingest_spools(examples / "wb.duckdb", spool_dir_of(examples / "wb.duckdb"))
    if (examples / "wb.duckdb").exists():
        with open_store(examples / "wb.duckdb", read_only=True) as con:
            assert con.execute("SELECT count(*) FROM eval_runs").fetchall() == [(0,)]
            assert con.execute("SELECT count(*) FROM calls").fetchall() == [(0,)]
    everything = workbench_cli(examples, "eval", env=OFFLINE_ENV)  # the other suites still run and are reported
    assert everything.returncode == 2 and "extractor" in everything.stdout and "WB_PROMPT_VERSION" in everything.stderr


def test_a_model_that_never_answers_through_respond_records_no_baseline(tmp_path, store):
    """The runtime's own failure, end to end: the model (the fake, echoing text) never calls the
    `respond` tool, so every case is WB_LLM_OUTPUT_INVALID. That used to record a mean of 0.0 without
    a word, and the next gate said "pass"."""
    from typing import Literal

    from pydantic import BaseModel

    import workbench
    from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider
    from workbench.evaluate import define_eval, define_prompt, exact
    from workbench.evaluate.gate import evaluate
    from workbench.evaluate.runner import Network
    from workbench.runtime import OpenAIProvider

    class Ticket(BaseModel):
        category: Literal["billing", "other"]

    workbench.register_model(id="gpt-echo", provider="openai", context_window=100_000, max_output=4096,
                             input=100, output=400, source="test", as_of="2026-01-01")
    prompt = define_prompt("echo-classifier", "v1", system="Classify.", template="{{ticket}}", output=Ticket,
                           model="gpt-echo")
    suite = define_eval("echo-classifier", prompt, [{"id": f"t{n}", "vars": {"ticket": f"ticket {n}"},
                                                     "expected": {"category": "billing"}} for n in range(8)],
                        [exact("category")], baseline=tmp_path / "b.json", cassette=tmp_path / "c.json",
                        providers=lambda transport: [OpenAIProvider("http://echo.test/v1", "sk", ["gpt-echo"],
                                                                    transport=transport)])
    fake = FakeProvider()  # no responder: it echoes text and never calls a tool
    outcome = evaluate(suite, mode="record", record_baseline=True,
                       network=Network(async_=lambda: AsyncFakeTransport(fake)))
    assert outcome.exit_code == 2 and outcome.status == "error" and not outcome.recorded
    assert outcome.error.code == "WB_EVAL_CASE_ERROR" and "8 of 8 cases ended in an error" in outcome.error.cause
    assert "WB_LLM_OUTPUT_INVALID" in outcome.error.cause and "cannot record a baseline" in outcome.error.cause
    assert not (tmp_path / "b.json").exists()
    assert outcome.eval_run.mean is None and all(result.score is None for result in outcome.eval_run.results)
