"""A captured run becomes a cassette and an eval case, so a failure seen in the dashboard becomes a
regression test: `workbench cassettes export --run RUN_ID OUT`."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse, write_cassette
from workbench.replay.scrub import scrub
from workbench.store import queries
from workbench.store.db import open_store
from workbench.wire.redact import CUT_MARKER


def export_run(run_id: str, out: Path | str, db: Path | str | None = None, *, within: Path | None = None,
               overwrite: bool = True) -> tuple[Path, Path]:
    """Write the run's calls as a cassette at `out` and its case beside it (`<out>.case.jsonl`);
    `run_id` may be the start of the id, when only one run's id starts so. `within`: `out` is relative to that folder and must stay inside it (the dashboard's export,
    whose path comes from a browser); `overwrite=False`: refuse to replace either file."""
    out = Path(out) if within is None else confined(Path(out), within)
    case_path = out.with_name(out.stem + ".case.jsonl")
    if within is not None and not case_path.resolve().is_relative_to(within.resolve()):  # a link out of it
        raise WorkbenchError("WB_EXPORT_REFUSED", f"{case_path} leads out of {within.resolve()}",
                             "remove the link, or choose another file name")
    existing = [str(path) for path in (out, case_path) if path.exists()]
    if existing and not overwrite:
        raise WorkbenchError("WB_EXPORT_REFUSED", f"{' and '.join(existing)} already exist",
                             "choose another file name, or choose to replace the files")
    with open_store(db, read_only=True) as con:
        run_id = queries.resolve_run_id(con, run_id)  # a unique start or end names the run too
        run = queries.run_detail(con, run_id)
        calls = queries.run_exchanges(con, run_id)
    interactions = []
    for row in calls.iter_rows(named=True):
        for side in ("request_json", "response_json"):
            if row[side] and CUT_MARKER in row[side]:
                raise WorkbenchError(
                    "WB_CASSETTE_INVALID",
                    f"call {row['call_id']} of run {run_id} was stored with its {side} cut at the body size cap",
                    "raise WORKBENCH_BODY_CAP_BYTES and capture the run again, or record it with a cassette",
                )
        content_type = "text/event-stream" if row["stream"] and row["http_status"] == 200 else "application/json"
        interactions.append(scrub(Interaction(
            request=RecordedRequest(
                method=row["method"] or "POST", uri=row["url"],
                headers={"content-type": ["application/json"]}, body=(row["request_json"] or "").encode(),
            ),
            response=RecordedResponse(
                status=row["http_status"] or 599, headers={"content-type": [content_type]},
                body=(row["response_json"] or "").encode(),
            ),
        )))
    write_cassette(out, interactions, {"exported_from_run": run_id})
    first = run.row(0, named=True)
    # the id's random end: its start is the clock (workbench/ids.py), shared by runs made together
    case = {
        "id": f"run-{run_id[-12:]}", "run_id": run_id, "name": first["name"], "status": first["status"],
        "error_code": first["error_code"], "prompt_id": first["prompt_id"], "prompt_version": first["prompt_version"],
        "cassette": out.name, "tags": json.loads(first["tags"] or "{}"),
        "input": _last_user_text(calls["request_json"].to_list()[-1] if calls.height else None),
        "expected": None,
    }
    case_path.write_text(json.dumps(case, sort_keys=True) + "\n", encoding="utf-8")
    return out, case_path


def confined(path: Path, folder: Path) -> Path:
    """`path`, relative to `folder`, as a cassette file inside it: never absolute, never out of it
    (`..`, a link), never anything but a `.json` or `.yaml` cassette."""
    root = folder.resolve()
    target = (root / path).resolve()
    if path.is_absolute() or not target.is_relative_to(root) or target == root or target.is_dir():
        raise WorkbenchError("WB_EXPORT_REFUSED", f"{str(path)!r} is not a file inside {root}",
                             f"give a path relative to {root}, such as exported/run.json")
    if target.suffix not in (".json", ".yaml", ".yml"):
        raise WorkbenchError("WB_EXPORT_REFUSED", f"{str(path)!r} is not a cassette file (.json or .yaml)",
                             "end the file name with .json or .yaml")
    return target


def _last_user_text(request_json: str | None) -> str | None:
    """The last user message of a request body, any wire; what the case replays as its input."""
    try:
        body = json.loads(request_json or "")
    except ValueError:
        return None
    messages = body.get("messages") or body.get("input") or []
    if isinstance(messages, str):
        return messages
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            texts = [part.get("text", "") for part in content or [] if isinstance(part, dict)]
            return "".join(texts) or None
    return None
