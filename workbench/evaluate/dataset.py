"""Datasets from traffic: the captured runs of a prompt become eval cases (JSON lines), their
variables as `vars` and what the model answered as `expected`, so production traffic becomes an
eval set (`workbench eval cases-from-runs`). Review the expected values before trusting them: they
are what the model said, not what it should have said."""

from __future__ import annotations

import json
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


def cases_from_runs(prompt_id: str, since: date | datetime | None = None, limit: int | None = None,
                    db: Path | None = None, spool_dir: Path | None = None) -> list[dict]:
    """One case per captured run of `prompt_id` (oldest first, the latest `limit`)."""
    from workbench.capture.recorder import recorder
    from workbench.config import spool_dir_of
    from workbench.store.queries import StoreMissing, prompt_runs_for_cases, read

    active = recorder().settings  # the db `configure()` or WORKBENCH_DB names
    db = Path(db or active.db)
    spool = spool_dir or (active.resolved_spool_dir if db == Path(active.db) else spool_dir_of(db))
    try:
        frame = read(db, spool, lambda con: prompt_runs_for_cases(con, prompt_id, since, limit))
    except StoreMissing:
        raise WorkbenchError(
            "WB_RUN_NOT_FOUND", f"there is no store at {db}, so no captured runs of prompt {prompt_id}",
            "point WORKBENCH_DB at the store your app records into, or record some traffic first",
        ) from None
    if frame.height == 0:
        raise WorkbenchError(
            "WB_RUN_NOT_FOUND",
            f"{db} has no finished run of prompt {prompt_id!r}"
            + (f" since {_iso(since)}" if since is not None else "") + " that carries its variables and an answer",
            "check the prompt id (runs.prompt_id), widen --since, or record traffic through workbench.llm()",
        )
    cases = []
    for row in frame.iter_rows(named=True):
        cases.append({
            "id": f"run-{row['run_id'][:12]}",
            "vars": json.loads(row["vars"]),
            "expected": _expected(row["output_text"], row["tool_calls"]),
            "metadata": {
                "run_id": row["run_id"], "prompt_version": row["prompt_version"],
                "started_at": _iso(row["started_at"]),
            },
        })
    return cases


def write_cases(cases: list[dict], out) -> None:
    """JSON lines, one case a line, keys sorted (a stable, reviewable file)."""
    text = "".join(json.dumps(case, sort_keys=True, ensure_ascii=False) + "\n" for case in cases)
    if out is None or str(out) == "-":
        import sys

        sys.stdout.write(text)
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
