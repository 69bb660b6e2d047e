"""Checkpoints: an agent run's state at every turn boundary, in the store.

After a turn's tool results (or its correction) land, and before the next turn is bought, the run's
state (`RunState`: the conversation with every tool result, the turns used, the running bill, what
its budget ledger has spent, its compaction state) is written as a `checkpoints` row, through the
spool like every other record; `on_checkpoint` sees it. `Agent.resume(run_id)` reads the last one
and goes on from there in a new run (tagged `resumed_from`), so no turn is paid twice and no tool
whose result is in the checkpoint runs again. A run's first checkpoint (and its first after a
compaction) holds the full state, the others only the turns added since, so a long run's checkpoints
grow linearly with it. A process killed DURING a turn re-buys that one turn
(its tools may run again: tools must be idempotent), and the spool's flush interval (0.5 s) bounds
what a crash can lose of the last checkpoint."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from workbench.capture import Billed, flush, recorder
from workbench.errors import WorkbenchError
from workbench.ids import new_id
from workbench.runtime.transcript import RunState, sign


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint, as `on_checkpoint` receives it."""

    checkpoint_id: str
    run_id: str
    turn: int  # turns used so far (the next turn is turn + 1)
    run: Billed  # the conversation's running bill, every earlier run of it included
    state: RunState

    def transcript(self) -> str:
        """The same state as a signed transcript handle (needs WORKBENCH_TRANSCRIPT_SECRET)."""
        return sign(self.state)


class Writer:
    """One run's checkpoints. The first (and the first after a compaction) holds the full state;
    the others only the turns added since, so a long run's checkpoints grow with it linearly."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._written: tuple[int, str | None, int] | None = None  # summarised, summary, turns

    def write(self, state: RunState) -> str:
        """Spool one checkpoint row; returns its id. Fail-open like all recording: a store that
        cannot take it is logged by the spool and the run goes on."""
        conversation = state.conversation
        data = state.to_json()
        written = self._written
        full = written is None or written[:2] != (conversation.summarised, conversation.summary) \
            or written[2] > len(conversation.turns)
        if not full:
            data["turns_from"] = written[2]
            data["turns"] = data["turns"][written[2]:]
        self._written = (conversation.summarised, conversation.summary, len(conversation.turns))
        checkpoint_id = new_id()
        prompt = state.prompt or {}
        row = {
            "checkpoint_id": checkpoint_id, "run_id": self.run_id, "agent": state.agent, "turn": state.turn,
            "created_at": datetime.now(timezone.utc).isoformat(), "model": state.model,
            "prompt_id": prompt.get("prompt_id"), "prompt_version": prompt.get("prompt_version"),
            "prompt_hash": prompt.get("prompt_hash"), "full_state": full,
            "state": json.dumps(data, ensure_ascii=False, separators=(",", ":")),
        }
        try:
            recorder().spool.append("checkpoint", row)
        except Exception:  # noqa: BLE001 - recording never breaks the run
            pass
        return checkpoint_id


def load(run_id: str) -> RunState:
    """The last checkpoint of `run_id`, read from the store (what this process spooled included)."""
    from workbench.store.queries import StoreMissing, read
    from workbench.store.queries.runtime import last_checkpoint

    flush()
    settings = recorder().settings
    try:
        rows = read(settings.db, settings.resolved_spool_dir, lambda con: last_checkpoint(con, run_id))
    except StoreMissing:
        rows = []
    if not rows:
        raise WorkbenchError(
            "WB_AGENT_CHECKPOINT_MISSING",
            f"run {run_id!r} has no checkpoint in {settings.db} (it never finished a turn, was not an agent "
            "run, or its id is wrong)",
            "list agent runs with `workbench runs list`, or run the agent again from the start",
        )
    try:
        return RunState.from_json(_assembled(rows))
    except (ValueError, TypeError, KeyError) as exc:
        raise WorkbenchError(
            "WB_AGENT_TRANSCRIPT_INVALID", f"the last checkpoint of run {run_id!r} cannot be read: {exc}",
            "run the agent again from the start (a checkpoint that cannot be read is never trusted)",
        ) from None


def _assembled(rows: list[str]) -> dict:
    """A full state and the deltas after it, as one state."""
    state = json.loads(rows[0])
    if "turns_from" in state:
        raise ValueError("its first part is not a full state")
    for text in rows[1:]:
        delta = json.loads(text)
        if delta.get("turns_from") != len(state["turns"]):
            raise ValueError(f"a part adds turns from {delta.get('turns_from')!r}, not {len(state['turns'])}")
        turns = state["turns"] + delta.pop("turns")
        delta.pop("turns_from")
        state = {**state, **delta, "turns": turns}
    return state
