"""Insight's verdicts and compactions do not depend on how ingestion cut the traffic into batches:
the same spool ingested call by call, a few calls a batch, or all at once, gives the same rows.

Each lineage's cache state is carried from one batch to the next (in the store, with the batch's
rows), so an expired entry is named by the call that made it at every batch size, as one batch of
everything names it; a batch that arrives out of clock order is judged by replaying the stored calls.

The traffic is what the recorder spools for real-shaped exchanges (parsed by the wire layer, the
prefix record captured from the request bytes): conversations over a shared system prompt long
enough to be cached, some turns reading the previous turn's prefix, a conversation that compacts
its history into a summary another call wrote, and a gap longer than the cache's life."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest

from workbench.capture.recorder import _CALL_BODY_FIELDS
from workbench.insight import carried, prefix, verdicts
from workbench.store.ingest import ingest_spools
from workbench.store.spool import Spool
from workbench.wire import Exchange, parse_exchange

SYSTEM = ("You are the support agent of an online shop; answer in two sentences. " * 90)[:6000]
ANSWER = " ".join(["lorem ipsum dolor sit amet"] * 12)
SUMMARY = "Summary of the conversation so far: the customer asked where the order is, twice, politely."
START = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def _call(messages: list[dict], at: datetime, cached: int, run_id: str | None, output: str = ANSWER) -> list:
    request = json.dumps({"model": "gpt-4o-mini", "messages": messages}).encode()
    prompt = len(request) // 4
    response = json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": output}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 60, "total_tokens": prompt + 60,
                  "prompt_tokens_details": {"cached_tokens": min(cached, prompt)}}}).encode()
    call = parse_exchange(Exchange(url="https://api.openai.com/v1/chat/completions", request_body=request, status=200,
                                   response_headers={"content-type": "application/json"}, response_body=response))
    call.call_id, call.run_id = uuid.uuid4().hex, run_id
    call.started_at = call.first_byte_at = call.ended_at = at
    call.cost_micros, call.price_source, call.currency = 12345, None, "USD"
    row = call.flat()
    body = {name: row.pop(name) for name in _CALL_BODY_FIELDS} | {"call_id": call.call_id}
    found = prefix.captured(call.call_id, call.wire, call.model_requested, request, None, at.isoformat(), None)
    return [("call_prefix", found), ("call", row), ("call_body", body)]


def _traffic() -> list[list]:
    """Calls in clock order, each its records."""
    calls, at = [], START
    for conversation in range(6):
        run = f"run-{conversation}"
        history = [{"role": "system", "content": SYSTEM}]
        for turn in range(4):
            history.append({"role": "user", "content": f"Question {turn} of conversation {conversation}: where is it?"})
            cached = len(json.dumps(history[:-1])) // 4 if turn else 1500  # the system prompt, or the last turn
            fresh = turn == 0 and conversation in (0, 4)  # the first call, and the first after the gap
            calls.append(_call(list(history), at, 0 if fresh else cached, run))
            history.append({"role": "assistant", "content": ANSWER + f" ({conversation}.{turn})"})
            at += timedelta(seconds=20)
        if conversation == 2:  # a summary call, then the conversation goes on compacted
            calls.append(_call(list(history), at, 1500, run, output=SUMMARY))
            at += timedelta(seconds=5)
            history = [history[0], {"role": "user", "content": SUMMARY}, *history[-2:],
                       {"role": "user", "content": "And now?"}]
            calls.append(_call(list(history), at, 1500, run))
            at += timedelta(seconds=20)
        if conversation == 3:
            at += timedelta(minutes=7)  # longer than the cache's life: what was written expires
    return calls


EXPIRED = 18  # the first call after the gap: conversations 0-3, four turns each, and conversation 2's two more


def _derived(db: Path) -> dict[str, list[tuple]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {name: con.execute(sql).fetchall() for name, sql in {
            "verdicts": "SELECT call_id, cache_verdict, cache_region, cache_miss_micros, cache_entry_call_id, "
                        "cache_write_micros, cache_expires_at FROM calls ORDER BY call_id",
            "prefixes": "SELECT call_id, lineage, keys, diff FROM call_prefixes ORDER BY call_id",
            "reads": "SELECT call_id, first_read_at, read_by FROM cache_reads ORDER BY call_id",
            "compactions": "SELECT * EXCLUDE (compaction_id) FROM compactions ORDER BY after_call_id",
        }.items()}


def _ingest(folder: Path, calls: list[list], batch: int, after_batch=lambda: None) -> dict[str, list[tuple]]:
    db, spool_dir = folder / "wb.duckdb", folder / "spool"
    spool = Spool(db, spool_dir, flush_interval_s=3600)
    for start in range(0, len(calls), batch):
        for records in calls[start:start + batch]:
            for kind, row in records:
                spool.append(kind, row)
        spool.flush(ingest=False)
        ingest_spools(db, spool_dir)
        after_batch()
    return _derived(db)


@pytest.mark.parametrize("batch", [1, 3, 7])
def test_small_batches_give_the_verdicts_and_compactions_of_one_batch(tmp_path, batch):
    calls = _traffic()
    whole = _ingest(tmp_path / "whole", calls, len(calls))
    assert {verdict for _, verdict, *_ in whole["verdicts"]} >= {"hit", "expired"}
    assert any(row[4] for row in whole["verdicts"])  # a hit names the call whose entry it read
    assert len(whole["compactions"]) == 1 and whole["reads"]
    expired = next(row for row in whole["verdicts"] if row[0] == calls[EXPIRED][1][1]["call_id"])
    assert expired[1:2] + expired[4:5] == ("expired", calls[0][1][1]["call_id"])  # named by the call that made it
    assert _ingest(tmp_path / "small", calls, batch) == whole


def test_a_new_process_judges_from_the_state_in_the_store(tmp_path):
    """An ingester that did not write the lineage's state (a new process) reads it from the store
    and gives the same rows as the one that kept it in memory."""
    calls = _traffic()
    whole = _ingest(tmp_path / "whole", calls, len(calls))
    db, spool_dir = tmp_path / "fresh" / "wb.duckdb", tmp_path / "fresh" / "spool"
    spool = Spool(db, spool_dir, flush_interval_s=3600)
    for start in range(0, len(calls), 5):
        for records in calls[start:start + 5]:
            for kind, row in records:
                spool.append(kind, row)
        spool.flush(ingest=False)
        carried._held.clear()  # what a new ingester process holds
        ingest_spools(db, spool_dir)
    assert _derived(db) == whole
    with duckdb.connect(str(db), read_only=True) as con:
        states = con.execute("SELECT lineage, last_call_id FROM insight_lineages").fetchall()
    assert [last for _, last in states] == [calls[-1][1][1]["call_id"]]  # one lineage, at its latest call


def test_a_batch_whose_commit_failed_is_judged_again_and_only_the_committed_state_is_held(tmp_path, monkeypatch):
    """A batch the store could not commit (a full disk) stays in the spool and is judged again by the
    next ingest, from the state the store holds: the same rows as one batch of everything, and the
    process holds the state it committed, not also the one of the batch that never went in."""
    from workbench.store import ingest

    calls = _traffic()
    whole = _ingest(tmp_path / "whole", calls, len(calls))
    real, failures = ingest.commit_frames, []

    def commit_frames(con, frames, *args, **kwargs):
        if "lineage_state" in frames and failures:
            failures.pop()
            raise duckdb.IOException("Could not write file: No space left on device")
        return real(con, frames, *args, **kwargs)

    monkeypatch.setattr(ingest, "commit_frames", commit_frames)
    before = set(carried._held)
    db, spool_dir = tmp_path / "full" / "wb.duckdb", tmp_path / "full" / "spool"
    spool = Spool(db, spool_dir, flush_interval_s=3600)
    for index, start in enumerate(range(0, len(calls), 5)):
        for records in calls[start:start + 5]:
            for kind, row in records:
                spool.append(kind, row)
        spool.flush(ingest=False)
        if index == 2:  # the third batch's commit fails once
            failures.append(1)
            with pytest.raises(duckdb.IOException):
                ingest_spools(db, spool_dir)
        ingest_spools(db, spool_dir)
    assert not failures and _derived(db) == whole
    with duckdb.connect(str(db), read_only=True) as con:
        stored = {version for (version,) in con.execute("SELECT version FROM insight_lineages").fetchall()}
    assert len(stored) == 1 and set(carried._held) - before == stored


def test_a_batch_older_than_its_lineage_state_is_replayed(tmp_path):
    """Traffic that reaches the store out of clock order (a late spool): the late batch is judged by
    replaying the stored calls around it, and every call gets the verdict, prefix keys and compaction
    it gets in clock order."""
    calls = _traffic()
    whole = _ingest(tmp_path / "whole", calls, len(calls))
    db, spool_dir = tmp_path / "late" / "wb.duckdb", tmp_path / "late" / "spool"
    spool = Spool(db, spool_dir, flush_interval_s=3600)
    for part in (calls[:EXPIRED + 1], calls[EXPIRED + 4:], calls[EXPIRED + 1:EXPIRED + 4]):  # the last part late
        for records in part:
            for kind, row in records:
                spool.append(kind, row)
        spool.flush(ingest=False)
        ingest_spools(db, spool_dir)
    late = _derived(db)
    assert {name: rows for name, rows in late.items() if name != "reads"} == {
        name: rows for name, rows in whole.items() if name != "reads"}



def test_a_long_stream_of_runs_holds_a_bounded_state_and_a_run_let_go_is_read_back(tmp_path):
    """An eval's every case is a run: the state carried from batch to batch holds the calls of the
    latest runs only, however many went by, and a run it let go that goes on (here: compacts its
    history after 600 other runs) is read back from the store, with the rows of one batch."""
    calls, at = [], START
    history = [{"role": "system", "content": SYSTEM}]
    for turn in range(4):
        history.append({"role": "user", "content": f"Question {turn}: where is it?"})
        calls.append(_call(list(history), at, 1500 if turn else 0, "conversation"))
        history.append({"role": "assistant", "content": ANSWER + f" ({turn})"})
        at += timedelta(seconds=20)
    for case in range(600):
        calls.append(_call([history[0], {"role": "user", "content": f"Case {case}: where is it?"}], at, 1500,
                           f"case-{case}"))
        at += timedelta(milliseconds=100)
    # the conversation goes on, its history compacted into a summary: compared with its last call
    calls.append(_call([history[0], {"role": "user", "content": SUMMARY}, *history[-2:],
                        {"role": "user", "content": "And now?"}], at, 1500, "conversation"))
    whole = _ingest(tmp_path / "whole", calls, len(calls))
    # compared with its last call before, 600 runs earlier
    assert [row[-7:-5] for row in whole["compactions"]] == [(calls[3][1][1]["call_id"], calls[-1][1][1]["call_id"])]
    assert {verdict for _, verdict, *_ in whole["verdicts"]} == {"cold", "hit"}

    held = []
    stream = _ingest(tmp_path / "stream", calls, 50, lambda: held.append(
        max(sum(len(run) for run in state.runs.values()) for state in carried._held.values())))
    assert max(held) <= 300 < len(calls)  # calls of runs held between batches (every run's, 605, before)
    assert stream == whole


def test_distinct_prompts_hold_a_bounded_state_and_a_prefix_let_go_is_read_back(tmp_path, monkeypatch):
    """A suite of distinct prompts within one cache life: the state carried from batch to batch holds
    the prefixes and regions of its latest calls only (CALLS_KEPT, made small here), and a call
    compared with a call it let go (the question of a case 100 calls earlier, under another system
    prompt: prefix_changed) finds it in the store, with the rows of one batch."""
    monkeypatch.setattr(verdicts, "CALLS_KEPT", 40)
    calls, at = [], START
    for case in range(120):
        calls.append(_call([{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Case {case}: where is it?"}],
                           at, 1500 if case % 2 else 0, f"case-{case}"))
        at += timedelta(milliseconds=100)
    calls.append(_call([{"role": "system", "content": SYSTEM + " Be brief."},
                        {"role": "user", "content": "Case 3: where is it?"}], at, 0, "changed"))
    whole = _ingest(tmp_path / "whole", calls, len(calls))
    changed = next(row for row in whole["verdicts"] if row[0] == calls[-1][1][1]["call_id"])
    assert changed[1:3] + changed[4:5] == ("prefix_changed", "system block 0", calls[3][1][1]["call_id"])

    held = []
    carried._held.clear()  # the states of the one-batch ingest above
    stream = _ingest(tmp_path / "stream", calls, 10, lambda: held.append(
        max(len({id(call) for call in (*state.by_prefix.values(), *state.by_block.values())})
            for state in carried._held.values())))
    assert max(held) <= 40 < len(calls)  # calls held as the latest of a prefix or region (every call's before)
    assert stream == whole
