"""Suites: cases inline and from JSON lines, their validation, and evals as a pytest test type."""

from __future__ import annotations

import json

import pytest

from workbench.errors import WorkbenchError
from workbench.evaluate import assert_suite, define_eval, define_prompt, exact
from workbench.evaluate.gate import RECORD_ENV

PROMPT = define_prompt("suite-tests", "v1", system="Echo.", template="{{word}}")


def suite_in(tmp_path, cases, answers=None, name="echo"):
    answers = answers if answers is not None else {}
    return define_eval(name, PROMPT, cases, [exact()], baseline=tmp_path / f"{name}.baseline.json",
                       cassette=tmp_path / f"{name}.json",
                       target=lambda vars, ctx: answers.get(vars["word"], vars["word"]))


def test_cases_inline_and_from_json_lines_are_the_same_suite(tmp_path):
    rows = [{"id": "a", "vars": {"word": "alpha"}, "expected": "alpha", "metadata": {"from": "docs"}},
            {"id": "b", "vars": {"word": "beta"}, "expected": "beta"}]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")  # blank lines are skipped
    inline = suite_in(tmp_path, rows, name="inline")
    from_file = suite_in(tmp_path, path, name="from-file")
    assert inline.cases == from_file.cases
    assert [(case.id, case.vars, case.expected) for case in inline.cases] == [
        ("a", {"word": "alpha"}, "alpha"), ("b", {"word": "beta"}, "beta")]
    assert inline.cases[0].metadata == {"from": "docs"}
    # without ids, a case is numbered by its line
    assert [case.id for case in suite_in(tmp_path, [{"vars": {"word": "x"}}, {"vars": {"word": "y"}}]).cases] == ["0", "1"]


def test_a_jsonl_path_is_relative_to_the_suite_file(tmp_path):
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "words.jsonl").write_text('{"id": "w", "vars": {"word": "w"}, "expected": "w"}\n')
    (folder / "words.py").write_text(
        "from workbench.evaluate import define_eval, define_prompt, exact\n"
        "P = define_prompt('suite-tests-words', 'v1', template='{{word}}')\n"
        "define_eval('words', P, 'words.jsonl', [exact()], target=lambda vars, ctx: vars['word'])\n")
    from workbench.evaluate.suite import load_suites

    suite = load_suites([folder])["words"]
    assert [case.id for case in suite.cases] == ["w"]
    assert suite.baseline_path == folder / "words.baseline.json"  # beside the suite file, never the cwd
    assert suite.cassette_path == tmp_path / "cassettes" / "words.json"


@pytest.mark.parametrize("content,message", [
    ('{"id": "a", "vars": {}}\nnot json\n', "cannot read the cases file"),
    ('{"id": "a", "expected": 1}\n', "not a mapping with `vars`"),
    ('{"id": "a", "vars": {}}\n{"id": "a", "vars": {}}\n', "case ids repeat: a"),
])
def test_bad_case_files_are_suite_errors(tmp_path, content, message):
    path = tmp_path / "cases.jsonl"
    path.write_text(content)
    with pytest.raises(WorkbenchError) as caught:
        suite_in(tmp_path, path)
    assert caught.value.code == "WB_EVAL_SUITE_INVALID" and message in caught.value.cause
    with pytest.raises(WorkbenchError, match="cannot read the cases file"):
        suite_in(tmp_path, tmp_path / "missing.jsonl")


def test_suite_arguments_are_checked(tmp_path):
    with pytest.raises(WorkbenchError, match="tolerance"):
        define_eval("x", PROMPT, [{"vars": {"word": "a"}}], [exact()], tolerance=1.5)
    with pytest.raises(WorkbenchError, match="no scorers"):
        define_eval("x", PROMPT, [{"vars": {"word": "a"}}], [])
    # the answering function where the prompt goes, a target that cannot be called: a WorkbenchError
    # naming the argument, not an AttributeError at the first `workbench eval`
    for prompt, target, wrong in ((lambda vars, ctx: "a", None, "its prompt is function"),
                                  ("ticket-classifier", None, "its prompt is str"), (PROMPT, "answer", "its target is str")):
        with pytest.raises(WorkbenchError, match=wrong) as caught:
            define_eval("x", prompt, [{"vars": {"word": "a"}}], [exact()], target=target)
        assert caught.value.code == "WB_EVAL_SUITE_INVALID" and "target=" in caught.value.fix


WORDS = [{"id": f"w{n}", "vars": {"word": f"w{n}"}, "expected": f"w{n}"} for n in range(10)]


def test_assert_suite_fails_a_test_with_the_gates_message_and_records_when_asked(tmp_path, store, monkeypatch):
    monkeypatch.delenv(RECORD_ENV, raising=False)
    answers: dict = {}
    suite = suite_in(tmp_path, WORDS, answers, name="pytest-words")
    with pytest.raises(WorkbenchError) as missing:
        assert_suite(suite)
    assert missing.value.code == "WB_EVAL_BASELINE_MISSING"  # could not judge: an error, never a pass

    monkeypatch.setenv(RECORD_ENV, "1")  # a pytest run with WORKBENCH_EVAL_RECORD=1 records
    outcome = assert_suite(suite)
    assert outcome.verdict is None and suite.baseline_path.is_file()
    recorded = suite.baseline_path.read_bytes()
    assert json.loads(recorded)["mean"] == 1.0

    monkeypatch.delenv(RECORD_ENV)
    assert assert_suite(suite).verdict.passed
    answers["w3"] = "wrong"  # one case collapses; the mean (0.9) drops past 0.05 too
    with pytest.raises(AssertionError) as failed:
        assert_suite(suite)
    message = str(failed.value)
    assert message.startswith("WB_EVAL_THRESHOLD: suite pytest-words: mean score 0.9000 vs baseline 1.0000")
    assert "w3 1.00→0.00" in message and "suite-tests@v1" in message and PROMPT.hash[:20] in message
    assert "fix: " in message and "--record-baseline" in message
    assert suite.baseline_path.read_bytes() == recorded  # gating never writes the baseline


def test_the_console_lists_every_case_of_a_short_suite_and_only_moved_ones_of_a_long_one(tmp_path, store, monkeypatch):
    import io

    from rich.console import Console

    from workbench.evaluate.gate import evaluate
    from workbench.evaluate.report import print_console

    monkeypatch.delenv(RECORD_ENV, raising=False)
    answers: dict = {}
    long = suite_in(tmp_path, [{"id": f"c{n}", "vars": {"word": f"c{n}"}, "expected": f"c{n}"} for n in range(60)],
                    answers, name="long-words")
    evaluate(long, record_baseline=True)
    answers["c42"] = "wrong"
    outcome = evaluate(long)
    console = Console(record=True, width=200, file=io.StringIO())
    print_console([outcome], console)
    text = console.export_text()
    assert "c42" in text and "fail" in text and "c41" not in text
    assert "59 of 60 cases scored as in the baseline" in text and "verdict regression" in text
    short = suite_in(tmp_path, WORDS, {}, name="short-words")
    evaluate(short, record_baseline=True)
    console = Console(record=True, width=200, file=io.StringIO())
    print_console([evaluate(short)], console)
    text = console.export_text()
    assert all(f"w{n}" in text for n in range(10)) and "not listed" not in text
