"""What the eval keeps of a case may shrink; what its reports say may not: the JSON, JUnit XML and
Markdown reports of two gated suites (one sample a case and two, regressions, labels, explanations,
a score of -0.0, a case in error, outcomes many cases share) are byte for byte the reports committed
in tests/fixtures/reports/, written by the code before the eval's per-case record was made smaller.
The reports hold no times and no random ids, so the same suites always give the same bytes."""

from __future__ import annotations

from pathlib import Path

from workbench.evaluate import Score, define_eval, define_prompt, exact
from workbench.evaluate.gate import evaluate
from workbench.evaluate.report import to_json, to_junit, to_markdown

EXPECTED = Path(__file__).resolve().parents[1] / "fixtures" / "reports"


def _tone(context) -> Score:
    return Score(None, label="calm" if int(context.case_id[1:]) % 3 else "terse", explanation="read by hand")


def _half(context) -> Score:
    return Score(-0.0 if context.case_id == "c7" else 0.5, "half" if context.case_id != "c8" else "")


def _suites(tmp_path: Path, answers: dict) -> list:
    async def target(vars, ctx):
        answer = answers.get((vars["key"], ctx.epoch), answers.get(vars["key"], "ok"))
        if answer == "raise":
            raise ValueError(f"the app broke on {vars['key']}")
        return {"answer": answer, "epoch": ctx.epoch}

    suites = []
    for name, epochs, scorers, cases in (("single", 1, [exact("answer"), _tone], 40),
                                         ("sampled", 2, [exact("answer"), _half], 12)):
        prompt = define_prompt(f"report-{name}", "v1", template="{{key}}")
        suites.append(define_eval(
            f"report-{name}", prompt, [{"id": f"c{n}", "vars": {"key": f"c{n}"}, "expected": {"answer": "ok"}}
                                       for n in range(cases)],
            scorers, target=target, baseline=tmp_path / f"{name}.baseline.json", cassette=tmp_path / f"{name}.json",
            epochs=epochs, concurrency=3, errors_are_failures=True))
    return suites


def reports(tmp_path: Path) -> dict[str, str]:
    """The three reports of the two suites gated after their answers moved (also run on the code the
    fixtures were written with: `PYTHONPATH=<that tree>:tests/evaluate python -c ...`)."""
    for suite in _suites(tmp_path, {}):
        assert evaluate(suite, mode="replay", record_baseline=True).recorded
    moved = {"c3": "no", "c5": "raise", ("c4", 2): "no", "c11": "no"}
    outcomes = [evaluate(suite, mode="replay") for suite in _suites(tmp_path, moved)]
    assert [outcome.exit_code for outcome in outcomes] == [1, 1]
    return {"report.json": to_json(outcomes), "report.xml": to_junit(outcomes), "report.md": to_markdown(outcomes)}


def test_the_reports_of_gated_suites_are_the_bytes_they_always_were(tmp_path, store):
    for name, text in reports(tmp_path).items():
        assert text == (EXPECTED / name).read_text(encoding="utf-8"), name
