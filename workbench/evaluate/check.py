"""`workbench check`: every prompt named by an eval, no released prompt changed, every suite with
cases and a valid baseline, every cassette clean. Returns every problem, not just the first."""

from __future__ import annotations

from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.evaluate.baseline import read_baseline
from workbench.evaluate.prompts import check_lock, prompts
from workbench.evaluate.suite import load_suites, require_cases
from workbench.replay.check import cassette_files, check as check_cassettes


def check_project(evals_dir: Path, lock_path: Path, cassettes_dir: Path) -> list[WorkbenchError]:
    problems: list[WorkbenchError] = []
    suites = load_suites([evals_dir]) if evals_dir.exists() else {}
    if not suites and not prompts.all() and not lock_path.exists() and not (
            cassettes_dir.exists() and cassette_files(cassettes_dir)):
        return [WorkbenchError(  # a check of nothing must not read as a pass
            "WB_CHECK_EMPTY", f"nothing to check: no eval suite under {evals_dir}, no {lock_path}, "
            f"no cassette under {cassettes_dir}",
            "run it in your project's folder, or name the folders: workbench check --evals DIR --cassettes DIR",
        )]
    named_ids = {suite.prompt.id for suite in suites.values()} | {
        scorer.prompt.id for suite in suites.values() for scorer in suite.scorers if scorer.prompt is not None
    }
    for prompt in prompts.all():
        if prompt.id not in named_ids:
            problems.append(WorkbenchError(
                "WB_EVAL_MISSING",
                f"prompt {prompt.id} (version {prompt.version}) is declared but no eval suite names it",
                f"add a suite: define_eval('{prompt.id}', prompt=..., cases=..., scorers=...) under {evals_dir}",
            ))
    problems += check_lock(prompts.all(), lock_path)
    for suite in suites.values():
        for check in (require_cases, lambda suite: read_baseline(suite.baseline_path, suite.name)):
            try:
                check(suite)
            except WorkbenchError as exc:
                problems.append(exc)
    if cassettes_dir.exists():
        for report in check_cassettes(cassettes_dir):
            if report.error is not None:
                problems.append(report.error)
            elif report.secrets:
                problems.append(WorkbenchError(
                    "WB_CASSETTE_SECRET", f"{report.path}: {report.secrets[0]}",
                    f"re-record {report.path} (Workbench scrubs secrets when it records), or remove the value",
                ))
    return problems
