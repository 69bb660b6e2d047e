"""`workbench eval compare`: one suite over a matrix of prompt versions and models. Each cell is a
run of the suite (replayed where its cassette has it; live only in the modes that allow it), stored
as an eval run of the matrix. Per cell: the mean and its spread, the cases that moved against a
reference cell (by the gate's own rule: past the tolerance and beyond noise, either way), the cost
per case, and the latency (median and 95th percentile) of the samples that reached a provider."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field, replace

from workbench.config import RecordMode
from workbench.errors import WorkbenchError
from workbench.evaluate import stats
from workbench.evaluate.baseline import Baseline, CaseBaseline, PromptRef, Verdict, baseline_costs, judge, one_cost
from workbench.evaluate.gate import check_released
from workbench.evaluate.runner import EvalRun, Network, costs_of, run_suite, store_eval_run
from workbench.evaluate.scorers import as_text
from workbench.evaluate.suite import Suite, check_confidence
from workbench.ids import new_id
from workbench.money import ceil_div, format_costs


@dataclass
class Cell:
    version: str
    model: str
    eval_run: EvalRun | None = None
    error: WorkbenchError | None = None  # the cell could not run (e.g. never recorded, in replay)
    verdict: Verdict | None = None  # against the reference cell

    @property
    def label(self) -> str:
        return f"{self.version} · {self.model}"

    @property
    def worse(self) -> list[str]:
        return [case.case_id for case in self.verdict.cases if case.failed] if self.verdict else []

    @property
    def better(self) -> list[str]:
        return [case.case_id for case in self.verdict.cases if _improved(case, self.verdict)] if self.verdict else []

    @property
    def samples(self) -> list:
        return [sample for result in self.eval_run.results for sample in result.samples] if self.eval_run else []

    @property
    def costs_per_case(self) -> dict[str, int] | None:
        """The cost of one run of one case (one sample) in each currency its calls were priced in,
        rounded up to the micro-unit; None: no sample, or a call was unpriced."""
        samples = self.samples
        costs, unpriced = costs_of(samples)
        if not samples or unpriced:
            return None
        return {currency: ceil_div(micros, len(samples)) for currency, micros in costs.items()}

    @property
    def cost_per_case_micros(self) -> int | None:
        """`costs_per_case` as one figure; None: unpriced, or priced in two currencies."""
        costs = self.costs_per_case
        return None if costs is None else one_cost(costs, 0)[0]

    @property
    def source(self) -> str | None:
        """live, replayed or mixed: where the cell's answers came from, so its cost per case says
        whether it is money paid now or the price of recorded usage."""
        live = {sample.live for sample in self.samples}
        return None if not live else "mixed" if len(live) > 1 else "live" if live == {True} else "replayed"

    @property
    def latency_ms(self) -> tuple[float | None, float | None, int]:
        """Median and 95th percentile (nearest rank) of the samples that reached a provider, and
        their count. A replayed sample's time is the replay's, not the model's: left out."""
        live = sorted(sample.latency_ms for sample in self.samples if sample.live)
        if not live:
            return None, None, 0
        return stats.mean(live[(len(live) - 1) // 2: len(live) // 2 + 1]), live[math.ceil(0.95 * len(live)) - 1], len(live)


def _improved(case, verdict: Verdict) -> bool:
    return (case.delta is not None and case.delta > verdict.tolerance and case.p_value is not None
            and case.p_value < 1 - verdict.confidence)


@dataclass
class Matrix:
    suite: Suite
    cells: list[Cell]
    reference: Cell
    epochs: int
    confidence: float
    matrix_id: str = field(default_factory=new_id)


def _as_baseline(eval_run: EvalRun, case_ids: list[str]) -> Baseline:
    results = {result.case_id: result for result in eval_run.results}
    costs, currency = baseline_costs({case_id: results[case_id].costs for case_id in case_ids})
    return Baseline(
        format=2, suite=eval_run.suite.name,
        prompt=PromptRef(id=eval_run.prompt.id, version=eval_run.prompt.version, hash=eval_run.prompt.hash),
        scorers=[scorer.name for scorer in eval_run.suite.scorers], tolerance=eval_run.suite.tolerance,
        epochs=eval_run.epochs, mean=round(stats.mean([results[case_id].score for case_id in case_ids]), 6),
        currency=currency,
        cases={case_id: CaseBaseline(score=results[case_id].score, **costs[case_id],
                                     samples=results[case_id].values if eval_run.epochs > 1 else None)
               for case_id in case_ids},
    )


def against(cell: EvalRun, reference: EvalRun, confidence: float) -> Verdict | None:
    """The cell judged against the reference by the gate's rule, both ways: a case that fell is
    `failed`; one that rose past the tolerance has the p-value of its rise. None: no case was
    judged in both."""
    ours = {result.case_id: result.values for result in cell.judged}
    theirs = {result.case_id: result.values for result in reference.judged}
    common = sorted(set(ours) & set(theirs))
    if not common:
        return None
    tolerance = cell.suite.tolerance
    costs = {result.case_id: result.costs for result in cell.results if result.case_id in theirs and result.case_id in ours}
    fell = judge(cell.suite.name, {case_id: ours[case_id] for case_id in common}, costs,
                 _as_baseline(reference, common), tolerance, confidence=confidence, epochs=cell.epochs)
    rose = judge(cell.suite.name, {case_id: theirs[case_id] for case_id in common}, {},
                 _as_baseline(cell, common), tolerance, confidence=confidence, epochs=reference.epochs)
    rises = {case.case_id: case.p_value for case in rose.cases}
    return replace(fell, cases=[
        replace(case, p_value=rises[case.case_id]) if case.delta is not None and case.delta > 0 else case
        for case in fell.cases
    ])


def run_matrix(
    suite: Suite, versions: list[str], models: list[str], mode: RecordMode | None = None,
    epochs: int | None = None, reference: str | None = None, confidence: float | None = None,
    network: Network | None = None, progress=None,
) -> Matrix:
    """Every (version, model) cell of `suite`; `reference` ("VERSION:MODEL", default the first
    cell) is what the others are compared with. A cell that cannot run (a replay miss, an unknown
    model) is reported with its error; the others still run."""
    confidence = check_confidence(confidence, "--confidence") if confidence is not None else suite.confidence
    for version in versions:  # a released prompt whose content moved is not compared either
        check_released(suite, version)
    cells = [Cell(version, model) for version in versions for model in models]
    chosen = _reference(cells, reference)
    matrix = Matrix(suite, cells, chosen, epochs if epochs is not None else suite.epochs, confidence)
    for cell in cells:
        try:
            cell.eval_run = asyncio.run(run_suite(suite, mode, cell.version, progress, network, matrix.epochs,
                                                  cell.model, matrix.matrix_id))
        except WorkbenchError as exc:
            if exc.code in ("WB_EVAL_SUITE_INVALID", "WB_CONFIG_INVALID"):  # the command itself is wrong
                raise
            cell.error = exc
    for cell in cells:
        if cell.eval_run is not None and chosen.eval_run is not None:
            cell.verdict = against(cell.eval_run, chosen.eval_run, confidence)
        if cell.eval_run is not None:
            cell.eval_run.matrix_reference = cell is chosen
            store_eval_run(cell.eval_run, "compared", cell.verdict)
    return matrix


def _reference(cells: list[Cell], reference: str | None) -> Cell:
    if reference is None:
        return cells[0]
    version, _, model = reference.partition(":")
    for cell in cells:
        if cell.version == version and (not model or cell.model == model):
            return cell
    raise WorkbenchError(
        "WB_CONFIG_INVALID", f"--reference {reference!r} is not a cell of the matrix "
        f"({', '.join(f'{cell.version}:{cell.model}' for cell in cells)})",
        "pass --reference VERSION:MODEL naming one of the cells",
    )


# -- output ----------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "replayed" if value is None else f"{value:,.0f} ms"


def cell_summary(cell: Cell, matrix: Matrix) -> dict:
    run = cell.eval_run
    median, p95, live = cell.latency_ms
    return {
        "version": cell.version, "model": cell.model, "reference": cell is matrix.reference,
        "error": None if cell.error is None else {"code": cell.error.code, "cause": cell.error.cause, "fix": cell.error.fix},
        "mode": None if run is None else run.mode, "source": cell.source,
        "mean": None if run is None else run.mean,
        "spread": None if run is None or run.spread is None else round(run.spread, 6),
        "cases": 0 if run is None else len(run.results), "errored_cases": 0 if run is None else len(run.errored),
        "samples": len(cell.samples),
        "cost_micros": None if run is None else run.cost_micros,
        "currency": None if run is None else one_cost(*run.costs)[1], "cost_per_case_micros": cell.cost_per_case_micros,
        "costs_per_case": cell.costs_per_case,
        "latency_ms": {"median": None if median is None else round(median, 1), "p95": None if p95 is None else round(p95, 1),
                       "live_samples": live},
        "compared": cell.verdict is not None, "worse": cell.worse, "better": cell.better,
    }


def summary(matrix: Matrix) -> dict:
    cells = [cell for cell in matrix.cells if cell.eval_run is not None]
    case_ids = [case.id for case in matrix.suite.cases]
    by_cell = [{result.case_id: result for result in cell.eval_run.results} for cell in cells]
    return {
        "format": 1, "suite": matrix.suite.name, "prompt_id": matrix.suite.prompt.id,
        "reference": matrix.reference.label, "tolerance": matrix.suite.tolerance, "confidence": matrix.confidence,
        "epochs": matrix.epochs, "cells": [cell_summary(cell, matrix) for cell in matrix.cells],
        "cases": [
            {"case": case_id, "cells": [
                {"cell": cell.label, "score": results[case_id].score,
                 "spread": None if results[case_id].spread is None else round(results[case_id].spread, 6),
                 "samples": [sample.score for sample in results[case_id].samples],
                 "output": None if results[case_id].output is None else as_text(results[case_id].output)[:500],
                 "error": None if results[case_id].error is None else results[case_id].error.code}
                for cell, results in zip(cells, by_cell)]}
            for case_id in case_ids
        ],
    }


def to_json(matrix: Matrix) -> str:
    return json.dumps(summary(matrix), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def to_csv(matrix: Matrix) -> str:
    """One row per cell, every field of the JSON's cells (money as exact integer micros; a nested
    value as JSON)."""
    import csv
    import io

    cells = summary(matrix)["cells"]
    columns = list(dict.fromkeys(key for cell in cells for key in cell))
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    for cell in cells:
        writer.writerow(["" if cell.get(key) is None else json.dumps(cell[key], sort_keys=True)
                         if isinstance(cell[key], (dict, list)) else cell[key] for key in columns])
    return text.getvalue()


def _mean(cell: dict) -> str:
    if cell["error"] is not None:
        return f"not run: {cell['error']['code']}"
    if cell["mean"] is None:
        return "no score"
    return f"{cell['mean']:.4f}" + (f" ±{cell['spread']:.4f}" if cell["spread"] is not None else "")


def _moved(cell: dict, limit: int = 6) -> str:
    if cell["reference"]:
        return "reference"
    if not cell["compared"]:
        return "—" if cell["error"] else "not compared (the reference did not run)"
    parts = []
    for sign, names in (("−", cell["worse"]), ("+", cell["better"])):
        if names:
            parts.append(f"{sign}{len(names)}: " + ", ".join(names[:limit]) + (" …" if len(names) > limit else ""))
    return "; ".join(parts) or "none"


def rows(matrix: Matrix) -> list[list[str]]:
    """The matrix as text cells, one row per (version, model) cell."""
    out = []
    for cell in summary(matrix)["cells"]:
        latency = cell["latency_ms"]
        out.append([
            cell["version"], cell["model"], cell["source"] or "—", _mean(cell), _moved(cell),
            cost_per_case(cell) if cell["error"] is None else "—",
            _ms(latency["median"]) if cell["error"] is None else "—", _ms(latency["p95"]) if cell["error"] is None else "—",
        ])
    return out


def cost_per_case(cell: dict) -> str:
    """A cell's cost per case, each currency apart, every digit; `unpriced` when a call was."""
    costs = cell["costs_per_case"]
    return "unpriced" if costs is None else format_costs(costs, exact=True)


HEADERS = ["version", "model", "answers", "mean ± spread", "moved vs reference (− worse, + better)", "cost per case",
           "latency median", "latency p95"]


def to_markdown(matrix: Matrix) -> str:
    data = summary(matrix)
    lines = [
        f"## {data['suite']}: {len(matrix.cells)} cells", "",
        f"Prompt `{data['prompt_id']}`, {data['epochs']} sample{'s' if data['epochs'] > 1 else ''} a case; "
        f"reference **{data['reference']}**; a case moved when it changed by more than {data['tolerance']} and a "
        f"one-sided Welch test puts it beyond noise at {data['confidence']:.0%}. Latency is measured on live "
        "samples only.", "",
        "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows(matrix)]
    errors = [cell for cell in data["cells"] if cell["error"] is not None]
    if errors:
        lines += [""] + [f"- **{cell['version']} · {cell['model']}** not run — {cell['error']['code']}: "
                         f"{cell['error']['cause'][:300]} (fix: {cell['error']['fix']})" for cell in errors]
    return "\n".join(lines) + "\n"
