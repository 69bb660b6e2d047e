"""`workbench eval` as one function: refuse to gate while recording is asked for, read the baseline
before running anything, run, then record the baseline or judge the drop."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from workbench.config import RecordMode
from workbench.errors import WorkbenchError
from workbench.evaluate.baseline import Baseline, PromptRef, Verdict, judge, read_baseline, write_baseline
from workbench.evaluate.baseline import CaseBaseline
from workbench.evaluate.runner import EvalRun, Network, run_suite, store_eval_run
from workbench.evaluate.suite import Suite

RECORD_ENV = "WORKBENCH_EVAL_RECORD"


@dataclass
class Outcome:
    eval_run: EvalRun
    baseline: Baseline | None
    verdict: Verdict | None  # None when a baseline was recorded
    error: WorkbenchError | None  # the regression, when the gate failed

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code


def recording_requested() -> bool:
    return os.environ.get(RECORD_ENV, "").strip().lower() in {"1", "true", "yes"}


def evaluate(
    suite: Suite,
    mode: RecordMode | None = None,
    prompt_version: str | None = None,
    record_baseline: bool = False,
    max_cost_increase: float | None = None,
    progress=None,
    network: Network | None = None,
) -> Outcome:
    if not record_baseline and recording_requested():
        raise WorkbenchError(
            "WB_EVAL_RECORDING",
            f"{RECORD_ENV}=1 is set, and the gate never records: suite {suite.name} was not run",
            f"unset {RECORD_ENV} to gate, or run `workbench eval {suite.name} --record-baseline` to record",
        )
    baseline = None if record_baseline else read_baseline(suite.baseline_path, suite.name)
    eval_run = asyncio.run(run_suite(suite, mode, prompt_version, progress, network))
    if record_baseline:
        write_baseline(suite.baseline_path, baseline_of(eval_run))
        store_eval_run(eval_run, "recorded")
        return Outcome(eval_run, None, None, None)
    verdict = judge(
        suite.name, {result.case_id: result.score for result in eval_run.results},
        {result.case_id: result.cost_micros for result in eval_run.results}, baseline, suite.tolerance,
        max_cost_increase,
    )
    error = regression_of(eval_run, verdict, max_cost_increase)
    store_eval_run(eval_run, "pass" if error is None else "regression", baseline, error.code if error else None)
    return Outcome(eval_run, baseline, verdict, error)


def baseline_of(eval_run: EvalRun) -> Baseline:
    prompt = eval_run.prompt
    return Baseline(
        format=1, suite=eval_run.suite.name, prompt=PromptRef(id=prompt.id, version=prompt.version, hash=prompt.hash),
        scorers=[scorer.name for scorer in eval_run.suite.scorers], tolerance=eval_run.suite.tolerance,
        mean=round(eval_run.mean, 6), cost_micros=eval_run.cost_micros,
        cases={
            result.case_id: CaseBaseline(score=round(result.score, 6), cost_micros=result.cost_micros)
            for result in eval_run.results
        },
    )


def regression_of(eval_run: EvalRun, verdict: Verdict, max_cost_increase: float | None) -> WorkbenchError | None:
    if verdict.passed:
        return None
    prompt = eval_run.prompt
    moved = ", ".join(
        f"{case.case_id} {case.baseline:.2f}→{case.score:.2f}{' (dropped past tolerance)' if case.failed else ''}"
        for case in verdict.moved
    ) or "none"
    where = f"prompt {prompt.id}@{prompt.version} ({prompt.hash[:20]}…)"
    fix = (
        f"fix the prompt or the app, or accept the new numbers: workbench eval {eval_run.suite.name} "
        f"--record-baseline, and commit {eval_run.suite.baseline_path.name}"
    )
    if verdict.mean_failed or any(case.failed for case in verdict.cases):
        return WorkbenchError(
            "WB_EVAL_THRESHOLD",
            f"suite {eval_run.suite.name}: mean score {verdict.mean:.4f} vs baseline {verdict.baseline_mean:.4f} "
            f"(drop {verdict.baseline_mean - verdict.mean:+.4f}, tolerance {verdict.tolerance}); {where}; "
            f"moved cases: {moved}",
            fix,
        )
    increase = "not comparable (a call was unpriced)" if verdict.cost_increase is None else f"{verdict.cost_increase:+.1%}"
    return WorkbenchError(
        "WB_EVAL_COST",
        f"suite {eval_run.suite.name}: cost per case changed {increase} against the baseline, "
        f"over --max-cost-increase {max_cost_increase:.0%}; {where}",
        fix,
    )
