"""Every built-in scorer, callables of every return type, and the judge's name."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from workbench.errors import WorkbenchError
from workbench.evaluate import (
    Score, ScoreContext, contains, exact, json_schema_valid, json_valid, llm_judge, numeric_tolerance, regex,
)
from workbench.evaluate.prompts import Prompt
from workbench.evaluate.scorers import scorer_of


class Invoice(BaseModel):
    vendor: str
    total: float


def score(scorer, output, expected=None, judge=None) -> Score:
    return scorer_of(scorer)(ScoreContext("c1", {"q": "x"}, output, expected, judge=judge))


def test_exact_whole_and_field():
    assert score(exact(), " billing\n", "billing").value == 1.0
    assert score(exact(), "Billing", "billing").value == 0.0
    assert score(exact(), {"a": [1, 2]}, {"a": [1, 2]}).value == 1.0
    field = exact("category")
    assert field.name == "exact[category]"
    assert score(field, {"category": "bug", "x": 1}, {"category": "bug"}).value == 1.0
    assert score(field, '{"category": "bug"}', {"category": "bug"}).value == 1.0  # JSON text is read
    miss = score(field, {"category": "account"}, {"category": "billing"})
    assert miss.value == 0.0 and miss.assertion and "account" in miss.explanation and "billing" in miss.explanation
    assert score(exact("a.b"), {"a": {"b": 3}}, {"a": {"b": 3}}).value == 1.0  # dotted path


def test_contains():
    assert score(contains("refund"), "We will REFUND you").value == 1.0
    assert score(contains("refund", case_sensitive=True), "We will REFUND you").value == 0.0
    assert score(contains(), "The capital is Paris.", "Paris").value == 1.0  # the expected text
    assert score(contains("x"), {"k": "xyz"}).value == 1.0  # structured output as JSON text


def test_regex():
    scorer = regex(r"^\d{4}-\d{2}-\d{2}$")
    assert scorer.name == r"regex[^\d{4}-\d{2}-\d{2}$]"
    assert score(scorer, "2026-01-31").value == 1.0
    assert score(scorer, "31/01/2026").value == 0.0


def test_json_valid():
    assert score(json_valid(), '{"a": 1}').value == 1.0
    assert score(json_valid(), Invoice(vendor="v", total=1)).value == 1.0
    bad = score(json_valid(), '{"a": 1')
    assert bad.value == 0.0 and "not JSON" in bad.explanation


def test_json_schema_valid():
    scorer = json_schema_valid(Invoice.model_json_schema())
    assert score(scorer, {"vendor": "ACME", "total": 3.5}).value == 1.0
    assert score(scorer, Invoice(vendor="ACME", total=3.5)).value == 1.0
    wrong = score(scorer, '{"vendor": "ACME", "total": "lots"}')
    assert wrong.value == 0.0 and wrong.explanation.startswith("total:")
    missing = score(scorer, {"vendor": "ACME"})
    assert missing.value == 0.0 and "total" in missing.explanation
    assert score(scorer, "not json").value == 0.0


def test_numeric_tolerance_absolute_and_relative():
    absolute = numeric_tolerance("total", tolerance=0.01)
    assert absolute.name == "numeric_tolerance[total±0.01]"
    assert score(absolute, {"total": 100.005}, {"total": 100.0}).value == 1.0
    assert score(absolute, {"total": 100.02}, {"total": 100.0}).value == 0.0
    relative = numeric_tolerance("total", tolerance=0.05, relative=True)
    assert relative.name == "numeric_tolerance[total±0.05x]"
    assert score(relative, {"total": 1040}, {"total": 1000}).value == 1.0  # 4% off, 5% allowed
    assert score(relative, {"total": 1060}, {"total": 1000}).value == 0.0
    assert score(relative, {"total": 10.4}, {"total": 10}).value == 1.0  # relative to the expected value
    assert score(relative, {"total": 10.6}, {"total": 10}).value == 0.0
    assert score(numeric_tolerance(), "42", 42).value == 1.0  # a bare number
    not_a_number = score(absolute, {"total": "n/a"}, {"total": 1})
    assert not_a_number.value == 0.0 and "not a number" in not_a_number.explanation
    assert score(absolute, {"other": 1}, {"total": 1}).value == 0.0  # a missing field scores 0


def test_callables_returning_bool_float_label_and_tuple():
    def short(output):
        return len(output) < 10

    def ratio(output, expected):
        return len(output) / len(expected)

    def mood(context):
        return "happy" if "!" in context.output else "calm"

    def explained(output):
        return 0.25, "a quarter"

    passed = score(short, "tiny")
    assert (passed.value, passed.assertion, scorer_of(short).name) == (1.0, True, "short")
    assert score(short, "far too long a text").value == 0.0
    assert score(ratio, "ab", "abcd").value == 0.5
    label = score(mood, "hi!")
    assert (label.value, label.label) == (None, "happy")  # reported, never gated
    with_reason = score(explained, "x")
    assert (with_reason.value, with_reason.explanation) == (0.25, "a quarter")
    assert score(lambda output: (False, "nope"), "x").explanation == "nope"


@pytest.mark.parametrize("bad", [1.5, -0.1, 2, float("nan"), float("inf")])
def test_a_score_that_is_not_a_number_in_zero_to_one_is_refused_where_it_is_made(bad):
    def over(output):
        return bad

    with pytest.raises(WorkbenchError) as caught:
        score(over, "x")
    assert caught.value.code == "WB_EVAL_SCORE_INVALID" and "over" in caught.value.cause and str(bad) in caught.value.cause
    with pytest.raises(WorkbenchError) as made:  # a Score built by hand is checked too
        Score(bad)
    assert made.value.code == "WB_EVAL_SCORE_INVALID" and str(bad) in made.value.cause
    with pytest.raises(WorkbenchError, match="WB_EVAL_SCORE_INVALID"):
        score(lambda output: Score(bad), "x")


def test_a_score_cannot_be_changed_after_it_was_checked():
    checked = Score(0.5)
    with pytest.raises(AttributeError):
        checked.value = float("nan")
    assert Score(True).value == 1.0 and Score(0).value == 0.0 and Score(None, label="calm").value is None


def test_an_unusable_return_is_a_score_error():
    with pytest.raises(WorkbenchError, match="WB_EVAL_SCORE_INVALID"):
        score(lambda output: [1], "x")


JUDGE = Prompt(id="grader", version="v3", system="Grade.", template="{{input}} {{output}} {{expected}}")


def test_the_judge_prompt_hash_is_in_the_scorer_name():
    scorer = llm_judge(JUDGE)
    assert scorer.name == f"llm_judge[grader@v3:{JUDGE.hash[4:16]}]" and scorer.prompt is JUDGE
    edited = Prompt(id="grader", version="v3", system="Grade strictly.", template=JUDGE.template)
    assert llm_judge(edited).name != scorer.name  # a changed judge is a different scorer


def test_the_judge_reply_becomes_the_score():
    seen = []

    def judge(prompt, variables, case_id):
        seen.append((prompt.id, variables, case_id))
        return reply

    scorer = llm_judge(JUDGE)
    for reply, expected in (('{"score": 0.75, "reason": "mostly"}', 0.75), ("Score: 1.0", 1.0), ({"score": 0}, 0.0)):
        assert score(scorer, "out", "exp", judge=judge).value == expected
    assert seen[0] == ("grader", {"input": '{"q": "x"}', "output": "out", "expected": "exp"}, "c1")
    reply = "no idea"
    with pytest.raises(WorkbenchError, match="WB_EVAL_SCORE_INVALID"):
        score(scorer, "out", judge=judge)
    with pytest.raises(WorkbenchError, match="needs a judge"):
        score(scorer, "out")


@pytest.mark.parametrize("reply,shown", [
    ('{"score": NaN, "reason": "unsure"}', "nan"), ('{"score": 5}', "5"), ({"score": 1.5}, "1.5"),
    ({"reason": "no score key"}, "None"), ({"score": "high"}, "'high'"), ({"score": True}, "True"),
])
def test_a_judge_reply_that_is_not_a_score_in_zero_to_one_is_refused(reply, shown):
    """{"score": NaN} or {"score": 5} from a judge used to pass the gate; a reply without a score
    used to score 0. Each is WB_EVAL_SCORE_INVALID, naming the judge and the value."""
    scorer = llm_judge(JUDGE)
    with pytest.raises(WorkbenchError) as caught:
        score(scorer, "out", "exp", judge=lambda prompt, variables, case_id: reply)
    assert caught.value.code == "WB_EVAL_SCORE_INVALID"
    assert scorer.name in caught.value.cause and shown in caught.value.cause
