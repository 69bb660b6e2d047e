"""Baselines and the gate. A baseline is a committed, stable JSON file (sorted keys, one case per
line) so accepting new numbers is a reviewable diff. It keeps every sample of every case, so a later
run is compared with the baseline's distribution, not one number. The gate judges the DROP from it,
for the mean AND every case: a drop fails when it is larger than the tolerance AND unlikely to be the
noise of repeated trials (`stats.drop_test`). It never passes when it could not judge."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass as validated_dataclass

from workbench.errors import WorkbenchError
from workbench.evaluate import stats

FORMAT = 2  # 1: one score per case; 2: epochs, and every sample of a case when there are several
EPSILON = 1e-9  # float noise in means is not a regression
PRECISION = 1e-6  # scores are kept to 6 places


# slotted: a baseline holds one per case (100,000 of them for a large suite), and a model instance
# is about five times its size; validated and dumped by the Baseline model all the same
@validated_dataclass(slots=True, config=ConfigDict(extra="forbid", allow_inf_nan=False))
class CaseBaseline:
    score: float = Field(ge=0, le=1)  # the mean of the samples
    samples: list[float] | None = Field(default=None, min_length=2)  # each sample's score; None: one sample
    # every sample's cost, added, in the baseline's `currency`; None: a call was unpriced, or the money
    # is in `costs`
    cost_micros: int | None = Field(default=None, ge=0)
    # the case's money per currency, when the baseline's is in two or more (its `currency` then null)
    costs: dict[str, Annotated[int, Field(ge=0)]] | None = None

    @model_validator(mode="after")
    def _samples_in_range(self) -> CaseBaseline:
        for value in self.samples or []:
            if not 0 <= value <= 1:
                raise ValueError(f"sample {value} is outside [0, 1]")
        if self.samples and abs(stats.mean(self.samples) - self.score) > PRECISION:
            raise ValueError(f"score {self.score} is not the mean of its samples ({stats.mean(self.samples):.6f})")
        return self

    @property
    def values(self) -> list[float]:
        return self.samples or [self.score]


class PromptRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    version: str
    hash: str


class Baseline(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    format: Literal[2]
    suite: str
    prompt: PromptRef
    scorers: list[str]
    tolerance: float = Field(ge=0, lt=1)
    epochs: int = Field(ge=1)
    mean: float = Field(ge=0, le=1)
    cost_micros: int | None = Field(default=None, ge=0)
    # the currency of every cost in the baseline (`cost_micros`, each case's). Absent (written before
    # it was kept): USD, the currency every cost was shown in then. None: no money in any currency, or
    # money in two or more, each case's then kept per currency (`CaseBaseline.costs`)
    currency: str | None = "USD"
    cases: dict[str, CaseBaseline] = Field(min_length=1)

    @model_validator(mode="after")
    def _epochs_of_every_case(self) -> Baseline:
        uneven = sorted(case_id for case_id, case in self.cases.items() if len(case.values) != self.epochs)
        if uneven:
            raise ValueError(f"cases {', '.join(uneven[:5])} do not have {self.epochs} samples (epochs)")
        if self.currency is None and any(case.cost_micros for case in self.cases.values()):
            raise ValueError("a case has a cost_micros, but the baseline names no currency it is in")
        if self.currency is not None and any(case.costs is not None for case in self.cases.values()):
            raise ValueError(f"a case keeps costs per currency, but the baseline's are all in {self.currency}")
        return self


def upgrade_baseline(data: Any) -> Any:
    """Any older shape of a baseline file, as the current one. Format 1 (before epochs): one score
    per case, which is one sample."""
    if isinstance(data, dict) and data.get("format") == 1:
        data = {**data, "format": 2, "epochs": 1}
    return data


def _parsed(text: str) -> Baseline:
    """The current format straight from the JSON text (no dict of every case made first: a
    100,000-case baseline's took 30 MB more at its peak); anything else, an older format or an
    invalid file, through Python objects, which `upgrade_baseline` takes and whose errors name
    what is wrong."""
    try:
        return Baseline.model_validate_json(text)
    except ValidationError:
        return Baseline.model_validate(upgrade_baseline(json.loads(text)))


def read_baseline(path: Path, suite: str) -> Baseline:
    if not path.is_file():
        raise WorkbenchError(
            "WB_EVAL_BASELINE_MISSING",
            f"suite {suite} has no baseline at {path}",
            f"record one: workbench eval {suite} --record-baseline, then commit {path.name}",
        )
    try:
        baseline = _parsed(path.read_text(encoding="utf-8"))
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
    cases = {case_id: {key: value for key, value in case.items() if not (key in ("samples", "costs") and value is None)}
             for case_id, case in data.pop("cases").items()}
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


@dataclass(slots=True)
class CaseVerdict:
    """The gate's verdict on one case: built by `judge` alone, never from input (so not validated),
    one per case, held until the run is stored and reported."""

    case_id: str
    score: float | None  # the mean of the samples; None: the case ended in an error
    spread: float | None
    samples: list[float]
    baseline: float | None
    baseline_spread: float | None
    baseline_samples: int
    delta: float | None
    p_value: float | None  # the chance a drop this large is noise (one-sided Welch); None: no drop
    cost_micros: int | None
    baseline_cost_micros: int | None  # in the case's currency; None: unpriced, or in another currency
    failed: bool  # dropped by more than the tolerance, beyond noise; or errored, when errors are failures
    error: str | None = None


@dataclass(slots=True)
class CostChange:
    """The cost per sample (one run of one case) against the baseline's, like with like: per
    currency. No verdict on the cost when a call on either side was unpriced, or when the run's money
    is in a currency the baseline's is not (no exact rate converts one into the other)."""

    changes: dict[str, float | None] = field(default_factory=dict)  # by currency; None: rose from nothing
    unpriced: list[str] = field(default_factory=list)  # cases of the run with a call no price covers
    baseline_unpriced: list[str] = field(default_factory=list)  # cases the baseline keeps no cost for
    unlike: str | None = None  # why the currencies differ

    @property
    def judged(self) -> bool:
        return not (self.unpriced or self.baseline_unpriced or self.unlike)

    @property
    def increase(self) -> float | None:
        """The largest change over the currencies (0 when neither side cost anything); None: no
        verdict, or a currency rose from nothing (no ratio)."""
        if not self.judged or None in self.changes.values():
            return None
        return max(self.changes.values(), default=0.0)


@dataclass
class Verdict:
    suite: str
    mean: float | None
    baseline_mean: float
    tolerance: float
    confidence: float
    cases: list[CaseVerdict]
    mean_failed: bool
    mean_p_value: float | None
    cost: CostChange
    cost_failed: bool  # rose past --max-cost-increase, or no verdict on the cost when it was asked for

    @property
    def cost_increase(self) -> float | None:
        return self.cost.increase

    @property
    def passed(self) -> bool:
        return not self.mean_failed and not self.cost_failed and not any(case.failed for case in self.cases)

    @property
    def moved(self) -> list[CaseVerdict]:
        return [case for case in self.cases if case.error or (case.delta is not None and abs(case.delta) > EPSILON)]


def _dropped(before: list[list[float]], after: list[list[float]], tolerance: float,
             confidence: float) -> tuple[bool, float | None]:
    """Whether the mean over these cases fell past the tolerance AND beyond noise, and the p-value
    of the drop (None when it did not fall past the tolerance: nothing to test)."""
    drop = stats.mean([stats.mean(values) for values in before]) - stats.mean([stats.mean(values) for values in after])
    if drop <= tolerance + EPSILON:
        return False, None
    test = stats.drop_test(list(zip(before, after)))
    return test.is_real(confidence), test.p_value


CaseCost = tuple[dict[str, int], int]  # a case's money by currency, and its unpriced calls (`CaseResult.costs`)


def one_cost(costs: dict[str, int], unpriced: int) -> tuple[int | None, str | None]:
    """The one figure of costs in one currency with nothing unpriced, and its currency; `(None, None)`
    when a call was unpriced or calls were priced in two currencies (no figure is their sum)."""
    if unpriced or len(costs) > 1:
        return None, None
    return next(iter(costs.values()), 0), next(iter(costs), None)


def in_currency(micros: int | None, currency: str | None, wanted: str | None) -> int | None:
    """`micros` (in `currency`) as a figure in `wanted`: itself when the currencies are one, or when it
    is 0 (nothing, in any currency); else None, never a figure labelled with another currency."""
    return micros if not micros or currency == wanted else None


def judge(
    suite: str, samples: dict[str, list[float]], costs: dict[str, CaseCost], baseline: Baseline,
    tolerance: float, max_cost_increase: float | None = None, confidence: float = 0.95,
    errors: dict[str, str] | None = None, epochs: int = 1,
) -> Verdict:
    """Compare a run's case samples with the baseline's. `errors`: the cases that ended in an error
    (never scored), judged as failed (for a suite whose errors are failures) and left out of the
    mean on both sides. Cases
    must match the baseline's exactly: a new or a missing case cannot be judged
    (WB_EVAL_BASELINE_INVALID, re-record to accept it). `costs` are per case, over its `epochs`
    samples, by currency: compared with the baseline's per currency (`cost_change`)."""
    errors = errors or {}
    ran = set(samples) | set(errors)
    new = sorted(ran - set(baseline.cases))
    gone = sorted(set(baseline.cases) - ran)
    if new or gone:
        parts = ([f"new cases not in the baseline: {', '.join(new)}"] if new else []) + (
            [f"baseline cases not in the suite: {', '.join(gone)}"] if gone else []
        )
        raise WorkbenchError(
            "WB_EVAL_BASELINE_INVALID",
            f"suite {suite}: the baseline does not cover the suite's cases ({'; '.join(parts)})",
            f"accept the new case list: workbench eval {suite} --record-baseline, and commit the baseline",
        )
    cases = []
    for case_id in sorted(ran):
        recorded = baseline.cases[case_id]
        cost, currency = one_cost(*costs.get(case_id, ({}, 1)))
        values = samples.get(case_id, [])
        score = stats.mean(values) if values else None
        failed, p_value = _dropped([recorded.values], [values], tolerance, confidence) if values else (True, None)
        cases.append(CaseVerdict(
            case_id=case_id, score=score, spread=stats.spread(values) if values else None, samples=values,
            baseline=recorded.score, baseline_spread=stats.spread(recorded.values),
            baseline_samples=len(recorded.values), delta=None if score is None else score - recorded.score,
            p_value=p_value, cost_micros=cost,
            baseline_cost_micros=in_currency(recorded.cost_micros, baseline.currency, currency) if recorded.costs is None
            else in_currency(*one_cost(recorded.costs, 0), currency),
            failed=failed, error=errors.get(case_id),
        ))
    judged = sorted(samples)
    mean = stats.mean([stats.mean(samples[case_id]) for case_id in judged]) if judged else None
    # the baseline's own mean when every case was judged (as before epochs); else over the same cases
    baseline_mean = baseline.mean if not errors else (
        stats.mean([baseline.cases[case_id].score for case_id in judged]) if judged else baseline.mean)
    mean_failed, mean_p_value = False, None
    if judged:
        mean_failed, mean_p_value = _dropped([baseline.cases[case_id].values for case_id in judged],
                                             [samples[case_id] for case_id in judged], tolerance, confidence)
        mean_failed = mean_failed and baseline_mean - mean > tolerance + EPSILON
    cost = cost_change(costs, epochs, baseline)
    cost_failed = max_cost_increase is not None and (cost.increase is None or cost.increase > max_cost_increase + EPSILON)
    return Verdict(
        suite=suite, mean=mean, baseline_mean=baseline_mean, tolerance=tolerance, confidence=confidence,
        cases=cases, mean_failed=mean_failed, mean_p_value=mean_p_value, cost=cost, cost_failed=cost_failed,
    )


def _by_currency(costs) -> dict[str, int]:
    """Money by currency, summed over cases; a currency with no money is left out (nothing is nothing
    in any currency)."""
    summed: dict[str, int] = {}
    for money in costs:
        for currency, micros in money.items():
            if micros:
                summed[currency] = summed.get(currency, 0) + micros
    return summed


def cost_change(costs: dict[str, CaseCost], epochs: int, baseline: Baseline) -> CostChange:
    """The relative change of the cost per sample (one run of one case) against the baseline's, per
    currency: like with like whatever the epochs of either. A currency the run no longer spends in
    fell by 100%; one it spends in and the baseline did not (while the baseline spent in another) is
    no verdict; a baseline that cost nothing anywhere against a run that costs: rose from nothing."""
    unpriced = sorted(case_id for case_id, (_, calls) in costs.items() if calls)
    recorded = [(case_id, baseline.cases[case_id]) for case_id in costs]
    # a case keeps its money in the baseline's currency (`cost_micros`), or per currency (`costs`), or
    # no figure: a call was unpriced when it was recorded (or, in a baseline from before costs were
    # kept per currency, priced in two)
    baseline_unpriced = sorted(case_id for case_id, case in recorded if case.cost_micros is None and case.costs is None)
    if unpriced or baseline_unpriced:
        return CostChange(unpriced=unpriced, baseline_unpriced=baseline_unpriced)
    now = _by_currency(money for money, _ in costs.values())
    then = _by_currency(case.costs for _, case in recorded if case.costs is not None)
    single = sum(case.cost_micros for _, case in recorded if case.costs is None)
    if single:
        then[baseline.currency] = then.get(baseline.currency, 0) + single
    new = sorted(set(now) - set(then))
    if new and then:
        return CostChange(unlike=f"the run's cost is in {' and '.join(sorted(now))}, "
                                 f"the baseline's in {' and '.join(sorted(then))}")
    # exact integers until this one division: cost now x samples then vs cost then x samples now
    changes: dict[str, float | None] = {
        currency: (now.get(currency, 0) * baseline.epochs - micros * epochs) / (micros * epochs)
        for currency, micros in then.items()}
    return CostChange(changes={**changes, **dict.fromkeys(new)})


def baseline_costs(costs: dict[str, CaseCost]) -> tuple[dict[str, dict], str | None]:
    """Cases' costs as a baseline keeps them (each a `CaseBaseline`'s cost fields), and the currency
    of its money: in one currency (or none), each case's `cost_micros` in it; in two or more, each
    case's `costs` by currency (the currency None). A case with an unpriced call keeps no figure."""
    currencies = {currency for money, _ in costs.values() for currency, micros in money.items() if micros}
    currency = next(iter(currencies)) if len(currencies) == 1 else None

    def kept(money: dict[str, int], unpriced: int) -> dict:
        if unpriced:
            return {"cost_micros": None}
        if len(currencies) > 1:
            return {"cost_micros": None, "costs": {of: micros for of, micros in money.items() if micros}}
        return {"cost_micros": sum(money.values())}  # in `currency`: any other's is 0

    return {case_id: kept(*cost) for case_id, cost in costs.items()}, currency
