"""Resume any run from the store: `workbench.run(name, resume=RUN_ID)`, or `workbench runs resume
RUN_ID -- COMMAND` for a script, pays for nothing the earlier run already paid for.

The earlier run's answered calls (a 2xx, whole, of the run and the runs inside it; when it answered
nothing itself, those of the run it resumed) are a cassette held in memory: the replay transport
answers a request whose canonical request hash (the one replay matches on) is one of theirs, each
recording once, identical requests in recorded order, marked replayed and linked to the call that
paid (`resumed_from_call_id`). The first request that matches none of them ends the replay: it and
everything after it go to the provider, since a run that took another path cannot trust the
earlier answers any more. A call whose stored body was cut at the body size cap is not replayed."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from workbench.capture import flush, recorder
from workbench.capture.route import RESUME_ENV, set_router
from workbench.capture.runs import Run, current_run
from workbench.capture.transport import RESUMED_FROM_CALL
from workbench.errors import WorkbenchError
from workbench.locks import held
from workbench.replay import ambient
from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse
from workbench.replay.matcher import CassetteIndex
from workbench.wire.redact import CUT_MARKER


class _Answers(CassetteIndex):
    """The earlier run's answers by request hash, each played once; the first request that matches
    none ends the replay (`diverged` names its hash)."""

    diverged: str | None = None

    def take(self, digest: str, repeat: bool = True) -> int | None:
        if self.diverged is not None:
            return None
        index = super().take(digest, repeat=False)
        if index is None:
            self.diverged = digest
        return index


class StoredRun:
    """An earlier run's answers, in the shape the replay transport reads a cassette in: `record`
    mode (replay what matches, send the rest), nothing ever written."""

    mode = "record"
    body_hook = filters = None
    match_body = True

    def __init__(self, run_id: str, answers) -> None:
        self.run_id = run_id
        self.path = f"run {run_id}"  # the replayed calls' `cassette`
        self.session = uuid.uuid4().hex  # one cache lineage for the replayed calls, as a cassette load
        self.misses: list = []
        self.matched_without_body = 0
        interactions, hashes, self.origins = [], [], []
        for row in answers.iter_rows(named=True):
            request, response = row["request_json"], row["response_json"]
            if request is None or response is None or CUT_MARKER in request or CUT_MARKER in response:
                continue
            content_type = "text/event-stream" if row["stream"] else "application/json"
            interactions.append(Interaction.model_construct(
                request=RecordedRequest.model_construct(method=row["method"] or "POST", uri=row["url"],
                                                        headers={}, body=request.encode()),
                response=RecordedResponse.model_construct(status=row["http_status"], reason="",
                                                          headers={"content-type": [content_type]},
                                                          body=response.encode()),
            ))
            hashes.append(row["request_hash"])
            self.origins.append(row["origin_call_id"])
        self.index = _Answers(interactions, hashes)

    @property
    def replaying(self) -> bool:
        return self.index.diverged is None

    def origin(self, index: int) -> dict:
        return {RESUMED_FROM_CALL: self.origins[index]}

    def record(self, interaction: Interaction) -> None:
        """A live answer: capture records it in the store like any call; nothing is kept here."""

    def save(self) -> None:
        pass


def _source(run: Run | None) -> StoredRun | None:
    while run is not None:
        if isinstance(run.source, StoredRun):
            return run.source
        run = run.parent
    return None


def _route(inner, module, asynchronous: bool):
    source = _source(current_run())
    if source is not None and source.replaying:
        return ambient.replaying(source, inner, module, asynchronous)
    return ambient._route(inner, module, asynchronous)


set_router(_route)

_claimed_env: str | None = None  # the run RESUME_ENV names, once a run of this process resumed it
_env_name: str | None = None  # that run's name, once read


def open_resume(run: Run, given: str | None) -> None:
    """Make `run` answer from the store what the run `given` names already answered. `given` None:
    the run `WORKBENCH_RESUME_RUN` names, when `run` is the first top-level run of the process under
    that run's name."""
    global _claimed_env, _env_name
    from_env = given is None
    if from_env:
        given = os.environ.get(RESUME_ENV)
        # another run of the command: only the one named like the earlier run resumes it
        if not given or _claimed_env is not None or _env_name not in (None, run.name):
            return
        _env_name = resumable(given)["name"]
        if _env_name != run.name:
            return
    row, answers = resumable(given, answers=True)
    if from_env:
        _claimed_env = row["run_id"]
    run.resumed_from_run_id = row["run_id"]
    run.source = StoredRun(row["run_id"], answers)


def resumable(given: str, answers: bool = False):
    """The stored row of the run `given` names (its id or a unique start of it), refused when it is
    unknown, ambiguous or still running; with `answers`, also what a resume of it replays."""
    from workbench.store import queries
    from workbench.store.queries import StoreMissing, read

    flush()  # what this process spooled is read too
    settings = recorder().settings

    def load(con):
        whole = queries.resolve_run_id(con, given)
        row = queries.run_detail(con, whole).row(0, named=True)
        return row, (queries.resume_answers(con, whole) if answers else None)

    try:
        row, found = read(settings.db, settings.resolved_spool_dir, load)
    except StoreMissing:
        raise WorkbenchError("WB_RUN_NOT_FOUND", f"no store at {settings.db}, so no run {given!r} to resume",
                             "point WORKBENCH_DB (or --db) at the store the earlier run was recorded in") from None
    _refuse_running(row)
    return (row, found) if answers else row


def _refuse_running(row: dict) -> None:
    """A run stored as `running` is resumable only when its process is gone (its lock is free)."""
    if row["status"] != "running" or not row["process_lock"]:
        return
    lock = Path(row["process_lock"])
    if held(lock):
        raise WorkbenchError(
            "WB_RUN_STILL_RUNNING",
            f"run {row['run_id']} ({row['name']!r}, started {row['started_at']}) is still running in a live process",
            "let it finish or stop its process, then resume it; or resume a run that has ended (workbench runs list)",
        )
    lock.unlink(missing_ok=True)  # left by the killed process
