"""A case's samples reach the spool as the case ends, outputs included, so the eval holds no output
text: a killed eval leaves every case it finished in the store, under a run with no verdict; and
the reports that show the outputs (`--json`, `--junit`) read them back a case at a time, writing the
same bytes as the whole report built at once."""

from __future__ import annotations

import json
import signal
from xml.etree import ElementTree

import pytest

from eval_support import dedent, workbench_cli
from workbench.evaluate import define_eval, define_prompt, exact
from workbench.evaluate.gate import evaluate
from workbench.evaluate.report import summary, to_json, to_junit, write_json, write_junit
from workbench.evaluate.scorers import Score

ODD = 'a<b & "c" \'d\'\n\té ✓ \u2028 ]]>'  # what XML and JSON must escape, and text beyond ASCII


def _outcomes(tmp_path) -> list:
    """Outcomes of every kind the reports show: recorded with two epochs, a regression (a case
    failed, one moved), a run with no verdict (a case in error), and one case whose answer is long."""
    answers = {f"c{n}": "ok" for n in range(12)}

    async def target(vars, ctx):
        answer = answers[vars["key"]]
        if answer == "raise":
            raise ValueError(f"broke on {ODD}")
        return {"answer": answer, "note": ODD * (200 if vars["key"] == "c7" else 1)}

    def tone(context):
        return Score(None, label="calm", explanation=f"case {context.case_id}: {ODD}")

    def suite(name: str, epochs: int = 1):
        prompt = define_prompt(name, "v1", template="{{key}}")
        cases = [{"id": f"c{n}" + (ODD if n == 3 else ""), "vars": {"key": f"c{n}"}, "expected": "ok"} for n in range(12)]
        return define_eval(name, prompt, cases, [exact("answer"), tone], target=target, epochs=epochs,
                           baseline=tmp_path / f"{name}.baseline.json", cassette=tmp_path / f"{name}.json")

    recorded = evaluate(suite("rec", epochs=2), mode="replay", record_baseline=True)
    gated = suite("gate")
    assert evaluate(gated, mode="replay", record_baseline=True).recorded
    answers["c2"] = "no"
    regression = evaluate(gated, mode="replay")
    answers["c5"] = "raise"
    no_verdict = evaluate(gated, mode="replay")
    assert [recorded.status, regression.status, no_verdict.status] == ["recorded", "regression", "error"]
    return [recorded, regression, no_verdict]


def _junit_tree(outcomes) -> str:
    """The JUnit report built as one ElementTree and indented whole: how `to_junit` wrote it before
    it streamed, kept here as what the streamed text must equal byte for byte."""
    root = ElementTree.Element("testsuites", name="workbench eval")
    for outcome in outcomes:
        data = summary(outcome)
        rows = data["cases"]
        mean_failed = outcome.verdict is not None and outcome.verdict.mean_failed
        suite = ElementTree.SubElement(
            root, "testsuite", name=data["suite"], tests=str(len(rows) + 1),
            failures=str(sum(row["status"] == "fail" for row in rows) + (outcome.exit_code == 1 and mean_failed)),
            errors=str(sum(row["status"] == "error" for row in rows) + (outcome.status == "error")),
        )
        mean = ElementTree.SubElement(suite, "testcase", classname=data["suite"], name="mean")
        if outcome.error is not None:
            kind = "error" if outcome.status == "error" else "failure"
            element = ElementTree.SubElement(mean, kind, type=outcome.error.code, message=outcome.error.cause)
            element.text = f"{outcome.error.cause}\nfix: {outcome.error.fix}"
        for row in rows:
            case = ElementTree.SubElement(suite, "testcase", classname=data["suite"], name=row["case"])
            text = json.dumps({"score": row["score"], "spread": row["spread"], "samples": row["samples"],
                               "baseline": row["baseline"], "p_value": row["p_value"], "scores": row["scores"],
                               "explanations": row["explanations"]}, sort_keys=True)
            if row["status"] == "fail":
                ElementTree.SubElement(case, "failure", type="WB_EVAL_THRESHOLD",
                                       message=f"{row['case']}: {row['baseline']} → {row['score']}").text = text
            elif row["status"] == "error":
                ElementTree.SubElement(case, "error", type="WB_EVAL_CASE_ERROR", message=row["error"] or "").text = text
            else:
                ElementTree.SubElement(case, "system-out").text = text
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def test_the_streamed_json_and_junit_are_the_bytes_of_the_whole_report(tmp_path, store):
    outcomes = _outcomes(tmp_path)
    for chosen in ([], outcomes[:1], outcomes[1:2], outcomes[2:], outcomes):
        whole = json.dumps({"format": 2, "suites": [summary(outcome) for outcome in chosen]}, indent=2, sort_keys=True)
        assert to_json(chosen) == whole + "\n"
        assert to_junit(chosen) == _junit_tree(chosen)
    report = json.loads(to_json(outcomes))
    long = next(row for row in report["suites"][1]["cases"] if row["case"] == "c7")
    assert long["output"] == json.dumps({"answer": "ok", "note": ODD * 200}, sort_keys=True, ensure_ascii=False)[:500]
    failed = ElementTree.fromstring(to_junit(outcomes).encode())
    # a regression: the case and the mean failed; no verdict: the case and the mean in error
    assert [(suite.get("failures"), suite.get("errors")) for suite in failed] == [("0", "0"), ("2", "0"), ("0", "2")]


@pytest.mark.parametrize("value", [
    {}, [], (), {"a": {}, "b": [], "c": [{}], "d": [[1, 2.5, None]], "e": {"z": True, "y": False}},
    {"f": float("nan"), "g": float("inf"), "h": -0.0, "i": 1e300, "j": 10**30, ODD: ODD, "\ud800": "\udfff"},
    {1: "a", 2: "b"}, [ODD, {"k": [{"l": {}}]}], "text", 7, None,
])
def test_a_value_is_indented_as_json_dumps_indents_it(value):
    from workbench.evaluate.report import _indented

    for depth in (0, 3):
        assert _indented(value, depth) == json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n" + "  " * depth)


def test_the_cli_writes_the_streamed_reports_to_files(project):
    root = project(5)
    result = workbench_cli(root, "eval", "--record-baseline", "--junit", "out/j.xml", "--json", "out/r.json")
    assert result.returncode == 0, result.stderr
    report = json.loads((root / "out" / "r.json").read_text())
    assert [row["case"] for row in report["suites"][0]["cases"]] == [f"c{n}" for n in range(5)]
    assert [row["output"] for row in report["suites"][0]["cases"]] == ["ok"] * 5
    junit = ElementTree.parse(root / "out" / "j.xml").getroot()
    assert [case.get("name") for case in junit.iter("testcase")] == ["mean"] + [f"c{n}" for n in range(5)]


KILLED_SUITE = '''
import json, os, signal, time
from workbench.config import settings
from workbench.evaluate import define_eval, define_prompt, exact

def spooled_samples():
    found = set()
    for path in settings().resolved_spool_dir.glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            record = json.loads(line)
            if record["kind"] == "eval_sample":
                found.add(record["row"]["case_id"])
    return found

def target(vars, ctx):
    if vars["key"] == "c30":
        # the 30 cases before this one are done: once their samples are in the spool (as each case
        # ended, not at the end of the run), the eval is killed, as by the OOM killer or a CI timeout
        deadline = time.monotonic() + 60
        while len(spooled_samples()) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    return {"answer": "ok", "text": vars["key"] * 100}

define_eval("killed", define_prompt("killed", "v1", template="{{key}}"),
            [{"id": f"c{n}", "vars": {"key": f"c{n}"}, "expected": "ok"} for n in range(60)],
            [exact("answer")], target=target, concurrency=1)
'''


def test_a_killed_eval_leaves_every_finished_case_in_the_store_under_a_run_with_no_verdict(tmp_path):
    from workbench.config import spool_dir_of
    from workbench.store.db import open_store
    from workbench.store.ingest import ingest_spools

    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "killed.py").write_text(dedent(KILLED_SUITE))
    result = workbench_cli(tmp_path, "eval", "--record-baseline")
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert not (tmp_path / "evals" / "killed.baseline.json").exists()
    db = tmp_path / "wb.duckdb"
    ingest_spools(db, spool_dir_of(db))
    with open_store(db, read_only=True) as con:
        [(eval_run_id, verdict, ended, cases)] = con.execute(
            "SELECT eval_run_id, verdict, ended_at, cases FROM eval_runs WHERE suite = 'killed'").fetchall()
        samples = con.execute("SELECT case_id, score, output FROM eval_samples WHERE eval_run_id = ? ORDER BY epoch",
                              [eval_run_id]).fetchall()
    assert (verdict, ended, cases) == ("error", None, 60)  # no verdict, never ended: the run was killed
    finished = {case_id: (score, output) for case_id, score, output in samples}
    assert set(finished) >= {f"c{n}" for n in range(30)} and "c30" not in finished
    for case_id, (score, output) in finished.items():
        assert score == 1.0 and json.loads(output) == {"answer": "ok", "text": case_id * 100}


@pytest.mark.parametrize("stream", [write_json, write_junit], ids=["json", "junit"])
def test_a_report_of_a_suite_with_long_outputs_reads_them_back_one_case_at_a_time(tmp_path, store, stream):
    """The outputs are not held by the run: a report that shows them reads each back as it writes
    its row, so what it holds while writing stays a batch of rows, whatever the suite's size."""
    import gc
    import tracemalloc

    async def target(vars, ctx):
        return {"answer": "ok", "long": vars["key"] * 2000}

    prompt = define_prompt("longreport", "v1", template="{{key}}")
    suite = define_eval("longreport", prompt,
                        [{"id": f"c{n}", "vars": {"key": f"c{n}"}, "expected": "ok"} for n in range(1500)],
                        [exact("answer")], target=target, baseline=tmp_path / "b.json", cassette=tmp_path / "c.json")
    outcome = evaluate(suite, mode="replay", record_baseline=True)
    report_only = [tracemalloc.Filter(True, "*/workbench/evaluate/*", all_frames=True)]
    held, size = [], [0]

    class Watched:
        def write(self, text: str) -> None:
            size[0] += len(text)
            snapshot = tracemalloc.take_snapshot().filter_traces(report_only)
            held.append(sum(stat.size for stat in snapshot.statistics("filename")))

    gc.collect()
    tracemalloc.start(30)
    try:
        stream([outcome], Watched())
    finally:
        tracemalloc.stop()
    assert size[0] > (700_000 if stream is write_json else 300_000) and len(held) > 10
    assert max(held) < 200_000, max(held)  # a batch of rows (8 K characters) and a case's output
