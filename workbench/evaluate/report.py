"""Reports of an eval: a rich console table, JUnit XML, Markdown (fits `$GITHUB_STEP_SUMMARY`) and
JSON. They hold no times and no random ids, so replaying a suite twice gives the same bytes."""

from __future__ import annotations

import json
from xml.etree import ElementTree

from rich.console import Console
from rich.table import Table
from rich.text import Text

from workbench.evaluate.gate import Outcome
from workbench.evaluate.scorers import as_text
from workbench.money import format_amount, format_exact


def _rows(outcome: Outcome) -> list[dict]:
    verdicts = {case.case_id: case for case in outcome.verdict.cases} if outcome.verdict else {}
    rows = []
    for result in outcome.eval_run.results:
        verdict = verdicts.get(result.case_id)
        status = "error" if result.error else ("recorded" if verdict is None else ("fail" if verdict.failed else "pass"))
        rows.append({
            "case": result.case_id,
            "score": round(result.score, 6),
            "baseline": None if verdict is None else verdict.baseline,
            "delta": None if verdict is None else round(verdict.delta, 6),
            "cost_micros": result.cost_micros,
            "status": status,
            "scores": {name: score.value if score.value is not None else score.label for name, score in result.scores.items()},
            "explanations": {name: score.explanation for name, score in result.scores.items() if score.explanation},
            "output": None if result.output is None else as_text(result.output)[:500],
            "error": f"{result.error.code}: {result.error.cause}" if result.error else None,
        })
    return rows


def summary(outcome: Outcome) -> dict:
    run, prompt = outcome.eval_run, outcome.eval_run.prompt
    verdict = outcome.verdict
    return {
        "suite": run.suite.name,
        "prompt": {"id": prompt.id, "version": prompt.version, "hash": prompt.hash},
        "mode": run.mode,
        "verdict": "recorded" if verdict is None else ("pass" if outcome.error is None else "regression"),
        "error": None if outcome.error is None else {"code": outcome.error.code, "cause": outcome.error.cause, "fix": outcome.error.fix},
        "mean": round(run.mean, 6),
        "baseline_mean": None if verdict is None else verdict.baseline_mean,
        "tolerance": run.suite.tolerance,
        "cost_micros": run.cost_micros,
        "judge_cost_micros": run.judge_cost_micros,
        "cost_increase": None if verdict is None or verdict.cost_increase is None else round(verdict.cost_increase, 6),
        "cases": _rows(outcome),
    }


def to_json(outcomes: list[Outcome]) -> str:
    return json.dumps({"format": 1, "suites": [summary(outcome) for outcome in outcomes]}, indent=2, sort_keys=True) + "\n"


def to_junit(outcomes: list[Outcome]) -> str:
    root = ElementTree.Element("testsuites", name="workbench eval")
    for outcome in outcomes:
        data = summary(outcome)
        rows = data["cases"]
        suite = ElementTree.SubElement(
            root, "testsuite", name=data["suite"], tests=str(len(rows) + 1),
            failures=str(sum(row["status"] == "fail" for row in rows) + (outcome.error is not None and outcome.verdict is not None and outcome.verdict.mean_failed)),
            errors=str(sum(row["status"] == "error" for row in rows)),
        )
        mean = ElementTree.SubElement(suite, "testcase", classname=data["suite"], name="mean")
        if outcome.error is not None:
            failure = ElementTree.SubElement(mean, "failure", type=outcome.error.code, message=outcome.error.cause)
            failure.text = f"{outcome.error.cause}\nfix: {outcome.error.fix}"
        for row in rows:
            case = ElementTree.SubElement(suite, "testcase", classname=data["suite"], name=row["case"])
            text = json.dumps({"score": row["score"], "baseline": row["baseline"], "scores": row["scores"],
                               "explanations": row["explanations"]}, sort_keys=True)
            if row["status"] == "fail":
                ElementTree.SubElement(case, "failure", type="WB_EVAL_THRESHOLD",
                                       message=f"{row['case']}: {row['baseline']} → {row['score']}").text = text
            elif row["status"] == "error":
                ElementTree.SubElement(case, "failure", type="case_error", message=row["error"] or "").text = text
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def to_markdown(outcomes: list[Outcome]) -> str:
    lines = ["# Workbench eval", ""]
    for outcome in outcomes:
        data = summary(outcome)
        icon = {"pass": "✅", "regression": "❌", "recorded": "📝"}[data["verdict"]]
        lines += [
            f"## {icon} {data['suite']} — {data['verdict']}",
            "",
            f"Prompt `{data['prompt']['id']}@{data['prompt']['version']}` (`{data['prompt']['hash'][:20]}…`), "
            f"mode {data['mode']}. Mean **{data['mean']:.4f}** (baseline {_fmt(data['baseline_mean'])}, "
            f"tolerance {data['tolerance']}). Cost {format_amount(data['cost_micros'])}"
            + (f" (judges {format_amount(data['judge_cost_micros'])})" if data["judge_cost_micros"] else "") + ".",
            "",
        ]
        if outcome.error is not None:
            lines += [f"> **{outcome.error.code}**: {outcome.error.cause}", ">", f"> fix: {outcome.error.fix}", ""]
        moved = [row for row in data["cases"] if row["delta"] not in (None, 0)]
        shown = moved if data["verdict"] != "recorded" else data["cases"]
        if shown:
            lines += ["| case | score | baseline | Δ | cost | status |", "|---|---|---|---|---|---|"]
            for row in shown:
                delta = "—" if row["delta"] is None else f"{row['delta']:+.2f}"
                lines.append(
                    f"| {row['case']} | {row['score']:.2f} | {_fmt(row['baseline'])} | {delta} | "
                    f"{format_exact(row['cost_micros'])} | {row['status']} |"
                )
            lines.append("")
        else:
            lines += [f"All {len(data['cases'])} cases scored as in the baseline.", ""]
    return "\n".join(lines)


CONSOLE_ALL_CASES = 50  # up to this many cases the console lists every one


def print_console(outcomes: list[Outcome], console: Console) -> None:
    for outcome in outcomes:
        data = summary(outcome)
        table = Table(title=f"{data['suite']} — {data['prompt']['id']}@{data['prompt']['version']} ({data['mode']})")
        for name in ("case", "score", "baseline", "Δ", "cost", "status"):
            table.add_column(name, justify="left" if name in {"case", "status"} else "right")
        rows = data["cases"]
        if len(rows) > CONSOLE_ALL_CASES:  # a long suite: the cases that moved or failed, then a count
            rows = [row for row in rows if row["status"] in ("fail", "error") or row["delta"] not in (None, 0)]
        for row in rows:
            style = {"fail": "red", "error": "red", "pass": "green"}.get(row["status"], "")
            table.add_row(
                row["case"], f"{row['score']:.2f}", _fmt(row["baseline"]),
                "" if row["delta"] is None else f"{row['delta']:+.2f}", format_exact(row["cost_micros"]),
                Text(row["status"], style=style),
            )
        if rows:
            console.print(table)
        if len(rows) < len(data["cases"]):
            what = "recorded" if data["verdict"] == "recorded" else "scored as in the baseline"
            console.print(f"{len(data['cases']) - len(rows)} of {len(data['cases'])} cases {what} "
                          f"(not listed; every case is in --json and --junit)")
        console.print(Text.assemble(
            f"mean {data['mean']:.4f}" + (f" vs baseline {data['baseline_mean']:.4f}" if data["baseline_mean"] is not None else "")
            + f", cost {format_amount(data['cost_micros'])}, verdict ", (data["verdict"], "bold"),
        ))
