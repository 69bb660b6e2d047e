"""`workbench eval` as one function: refuse to gate while recording is asked for, refuse a released
prompt whose content moved, refuse a suite with no cases, read the baseline before running anything,
run, then record the baseline or judge the drop. Nothing is recorded and nothing passes when a case
could not be judged."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from workbench.config import RecordMode
from workbench.errors import WorkbenchError
from workbench.evaluate.baseline import (
    Baseline, CaseBaseline, CostChange, PromptRef, Verdict, baseline_costs, in_currency, judge, one_cost,
    read_baseline, write_baseline,
)
from workbench.evaluate.prompts import check_lock, prompts
from workbench.evaluate.runner import EvalRun, Network, run_suite, store_eval_run
from workbench.evaluate.suite import Suite, check_confidence, require_cases

RECORD_ENV = "WORKBENCH_EVAL_RECORD"
LOCK_FILE = "prompts.lock"  # beside the suite files: the released prompts' hashes
LISTED = 10  # cases named in an error message before "and N more"


@dataclass
class Outcome:
    eval_run: EvalRun
    baseline: Baseline | None
    verdict: Verdict | None  # None when a baseline was recorded, or when there is no verdict
    error: WorkbenchError | None  # the regression, or what left the suite without a verdict
    recorded: bool = False

    @property
    def exit_code(self) -> int:
        return 0 if self.error is None else self.error.exit_code

    @property
    def status(self) -> str:
        """pass, regression, recorded, or error (no verdict: something could not be judged)."""
        if self.error is not None:
            return "regression" if self.error.exit_code == 1 else "error"
        return "recorded" if self.recorded else "pass"


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
    epochs: int | None = None,
    confidence: float | None = None,
) -> Outcome:
    if not record_baseline and recording_requested():
        raise WorkbenchError(
            "WB_EVAL_RECORDING",
            f"{RECORD_ENV}=1 is set, and the gate never records: suite {suite.name} was not run",
            f"unset {RECORD_ENV} to gate, or run `workbench eval {suite.name} --record-baseline` to record",
        )
    confidence = check_confidence(confidence, "--confidence") if confidence is not None else suite.confidence
    check_released(suite, prompt_version)
    require_cases(suite)
    baseline = None if record_baseline else read_baseline(suite.baseline_path, suite.name)
    eval_run = asyncio.run(run_suite(suite, mode, prompt_version, progress, network, epochs))
    errored = eval_run.errored
    if record_baseline:
        if errored:  # an errored case is never a baseline's number
            error = errored_error(eval_run, "cannot record a baseline from a run with cases in error")
            store_eval_run(eval_run, "error", error_code=error.code)
            return Outcome(eval_run, None, None, error)
        write_baseline(suite.baseline_path, baseline_of(eval_run))
        store_eval_run(eval_run, "recorded")
        return Outcome(eval_run, None, None, None, recorded=True)
    if errored and not (suite.errors_are_failures and all(result.target_failed for result in errored)):
        error = errored_error(eval_run, "there is no verdict")
        store_eval_run(eval_run, "error", error_code=error.code)
        return Outcome(eval_run, baseline, None, error)
    verdict = judge(
        suite.name, {result.case_id: result.values for result in eval_run.judged},
        {result.case_id: result.costs for result in eval_run.results}, baseline, suite.tolerance,
        max_cost_increase, confidence, errors={result.case_id: _describe(result.error) for result in errored},
        epochs=eval_run.epochs,
    )
    error = regression_of(eval_run, verdict, max_cost_increase)
    status = "pass" if error is None else "regression" if error.exit_code == 1 else "error"
    store_eval_run(eval_run, status, verdict, error.code if error else None)
    return Outcome(eval_run, baseline, verdict, error)


def check_released(suite: Suite, prompt_version: str | None = None) -> None:
    """The lock check of `workbench check`, for what this run would use: a released prompt (the
    suite's, the version asked for, a judge's) whose content moved is refused before anything runs,
    so a CI that only runs the gate cannot be fooled."""
    used = [suite.prompt if prompt_version is None else prompts.get(suite.prompt.id, prompt_version)]
    used += [scorer.prompt for scorer in suite.scorers if scorer.prompt is not None]
    moved = check_lock(used, suite.file.parent / LOCK_FILE)
    if moved:
        raise moved[0]


def _describe(error: WorkbenchError) -> str:
    return f"{error.code}: {error.cause}"


def _named(case_ids: list[str]) -> str:
    shown = ", ".join(case_ids[:LISTED])
    return shown + (f" and {len(case_ids) - LISTED} more" if len(case_ids) > LISTED else "")


def errored_error(eval_run: EvalRun, what: str) -> WorkbenchError:
    """WB_EVAL_CASE_ERROR naming every case in error, grouped by what went wrong."""
    errored = eval_run.errored
    by_cause: dict[str, list[str]] = {}
    for result in errored:
        by_cause.setdefault(_describe(result.error)[:300], []).append(result.case_id)
    causes = "; ".join(f"{cause} (cases {_named(case_ids)})" for cause, case_ids in by_cause.items())
    first = errored[0].error
    return WorkbenchError(
        "WB_EVAL_CASE_ERROR",
        f"suite {eval_run.suite.name}: {len(errored)} of {len(eval_run.results)} cases ended in an error, so {what} "
        f"(an errored case is never scored): {causes}",
        f"{first.fix}; then run `workbench eval {eval_run.suite.name}` again"
        + ("" if eval_run.suite.errors_are_failures or not all(result.target_failed for result in errored) else
           " (or, if a target's error should fail the gate, declare define_eval(..., errors_are_failures=True))"),
    )


def baseline_of(eval_run: EvalRun) -> Baseline:
    prompt = eval_run.prompt
    costs, currency = baseline_costs({result.case_id: result.costs for result in eval_run.results})
    return Baseline(
        format=2, suite=eval_run.suite.name, prompt=PromptRef(id=prompt.id, version=prompt.version, hash=prompt.hash),
        scorers=[scorer.name for scorer in eval_run.suite.scorers], tolerance=eval_run.suite.tolerance,
        epochs=eval_run.epochs, mean=round(eval_run.mean, 6), currency=currency,
        cost_micros=in_currency(*one_cost(*eval_run.costs), currency),
        cases={
            result.case_id: CaseBaseline(score=result.score, samples=result.values if len(result.values) > 1 else None,
                                         **costs[result.case_id])
            for result in eval_run.results
        },
    )


def _moved(case) -> str:
    if case.error:
        return f"{case.case_id} error ({case.error[:80]})"
    spread = f" ±{case.spread:.2f}" if case.spread else ""
    sampled = len(case.samples) > 1 or case.baseline_samples > 1  # with one sample a side there is no noise to weigh
    noise = f", p={case.p_value:.3f}" if case.p_value is not None and sampled else ""
    return (f"{case.case_id} {case.baseline:.2f}→{case.score:.2f}{spread}"
            f"{' (dropped past tolerance' + noise + ')' if case.failed else ''}")


def regression_of(eval_run: EvalRun, verdict: Verdict, max_cost_increase: float | None) -> WorkbenchError | None:
    if verdict.passed:
        return None
    prompt = eval_run.prompt
    moved = ", ".join(_moved(case) for case in verdict.moved) or "none"
    where = f"prompt {prompt.id}@{prompt.version} ({prompt.hash[:20]}…)"
    fix = (
        f"fix the prompt or the app, or accept the new numbers: workbench eval {eval_run.suite.name} "
        f"--record-baseline, and commit {eval_run.suite.baseline_path.name}"
    )
    failed_errors = [case.case_id for case in verdict.cases if case.failed and case.error]
    noise = (f", {eval_run.epochs} samples a case, confidence {verdict.confidence}" if eval_run.epochs > 1
             or any(case.baseline_samples > 1 for case in verdict.cases) else "")
    mean = "—" if verdict.mean is None else f"{verdict.mean:.4f}"
    drop = "" if verdict.mean is None else f"drop {verdict.baseline_mean - verdict.mean:+.4f}, "
    scores = (f"suite {eval_run.suite.name}: mean score {mean} vs baseline {verdict.baseline_mean:.4f} "
              f"({drop}tolerance {verdict.tolerance}{noise}); {where}; moved cases: {moved}")
    if failed_errors:
        return WorkbenchError(
            "WB_EVAL_CASE_FAILED",
            f"{len(failed_errors)} cases ended in an error and the suite declares errors as failures "
            f"({_named(failed_errors)}); " + scores, fix,
        )
    if verdict.mean_failed or any(case.failed for case in verdict.cases):
        return WorkbenchError("WB_EVAL_THRESHOLD", scores, fix)
    cost = verdict.cost
    if not cost.judged:  # no verdict on the cost: never a pass, and not a regression either
        return _cost_unjudged(eval_run, cost, where)
    changes = ", ".join(("from nothing" if change is None else f"{change:+.1%}")
                        + (f" in {currency}" if len(cost.changes) > 1 or change is None else "")
                        for currency, change in cost.changes.items())
    return WorkbenchError(
        "WB_EVAL_COST",
        f"suite {eval_run.suite.name}: cost per case changed {changes} against the baseline, "
        f"over --max-cost-increase {max_cost_increase:.0%}; {where}",
        fix,
    )


def _cost_unjudged(eval_run: EvalRun, cost: CostChange, where: str) -> WorkbenchError:
    """Why --max-cost-increase has no verdict: the run's or the baseline's calls unpriced (naming the
    cases, the calls and their models), or their money in unlike currencies."""
    name, baseline = eval_run.suite.name, eval_run.suite.baseline_path.name
    accept = f"workbench eval {name} --record-baseline, and commit {baseline}"
    cannot = f"suite {name}: --max-cost-increase cannot judge the cost per case: "
    if cost.unlike:
        return WorkbenchError(
            "WB_EVAL_COST_CURRENCY",
            f"{cannot}{cost.unlike} ({baseline}), and no exact rate converts one into the other; {where}",
            f"price the suite's models in the baseline's currency (models.toml), or accept the new currency: {accept}",
        )
    if cost.unpriced:
        unpriced = [result for result in eval_run.results if result.case_id in set(cost.unpriced)]
        calls = sum(result.costs[1] for result in unpriced)
        models = sorted({model for result in unpriced for sample in result.samples for model in sample.unpriced_models})
        return WorkbenchError(
            "WB_EVAL_COST_UNPRICED",
            f"{cannot}{calls} call{'' if calls == 1 else 's'} in cases {_named(cost.unpriced)} had no price"
            f"{' (models ' + ', '.join(models) + ')' if models else ''}, and an unpriced call is never taken "
            f"as free; {where}",
            f"price {'them' if not models else ', '.join(models)} in models.toml (a [[model]] row; "
            f"`workbench models NAME` shows what a model is priced at), then run `workbench eval {name}` again",
        )
    return WorkbenchError(
        "WB_EVAL_COST_UNPRICED",
        f"{cannot}the baseline ({baseline}) keeps no cost for cases {_named(cost.baseline_unpriced)} (a call was "
        f"unpriced when it was recorded, or, recorded before costs were kept per currency, priced in two); {where}",
        f"price the suite's models in models.toml, then re-record the baseline: {accept}",
    )
