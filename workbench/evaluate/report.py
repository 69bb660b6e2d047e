"""Reports of an eval: a rich console table, JUnit XML, Markdown (fits `$GITHUB_STEP_SUMMARY`) and
JSON. Each shows, per case, its samples, their mean and spread, and the verdict. They hold no times
and no random ids, so replaying a suite twice gives the same bytes."""

from __future__ import annotations

import io
import itertools
import json
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from workbench.evaluate import stats
from workbench.evaluate.gate import Outcome
from workbench.evaluate.scorers import as_text
from workbench.evaluate.baseline import one_cost
from workbench.evaluate.runner import bill_costs
from workbench.money import format_costs

if TYPE_CHECKING:  # imported by the JUnit writer alone: an eval without --junit never loads it
    from xml.etree import ElementTree

STATUS_TEXT = {"pass": "pass", "regression": "regression", "recorded": "recorded", "error": "no verdict"}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _scores(result) -> dict:
    """Each scorer's value, averaged over the samples that were scored (a label: the first one's)."""
    scored = [sample for sample in result.samples if sample.error is None]
    out = {}
    for name, first in (scored[0].scores.items() if scored else ()):
        values = [sample.scores[name].value for sample in scored]
        out[name] = first.label if first.value is None else _round(stats.mean(values))
    return out


def _statuses(outcome: Outcome) -> Iterator[tuple]:
    """Each case's result, its verdict (None: not judged) and its status in the reports."""
    verdicts = {case.case_id: case for case in outcome.verdict.cases} if outcome.verdict else {}
    for result in outcome.eval_run.results:
        verdict = verdicts.get(result.case_id)
        if result.error is not None and not (verdict and verdict.failed):
            status = "error"
        elif verdict is None:
            status = "recorded" if outcome.recorded else "not judged"
        else:
            status = "fail" if verdict.failed else "pass"
        yield result, verdict, status


def _moved(verdict, status: str) -> bool:
    """A case the console lists in a long suite: it failed, errored, or moved from its baseline."""
    return status in ("fail", "error") or not (verdict is None or verdict.delta is None or round(verdict.delta, 6) == 0)


def _rows(outcome: Outcome, excerpts: bool = True, moved_only: bool = False) -> Iterator[dict]:
    """Each case's row, one at a time: the console keeps only the moved ones of a long suite, so a
    100,000-case run never holds a row per case to print a few. `excerpts=False`: without the
    output's excerpt (read back from the run's output file), for the reports that show none.
    `moved_only`: only the cases `_moved` keeps, the others never built (nor their outputs read)."""
    for result, verdict, status in _statuses(outcome):
        if moved_only and not _moved(verdict, status):
            continue
        scored = next((sample for sample in result.samples if sample.error is None), result.samples[0])
        yield {
            "case": result.case_id,
            "score": result.score,
            "spread": _round(result.spread),
            "samples": [sample.score for sample in result.samples],
            "baseline": None if verdict is None else verdict.baseline,
            "baseline_spread": None if verdict is None else _round(verdict.baseline_spread),
            "delta": None if verdict is None or verdict.delta is None else round(verdict.delta, 6),
            "p_value": None if verdict is None else _round(verdict.p_value),
            **_cost_fields(*result.costs),
            "status": status,
            "scores": _scores(result),
            "explanations": {name: score.explanation for name, score in scored.scores.items() if score.explanation},
            **({"output": None if result.output is None else as_text(result.output)[:500]} if excerpts else {}),
            "error": f"{result.error.code}: {result.error.cause}" if result.error else None,
        }


def _cost_fields(costs: dict[str, int], unpriced: int, prefix: str = "") -> dict:
    """A cost as the reports give it: `cost_micros` the one exact figure and `currency` its currency,
    both None when a call was unpriced or calls were priced in two currencies; `costs` every
    currency's money (never added together); `unpriced_calls` the calls nothing priced."""
    micros, currency = one_cost(costs, unpriced)
    return {f"{prefix}cost_micros": micros, f"{prefix}currency": currency, f"{prefix}costs": costs,
            f"{prefix}unpriced_calls": unpriced}


def cost_text(data: dict, prefix: str = "", exact: bool = False) -> str:
    """A report's cost (`_cost_fields`) in words (`format_costs`). `exact`: every digit."""
    return format_costs(data[f"{prefix}costs"], data[f"{prefix}unpriced_calls"], exact)


def summary(outcome: Outcome, cases: bool = True) -> dict:
    """The outcome as the reports show it; `cases=False`: without the per-case rows (`_rows`)."""
    run, prompt = outcome.eval_run, outcome.eval_run.prompt
    verdict = outcome.verdict
    return {
        "suite": run.suite.name,
        "prompt": {"id": prompt.id, "version": prompt.version, "hash": prompt.hash},
        "model": run.model,
        "mode": run.mode,
        "verdict": outcome.status,
        "error": None if outcome.error is None else {"code": outcome.error.code, "cause": outcome.error.cause, "fix": outcome.error.fix},
        "epochs": run.epochs,
        "mean": run.mean,
        "spread": _round(run.spread),
        "baseline_mean": None if verdict is None else _round(verdict.baseline_mean),
        "mean_p_value": None if verdict is None else _round(verdict.mean_p_value),
        "tolerance": run.suite.tolerance,
        "confidence": verdict.confidence if verdict is not None else run.suite.confidence,
        **_cost_fields(*run.costs),
        **_cost_fields(*bill_costs(run.judge_billed), prefix="judge_"),
        "cost_increase": None if verdict is None or verdict.cost_increase is None else round(verdict.cost_increase, 6),
        "errored_cases": len(run.errored),
        **({"cases": list(_rows(outcome))} if cases else {}),
    }


_WRITE_CHARS = 1 << 13  # rows are written in batches of about this many characters


class _Batched:
    """Writes to `out` in batches: a row's text is a few hundred characters."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.pieces, self.size = out, [], 0

    def write(self, text: str) -> None:
        self.pieces.append(text)
        self.size += len(text)
        if self.size >= _WRITE_CHARS:
            self.flush()

    def flush(self) -> None:
        self.out.write("".join(self.pieces))
        self.pieces, self.size = [], 0


def _indented(value, depth: int) -> str:
    """`value` as `json.dumps(..., indent=2, sort_keys=True)` writes it `depth` levels down. Built
    here from the C encoder's scalars: an indented `json.dumps` runs the pure-Python encoder, whose
    closures make a reference cycle per call, left for the collector (a row each: ~100 KB waiting)."""
    if isinstance(value, dict) and value and all(isinstance(key, str) for key in value):
        inner = "\n" + "  " * (depth + 1)
        return ("{" + ",".join(inner + json.dumps(key) + ": " + _indented(value[key], depth + 1) for key in sorted(value))
                + "\n" + "  " * depth + "}")
    if isinstance(value, list | tuple) and value:
        inner = "\n" + "  " * (depth + 1)
        return "[" + ",".join(inner + _indented(item, depth + 1) for item in value) + "\n" + "  " * depth + "]"
    if isinstance(value, dict) and value:  # keys json turns into text (numbers, None): its own way
        return json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n" + "  " * depth)
    return json.dumps(value)


def write_json(outcomes: list[Outcome], out: TextIO) -> None:
    """The JSON report, written to `out` a row at a time: the text of `json.dumps(report, indent=2,
    sort_keys=True)`, never the whole report (nor a row per case) in memory."""
    out = _Batched(out)
    out.write('{\n  "format": 2,\n  "suites": ')
    for number, outcome in enumerate(outcomes):
        # the suite's summary with an empty `cases`, whose line (a top-level key of it, two spaces
        # in) is where the rows go
        head, _, tail = _indented({**summary(outcome, cases=False), "cases": []}, 2).partition('\n      "cases": [],')
        out.write(("[" if number == 0 else ",") + "\n    " + head + '\n      "cases": ')
        rows = 0
        for rows, row in enumerate(_rows(outcome), 1):
            out.write(("[" if rows == 1 else ",") + "\n        " + _indented(row, 4))
        out.write(("\n      ]" if rows else "[]") + "," + tail)
    out.write(("\n  ]" if outcomes else "[]") + "\n}\n")
    out.flush()


def to_json(outcomes: list[Outcome]) -> str:
    text = io.StringIO()
    write_json(outcomes, text)
    return text.getvalue()


def _xml(element: ElementTree.Element, open_only: bool = False) -> str:
    """An element as ElementTree writes it (its escaping is the one JUnit readers were given);
    `open_only`: its start tag alone, for an element written with its children after it."""
    from xml.etree import ElementTree

    text = ElementTree.tostring(element, encoding="unicode")
    return text.removesuffix(" />") + ">" if open_only else text


def write_junit(outcomes: list[Outcome], out: TextIO) -> None:
    """JUnit XML, written to `out` a case at a time: the text ElementTree writes for the whole tree,
    indented (`ElementTree.indent`), without building it."""
    from xml.etree import ElementTree

    out = _Batched(out)
    root = ElementTree.Element("testsuites", name="workbench eval")
    declared = ElementTree.tostring(root, encoding="unicode", xml_declaration=True)
    if not outcomes:
        out.write(declared + "\n")
        out.flush()
        return
    out.write(declared.removesuffix(" />") + ">")
    for outcome in outcomes:
        data = summary(outcome, cases=False)
        statuses = Counter(status for _, _, status in _statuses(outcome))
        mean_failed = outcome.verdict is not None and outcome.verdict.mean_failed
        suite = ElementTree.Element(
            "testsuite", name=data["suite"], tests=str(len(outcome.eval_run.results) + 1),
            failures=str(statuses["fail"] + (outcome.exit_code == 1 and mean_failed)),
            errors=str(statuses["error"] + (outcome.status == "error")),
        )
        out.write("\n  " + _xml(suite, open_only=True))
        mean = ElementTree.Element("testcase", classname=data["suite"], name="mean")
        if outcome.error is not None:
            kind = "error" if outcome.status == "error" else "failure"
            element = ElementTree.SubElement(mean, kind, type=outcome.error.code, message=outcome.error.cause)
            element.text = f"{outcome.error.cause}\nfix: {outcome.error.fix}"
        for case in itertools.chain([mean], (_junit_case(data["suite"], row) for row in _rows(outcome, excerpts=False))):
            ElementTree.indent(case, level=2)
            out.write("\n    " + _xml(case))
        out.write("\n  </testsuite>")
    out.write("\n</testsuites>\n")
    out.flush()


def _junit_case(suite: str, row: dict) -> ElementTree.Element:
    from xml.etree import ElementTree

    case = ElementTree.Element("testcase", classname=suite, name=row["case"])
    text = json.dumps({"score": row["score"], "spread": row["spread"], "samples": row["samples"],
                       "baseline": row["baseline"], "p_value": row["p_value"], "scores": row["scores"],
                       "explanations": row["explanations"]}, sort_keys=True)
    if row["status"] == "fail":
        ElementTree.SubElement(case, "failure", type="WB_EVAL_THRESHOLD",
                               message=f"{row['case']}: {row['baseline']} → {row['score']}").text = text
    elif row["status"] == "error":
        ElementTree.SubElement(case, "error", type="WB_EVAL_CASE_ERROR", message=row["error"] or "").text = text
    else:  # a passing case shows its samples too
        ElementTree.SubElement(case, "system-out").text = text
    return case


def to_junit(outcomes: list[Outcome]) -> str:
    text = io.StringIO()
    write_junit(outcomes, text)
    return text.getvalue()


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def _spread(value) -> str:
    return "" if value is None else f"±{value:.2f}"


def _samples(values: list) -> str:
    return " ".join("err" if value is None else f"{value:.2f}" for value in values)


def _mean_line(data: dict) -> str:
    mean = "no score" if data["mean"] is None else f"{data['mean']:.4f}" + (
        f" ±{data['spread']:.4f}" if data["spread"] is not None else "")
    return mean


def to_markdown(outcomes: list[Outcome]) -> str:
    lines = ["# Workbench eval", ""]
    for outcome in outcomes:
        data = summary(outcome)
        icon = {"pass": "✅", "regression": "❌", "recorded": "📝", "error": "⚠️"}[data["verdict"]]
        sampled = data["epochs"] > 1
        lines += [
            f"## {icon} {data['suite']} — {STATUS_TEXT[data['verdict']]}",
            "",
            f"Prompt `{data['prompt']['id']}@{data['prompt']['version']}` (`{data['prompt']['hash'][:20]}…`), "
            f"model `{data['model']}`, mode {data['mode']}"
            + (f", {data['epochs']} samples a case (confidence {data['confidence']})" if sampled else "")
            + f". Mean **{_mean_line(data)}** (baseline {_fmt(data['baseline_mean'])}, "
            f"tolerance {data['tolerance']}). Cost {cost_text(data)}"
            + (f" (judges {cost_text(data, 'judge_')})" if data["judge_costs"] or data["judge_unpriced_calls"] else "")
            + ".",
            "",
        ]
        if outcome.error is not None:
            lines += [f"> **{outcome.error.code}**: {outcome.error.cause}", ">", f"> fix: {outcome.error.fix}", ""]
        moved = [row for row in data["cases"] if row["delta"] not in (None, 0) or row["status"] in ("error", "fail")]
        shown = moved if data["verdict"] != "recorded" else data["cases"]
        if shown:
            head = ["case"] + (["samples", "mean", "±"] if sampled else ["score"]) + ["baseline", "Δ", "cost", "status"]
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for row in shown:
                delta = "—" if row["delta"] is None else f"{row['delta']:+.2f}"
                scores = [_samples(row["samples"]), _fmt(row["score"]), _spread(row["spread"])] if sampled else [_fmt(row["score"])]
                lines.append("| " + " | ".join([row["case"], *scores, _fmt(row["baseline"]), delta,
                                                cost_text(row, exact=True), row["status"]]) + " |")
            lines.append("")
        else:
            lines += [f"All {len(data['cases'])} cases scored as in the baseline.", ""]
    return "\n".join(lines)


CONSOLE_ALL_CASES = 50  # up to this many cases the console lists every one


def print_console(outcomes: list[Outcome], console: Console) -> None:
    for outcome in outcomes:
        data = summary(outcome, cases=False)
        sampled = data["epochs"] > 1
        table = Table(title=f"{data['suite']} — {data['prompt']['id']}@{data['prompt']['version']} ({data['mode']}"
                            + (f", {data['epochs']} samples a case" if sampled else "") + ")")
        names = ["case"] + (["samples", "mean", "±"] if sampled else ["score"]) + ["baseline", "Δ", "cost", "status"]
        for name in names:
            table.add_column(name, justify="left" if name in {"case", "status", "samples"} else "right")
        cases = len(outcome.eval_run.results)
        # a long suite: the cases that moved, failed or errored, then a count
        rows = list(_rows(outcome, moved_only=cases > CONSOLE_ALL_CASES))
        for row in rows:
            style = {"fail": "red", "error": "red", "pass": "green"}.get(row["status"], "")
            scores = [_samples(row["samples"]), _fmt(row["score"]), _spread(row["spread"])] if sampled else [_fmt(row["score"])]
            table.add_row(
                Text(row["case"]), *scores, _fmt(row["baseline"]),
                "" if row["delta"] is None else f"{row['delta']:+.2f}", cost_text(row, exact=True),
                Text(row["status"], style=style),
            )
        if rows:
            console.print(table)
        if len(rows) < cases:
            what = "recorded" if data["verdict"] == "recorded" else "scored as in the baseline"
            console.print(f"{cases - len(rows)} of {cases} cases {what} "
                          f"(not listed; every case is in --json and --junit)")
        console.print(Text.assemble(
            f"mean {_mean_line(data)}" + (f" vs baseline {data['baseline_mean']:.4f}" if data["baseline_mean"] is not None else "")
            + f", cost {cost_text(data)}"
            + (f" (judges {cost_text(data, 'judge_')})" if data["judge_costs"] or data["judge_unpriced_calls"] else "")
            + ", verdict ", (STATUS_TEXT[data["verdict"]], "bold"),
        ))
