"""Datasets from traffic: the captured runs of a prompt become eval cases (JSON lines), their
variables as `vars` and what the model answered as `expected`, so production traffic becomes an
eval set (`workbench eval cases-from-runs`). Only production traffic by default: live runs, outside
any eval or judge. Identical inputs become one case; an input the model answered in different ways
is a conflict, reported and not written (which answer is right is a person's call). Review the
expected values before trusting them: they are what the model said, not what it should have said."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError

RESPOND = "respond"  # the runtime's structured-output tool (workbench.runtime.llm.RESPOND)


def _expected(output_text: str | None, tool_calls: str | None) -> Any:
    """The `respond` tool's arguments (parsed) when the call made one, else the text."""
    for tool_call in json.loads(tool_calls) if tool_calls else []:
        if tool_call.get("name") == RESPOND:
            try:
                return json.loads(tool_call.get("arguments") or "{}")
            except ValueError:
                return tool_call.get("arguments")
    return output_text


def _iso(value) -> str | None:
    return value.isoformat() if isinstance(value, (datetime, date)) else (None if value is None else str(value))


RUN_IDS_KEPT = 20  # a case names at most this many of the runs it came from (and counts them all)


@dataclass
class Dataset:
    cases: list[dict]  # one per distinct input whose runs agree on the answer
    conflicts: list[dict]  # one per distinct input answered in different ways: not written
    runs: int  # the captured runs read


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def cases_from_runs(prompt_id: str, since: date | datetime | None = None, limit: int | None = None,
                    db: Path | None = None, spool_dir: Path | None = None, include_evals: bool = False,
                    include_replayed: bool = False) -> Dataset:
    """One case per distinct input of the captured runs of `prompt_id` (the latest `limit` runs),
    in the order each input was first seen."""
    from workbench.capture.recorder import recorder
    from workbench.config import spool_dir_of
    from workbench.store.queries import StoreMissing, prompt_runs_for_cases, read

    active = recorder().settings  # the db `configure()` or WORKBENCH_DB names
    db = Path(db or active.db)
    spool = spool_dir or (active.resolved_spool_dir if db == Path(active.db) else spool_dir_of(db))
    try:
        frame = read(db, spool, lambda con: prompt_runs_for_cases(con, prompt_id, since, limit, include_evals,
                                                                  include_replayed))
    except StoreMissing:
        raise WorkbenchError(
            "WB_RUN_NOT_FOUND", f"there is no store at {db}, so no captured runs of prompt {prompt_id}",
            "point WORKBENCH_DB at the store your app records into, or record some traffic first",
        ) from None
    if frame.height == 0:
        raise WorkbenchError(
            "WB_RUN_NOT_FOUND",
            f"{db} has no finished run of prompt {prompt_id!r}"
            + (f" since {_iso(since)}" if since is not None else "")
            + " that carries its variables and an answer"
            + ("" if include_evals and include_replayed else
               " (eval and judge runs and replayed answers are left out unless asked for)"),
            "check the prompt id (runs.prompt_id), widen --since, record traffic through workbench.llm(), "
            "or pass --include-evals / --include-replayed",
        )
    inputs: dict[str, dict[str, list[dict]]] = {}  # input -> answer -> its runs, in the order first seen
    for row in frame.iter_rows(named=True):
        variables = json.loads(row["vars"])
        expected = _expected(row["output_text"], row["tool_calls"])
        inputs.setdefault(_canonical(variables), {}).setdefault(_canonical(expected), []).append(
            {**row, "vars": variables, "expected": expected})
    cases, conflicts = [], []
    for key, answers in inputs.items():
        runs = [run for group in answers.values() for run in group]
        variables = runs[0]["vars"]
        if len(answers) > 1:
            conflicts.append({"vars": variables, "answers": [
                {"expected": group[0]["expected"], "runs": len(group),
                 "run_ids": [run["run_id"] for run in group][:RUN_IDS_KEPT]} for group in answers.values()]})
            continue
        cases.append({
            "id": "input-" + hashlib.sha256(key.encode()).hexdigest()[:12],
            "vars": variables,
            "expected": runs[0]["expected"],
            "metadata": {
                "runs": len(runs), "run_ids": [run["run_id"] for run in runs][:RUN_IDS_KEPT],
                "prompt_versions": sorted({run["prompt_version"] for run in runs if run["prompt_version"]}),
                "first_seen": _iso(runs[0]["started_at"]), "last_seen": _iso(runs[-1]["started_at"]),
            },
        })
    return Dataset(cases, conflicts, frame.height)


def write_cases(cases: list[dict], out) -> None:
    """JSON lines, one case (or conflict) a line, keys sorted (a stable, reviewable file)."""
    text = "".join(json.dumps(case, sort_keys=True, ensure_ascii=False) + "\n" for case in cases)
    if out is None or str(out) == "-":
        import sys

        sys.stdout.write(text)
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
