"""Prompts, eval suites, scorers and the CI gate."""

from __future__ import annotations

from workbench.evaluate.gate import Outcome, evaluate, recording_requested
from workbench.evaluate.prompts import Prompt, define_prompt
from workbench.evaluate.scorers import (
    Score,
    ScoreContext,
    Scorer,
    contains,
    exact,
    json_schema_valid,
    json_valid,
    llm_judge,
    numeric_tolerance,
    regex,
)
from workbench.evaluate.suite import Case, Suite, define_eval


def assert_suite(suite: Suite, mode=None, prompt_version: str | None = None, max_cost_increase: float | None = None,
                 epochs: int | None = None, confidence: float | None = None) -> Outcome:
    """Evals as a test type: run `suite` from a test; a regression, or a case that could not be
    judged, fails it with the gate's own message. With WORKBENCH_EVAL_RECORD=1 the test records the
    baseline instead of gating."""
    outcome = evaluate(
        suite, mode=mode, prompt_version=prompt_version, record_baseline=recording_requested(),
        max_cost_increase=max_cost_increase, epochs=epochs, confidence=confidence,
    )
    if outcome.error is not None:
        raise AssertionError(f"{outcome.error.code}: {outcome.error.cause}\nfix: {outcome.error.fix}")
    return outcome


__all__ = [
    "Case", "Outcome", "Prompt", "Score", "ScoreContext", "Scorer", "Suite", "assert_suite", "contains",
    "define_eval", "define_prompt", "evaluate", "exact", "json_schema_valid", "json_valid", "llm_judge",
    "numeric_tolerance", "regex",
]
