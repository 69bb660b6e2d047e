"""Baselines and the gate. A baseline is a committed, stable JSON file (sorted keys, one case per
line) so accepting new numbers is a reviewable diff. The gate judges the DROP from it, for the mean
AND every case, and never passes when it could not judge."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workbench.errors import WorkbenchError

FORMAT = 1
EPSILON = 1e-9  # float noise in means is not a regression


class CaseBaseline(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score: float = Field(ge=0, le=1)
    cost_micros: int | None = Field(default=None, ge=0)


class PromptRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    version: str
    hash: str


class Baseline(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal[1]
    suite: str
    prompt: PromptRef
    scorers: list[str]
    tolerance: float = Field(ge=0, lt=1)
    mean: float = Field(ge=0, le=1)
    cost_micros: int | None = Field(default=None, ge=0)
    cases: dict[str, CaseBaseline] = Field(min_length=1)


def read_baseline(path: Path, suite: str) -> Baseline:
    if not path.is_file():
        raise WorkbenchError(
            "WB_EVAL_BASELINE_MISSING",
            f"suite {suite} has no baseline at {path}",
            f"record one: workbench eval {suite} --record-baseline, then commit {path.name}",
        )
    try:
        baseline = Baseline.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        detail = exc.errors()[0] if isinstance(exc, ValidationError) else None
        where = ".".join(str(part) for part in detail["loc"]) + f": {detail['msg']}" if detail else str(exc)
        raise WorkbenchError(
            "WB_EVAL_BASELINE_INVALID",
            f"{path} is not a valid baseline ({where})",
            f"restore it from git (git checkout -- {path}), or re-record: workbench eval {suite} --record-baseline",
        ) from exc
    if baseline.suite != suite:
        raise WorkbenchError(
            "WB_EVAL_BASELINE_INVALID",
            f"{path} is the baseline of suite {baseline.suite!r}, not {suite!r}",
            f"point the suite at its own baseline, or re-record: workbench eval {suite} --record-baseline",
        )
    return baseline


def dump_baseline(baseline: Baseline) -> str:
    """Stable text: header keys sorted, then one case a line, sorted by id."""
    data = baseline.model_dump(mode="json")
    cases = data.pop("cases")
    lines = ["{"]
    for key in sorted(data):
        lines.append(f"  {json.dumps(key)}: {json.dumps(data[key], sort_keys=True)},")
    lines.append('  "cases": {')
    case_lines = [f"    {json.dumps(case_id)}: {json.dumps(cases[case_id], sort_keys=True)}" for case_id in sorted(cases)]
    lines.append(",\n".join(case_lines))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_baseline(path: Path, baseline: Baseline) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(dump_baseline(baseline))
    os.replace(temporary, path)


class CaseVerdict(BaseModel):
    case_id: str
    score: float | None
    baseline: float | None
    delta: float | None
    cost_micros: int | None
    baseline_cost_micros: int | None
    failed: bool  # dropped by more than the tolerance


class Verdict(BaseModel):
    suite: str
    mean: float
    baseline_mean: float
    tolerance: float
    cases: list[CaseVerdict]
    mean_failed: bool
    cost_increase: float | None  # relative change of the cost per case; None: not comparable
    cost_failed: bool

    @property
    def passed(self) -> bool:
        return not self.mean_failed and not self.cost_failed and not any(case.failed for case in self.cases)

    @property
    def moved(self) -> list[CaseVerdict]:
        return [case for case in self.cases if case.delta is not None and abs(case.delta) > EPSILON]


def judge(
    suite: str, scores: dict[str, float], costs: dict[str, int | None], baseline: Baseline,
    tolerance: float, max_cost_increase: float | None = None,
) -> Verdict:
    """Compare a run's case scores with the baseline. Cases must match the baseline's exactly: a new
    or a missing case cannot be judged (WB_EVAL_BASELINE_INVALID, re-record to accept it)."""
    new = sorted(set(scores) - set(baseline.cases))
    gone = sorted(set(baseline.cases) - set(scores))
    if new or gone:
        parts = ([f"new cases not in the baseline: {', '.join(new)}"] if new else []) + (
            [f"baseline cases not in the suite: {', '.join(gone)}"] if gone else []
        )
        raise WorkbenchError(
            "WB_EVAL_BASELINE_INVALID",
            f"suite {suite}: the baseline does not cover the suite's cases ({'; '.join(parts)})",
            f"accept the new case list: workbench eval {suite} --record-baseline, and commit the baseline",
        )
    mean = sum(scores.values()) / len(scores)
    cases = []
    for case_id in sorted(scores):
        recorded = baseline.cases[case_id]
        delta = scores[case_id] - recorded.score
        cases.append(CaseVerdict(
            case_id=case_id, score=scores[case_id], baseline=recorded.score, delta=delta,
            cost_micros=costs.get(case_id), baseline_cost_micros=recorded.cost_micros,
            failed=-delta > tolerance + EPSILON,
        ))
    cost_increase = None
    now = [costs.get(case_id) for case_id in scores]
    then = [baseline.cases[case_id].cost_micros for case_id in scores]
    if all(value is not None for value in now + then) and sum(then) > 0:
        cost_increase = (sum(now) - sum(then)) / sum(then)
    cost_failed = max_cost_increase is not None and (cost_increase is None or cost_increase > max_cost_increase + EPSILON)
    return Verdict(
        suite=suite, mean=mean, baseline_mean=baseline.mean, tolerance=tolerance, cases=cases,
        mean_failed=baseline.mean - mean > tolerance + EPSILON, cost_increase=cost_increase, cost_failed=cost_failed,
    )
