"""Every rule of the gate, through the `workbench eval` command a CI pipeline runs."""

from __future__ import annotations

import json

from eval_support import set_answers, workbench_cli


def test_a_run_equal_to_its_baseline_passes(project):
    root = project()
    assert workbench_cli(root, "eval", "--record-baseline").returncode == 0
    result = workbench_cli(root, "eval")
    assert result.returncode == 0, result.stderr
    assert "pass" in result.stdout


def test_one_case_collapsing_while_the_mean_holds_fails(project):
    root = project(cases=40)
    workbench_cli(root, "eval", "--record-baseline")
    answers = {f"c{i}": "ok" for i in range(40)}
    answers["c7"] = "wrong"  # mean drops 0.025 (< 0.05 tolerance); the case drops 1.0
    set_answers(root, answers)
    result = workbench_cli(root, "eval")
    assert result.returncode == 1
    assert "WB_EVAL_THRESHOLD" in result.stderr
    assert "c7 1.00→0.00" in result.stderr and "sorter@v1" in result.stderr and "tolerance 0.05" in result.stderr
    assert "--record-baseline" in result.stderr  # the fix command


def test_a_mean_drop_past_tolerance_names_score_baseline_and_hash(project):
    root = project(cases=10)
    workbench_cli(root, "eval", "--record-baseline")
    set_answers(root, {f"c{i}": "ok" if i < 5 else "no" for i in range(10)})
    result = workbench_cli(root, "eval")
    assert result.returncode == 1
    baseline = json.loads((root / "evals" / "sorter.baseline.json").read_text())
    assert "mean score 0.5000 vs baseline 1.0000" in result.stderr
    assert baseline["prompt"]["hash"][:20] in result.stderr
    for case in ("c5", "c6", "c7", "c8", "c9"):
        assert case in result.stderr


def test_a_missing_baseline_is_exit_2(project):
    root = project()
    result = workbench_cli(root, "eval")
    assert result.returncode == 2
    assert "WB_EVAL_BASELINE_MISSING" in result.stderr and "Traceback" not in result.stderr


def test_a_corrupt_baseline_is_exit_2(project):
    root = project()
    workbench_cli(root, "eval", "--record-baseline")
    (root / "evals" / "sorter.baseline.json").write_text("{ not json")
    result = workbench_cli(root, "eval")
    assert result.returncode == 2 and "WB_EVAL_BASELINE_INVALID" in result.stderr


def test_a_baseline_of_the_wrong_shape_is_exit_2(project):
    root = project()
    workbench_cli(root, "eval", "--record-baseline")
    path = root / "evals" / "sorter.baseline.json"
    data = json.loads(path.read_text())
    data["cases"] = {"c0": {"score": "high"}}
    path.write_text(json.dumps(data))
    result = workbench_cli(root, "eval")
    assert result.returncode == 2 and "WB_EVAL_BASELINE_INVALID" in result.stderr and "cases.c0.score" in result.stderr


def test_a_baseline_missing_a_case_cannot_judge(project):
    root = project()
    workbench_cli(root, "eval", "--record-baseline")
    path = root / "evals" / "sorter.baseline.json"
    data = json.loads(path.read_text())
    del data["cases"]["c3"]
    path.write_text(json.dumps(data))
    result = workbench_cli(root, "eval")
    assert result.returncode == 2 and "new cases not in the baseline: c3" in result.stderr


def test_the_record_flag_with_the_gate_runs_nothing_and_writes_nothing(project):
    root = project()
    workbench_cli(root, "eval", "--record-baseline")
    path = root / "evals" / "sorter.baseline.json"
    before = path.read_bytes()
    set_answers(root, {f"c{i}": "changed" for i in range(20)})
    result = workbench_cli(root, "eval", env={"WORKBENCH_EVAL_RECORD": "1"})
    assert result.returncode == 2 and "WB_EVAL_RECORDING" in result.stderr
    assert path.read_bytes() == before
    assert not (root / "wb.duckdb").exists() or "eval_run" not in result.stdout


def test_record_baseline_writes_a_stable_reviewable_file(project):
    root = project(cases=3)
    workbench_cli(root, "eval", "--record-baseline")
    text = (root / "evals" / "sorter.baseline.json").read_text()
    lines = text.splitlines()
    assert lines[-5:-2] == [
        '    "c0": {"cost_micros": 0, "score": 1.0},',
        '    "c1": {"cost_micros": 0, "score": 1.0},',
        '    "c2": {"cost_micros": 0, "score": 1.0}',
    ]
    workbench_cli(root, "eval", "--record-baseline")
    assert (root / "evals" / "sorter.baseline.json").read_text() == text


def test_reports_are_written_and_identical_across_replays(project):
    root = project(cases=5)
    workbench_cli(root, "eval", "--record-baseline")
    outputs = []
    for attempt in range(2):
        folder = root / f"out{attempt}"
        result = workbench_cli(
            root, "eval", "--junit", str(folder / "j.xml"), "--markdown", str(folder / "m.md"), "--json", str(folder / "r.json")
        )
        assert result.returncode == 0, result.stderr
        outputs.append([(folder / name).read_bytes() for name in ("j.xml", "m.md", "r.json")])
    assert outputs[0] == outputs[1]
    report = json.loads(outputs[0][2])
    assert report["suites"][0]["verdict"] == "pass" and len(report["suites"][0]["cases"]) == 5
    assert b"<testsuite" in outputs[0][0] and b"sorter" in outputs[0][1]
