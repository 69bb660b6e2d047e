"""Spool ingestion: batched, idempotent by key, offsets committed with the rows, torn lines ignored,
the files of dead processes removed once ingested."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import duckdb

from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools
from workbench.store.spool import Spool

DEAD = f"{socket.gethostname()}-999999999-deadbeef.jsonl"  # no such pid: its writer is gone


def _line(kind: str, row: dict) -> bytes:
    return (json.dumps({"kind": kind, "row": row}) + "\n").encode()


def _call(call_id: str, **extra) -> bytes:
    return _line("call", {"call_id": call_id, "input_tokens": 3, "output_tokens": 4, "settled": True,
                          "tool_names": ["a"], "started_at": "2025-01-01T00:00:00+00:00", **extra})


def _rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_torn_lines_are_skipped_and_dead_files_removed(tmp_path):
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    spool.mkdir()
    # a torn line in the middle (a crash, then the file appended to again), and a torn last line
    (spool / DEAD).write_bytes(_call("c1") + b'{"kind": "call", "row": {"call_id": "c-to' + b"\n" + _call("c2")
                               + b'{"kind": "call", "row": {"call_')
    assert ingest_spools(db, spool) == 2
    assert _rows(db, "SELECT call_id, input_tokens, tool_names FROM calls ORDER BY call_id") == [
        ("c1", 3, ["a"]), ("c2", 3, ["a"])]
    assert not (spool / DEAD).exists()  # its writer is dead; the torn tail will never be completed
    assert _rows(db, "SELECT count(*) FROM spool_offsets") == [(0,)]


def test_a_large_backlogs_rest_is_not_read_whole_to_find_a_line_end(tmp_path):
    """After each batch the ingester asks whether the rest of a file is one torn line: it reads until
    a line ends, not the whole rest (a 300 MB backlog file was the ingester's peak memory)."""
    import tracemalloc

    from workbench.store.ingest import _torn_tail_only

    path = tmp_path / "big.jsonl"
    path.write_bytes(_call("c1") * (32 * 2**20 // len(_call("c1"))))  # 32 MB of whole lines
    tracemalloc.start()
    try:
        assert not _torn_tail_only(path, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    path.write_bytes(_call("c1") + b"x" * 300_000)  # a torn tail longer than a block
    assert _torn_tail_only(path, len(_call("c1"))) and not _torn_tail_only(path, 0)
    assert _torn_tail_only(path, path.stat().st_size)  # nothing after the offset


def test_ingest_is_idempotent_and_offsets_move(tmp_path):
    db, spool_dir = tmp_path / "wb.duckdb", tmp_path / "spool"
    spool = Spool(db, spool_dir, flush_interval_s=3600)  # this process's own (live) spool file
    spool.append("call", {"call_id": "x1", "input_tokens": 1})
    spool.append("run", {"run_id": "r1", "name": "job", "status": "running"})
    spool.flush(ingest=False)
    assert ingest_spools(db, spool_dir) == 2
    assert ingest_spools(db, spool_dir) == 0  # nothing new: the offset moved with the rows
    spool.append("run", {"run_id": "r1", "name": "job", "status": "ok", "billed_calls": 1})
    spool.append("call", {"call_id": "x1", "input_tokens": 999})  # the same id again: kept once
    spool.flush(ingest=False)
    ingest_spools(db, spool_dir)
    assert _rows(db, "SELECT call_id, input_tokens FROM calls") == [("x1", 1)]
    assert _rows(db, "SELECT status, billed_calls FROM runs") == [("ok", 1)]  # a run's later row wins
    # even with its offset forgotten, re-reading the whole file doubles nothing
    with open_store(db) as con:
        con.execute("DELETE FROM spool_offsets")
    ingest_spools(db, spool_dir)
    assert _rows(db, "SELECT count(*) FROM calls") == [(1,)]
    assert _rows(db, "SELECT count(*) FROM runs") == [(1,)]
    assert list(spool_dir.glob("*.jsonl"))  # a live process's file stays


def test_running_then_ok_in_one_batch_keeps_the_last(tmp_path):
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    spool.mkdir()
    (spool / DEAD).write_bytes(_line("run", {"run_id": "r", "status": "running"})
                               + _line("run", {"run_id": "r", "status": "failed", "error_type": "ValueError"}))
    ingest_spools(db, spool)
    assert _rows(db, "SELECT status, error_type FROM runs") == [("failed", "ValueError")]


def test_the_fast_parse_gives_the_frames_of_the_line_by_line_one(tmp_path):
    """A batch is parsed natively by polars; the checked line-by-line parse (a torn line's or a bad
    record's path) must agree."""
    from workbench.store.frames import parse_frames, record_schemas
    from workbench.store.ingest import _checked_records, _Chunk, _frames_of

    spool = Spool(tmp_path / "wb.duckdb", tmp_path / "spool", flush_interval_s=3600)
    tricky = 'naïve "quotes", a \\ backslash, {"kind":"run","row":{}} and ","row": inside, 😀'
    spool.append("call", {"call_id": "c1", "input_tokens": 5, "tool_names": ["a", tricky], "settled": True,
                          "started_at": "2025-01-01T00:00:00+00:00", "model_served": None})
    spool.append("call_body", {"call_id": "c1", "request_json": tricky, "response_json": "{}", "tool_calls": None})
    spool.append("run", {"run_id": "r1", "name": tricky, "status": "ok", "billed_cost_micros": 12})
    spool.append("run_tag", {"run_id": "r1", "key": "k", "value": tricky})
    spool.append("span", {"span_id": "s1", "trace_id": "t1", "name": "chat", "attributes": '{"a": 1}'})
    spool.flush(ingest=False)
    data = next((tmp_path / "spool").glob("*.jsonl")).read_bytes()
    with open_store(tmp_path / "wb.duckdb") as con:
        schemas = record_schemas(con)
        fast = parse_frames(data, schemas)
        records, quarantined = _checked_records([_Chunk("f.jsonl", 0, data)], schemas)
        slow = _frames_of(con, records, None)
    assert quarantined == []
    assert set(fast) == set(slow) == {"call", "call_body", "run", "run_tag", "span"}
    for kind in fast:
        assert fast[kind].to_dicts() == slow[kind].to_dicts(), kind
    assert fast["run_tag"].to_dicts()[0]["value"] == tricky


def test_the_orjson_parse_gives_the_frames_of_polars_reader(tmp_path):
    """A batch's columns are built by polars from orjson's parse; polars' NDJSON reader (what a batch
    of odd values falls back to) must give the same frames, types and all."""
    from workbench.store.frames import _frames_orjson, _frames_polars, record_schemas

    tricky = 'naïve "quotes", a \\ backslash, {"kind":"run","row":{}} and 😀'
    data = b"".join([
        _call("c1", tool_names=["a", tricky], cost_micros=2**62, model_served=None),
        _call("c2", tool_names=[], input_tokens=None),
        _line("call_body", {"call_id": "c1", "request_json": tricky, "tool_calls": None}),
        _line("call_prefix", {"call_id": "c1", "blocks": [-(2**63), 2**63 - 1], "sizes": [3, 4], "marks": [],
                              "explicit": False, "ttl_s": 300}),
        _line("run", {"run_id": "r1", "name": tricky, "status": "ok", "billed_cost_micros": 12}),
        b"\n",  # a blank line is no record
        _line("span", {"span_id": "s1", "trace_id": "t1", "name": "chat", "attributes": '{"a": 1}'}),
    ])
    with open_store(tmp_path / "wb.duckdb") as con:
        schemas = record_schemas(con)
    parsed, native = _frames_orjson(data, schemas), _frames_polars(data, schemas)
    assert parsed is not None and set(parsed) == set(native) == {"call", "call_body", "call_prefix", "run", "span"}
    for kind in native:
        assert parsed[kind].schema == native[kind].schema, kind
        assert parsed[kind].to_dicts() == native[kind].to_dicts(), kind


def test_a_value_not_of_its_columns_type_goes_in_as_polars_reader_takes_it(tmp_path):
    """A number in a text column is not the orjson parse's to judge: the batch is read as before (polars turns
    it into its text), and a float in an integer column is quarantined, never truncated."""
    from workbench.store.frames import _frames_orjson, record_schemas

    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    spool.mkdir()
    with open_store(db) as con:
        assert _frames_orjson(_call("c1", model_served=7), record_schemas(con)) is None
    (spool / DEAD).write_bytes(_call("c1", model_served=7))
    ingest_spools(db, spool)
    (spool / DEAD).write_bytes(_call("c2", input_tokens=1.5) + _call("c3"))
    ingest_spools(db, spool)
    assert _rows(db, "SELECT call_id, model_served, input_tokens FROM calls ORDER BY 1") == [
        ("c1", "7", 3), ("c3", None, 3)]
    assert _rows(db, "SELECT reason FROM quarantine") == [("calls.input_tokens: 1.5 is not an integer",)]


def test_a_batch_cut_by_its_budget_ends_between_calls(tmp_path):
    """A call's records (its prefix line, the call, its body) are read in one batch, so insight
    judges the call with its prefix: a budget that ends mid-call ends the batch before that call."""
    from workbench.store.ingest import _read_lines

    lines = []
    for n in range(3):
        lines += [{"kind": "call_prefix", "row": {"call_id": f"c{n}"}}, {"kind": "call", "row": {"call_id": f"c{n}"}},
                  {"kind": "call_body", "row": {"call_id": f"c{n}", "request_json": "x" * 50}}]
    spool = tmp_path / "host-1-0badf11e.jsonl"
    spool.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    whole = spool.read_bytes()
    offset, batches = 0, []
    while offset < len(whole):
        data, offset = _read_lines(spool, offset, limit=len(whole) // 2)  # ends inside the second call
        batches.append([json.loads(line) for line in data.splitlines()])
    assert [[(line["kind"], line["row"]["call_id"]) for line in batch] for batch in batches][0] == [
        ("call_prefix", "c0"), ("call", "c0"), ("call_body", "c0")]
    assert sum(batches, []) == lines  # nothing lost, nothing read twice


def _backlog(spool: Path, calls: int) -> None:
    """A dead writer's spool of `calls` calls, each with a 4 KB body and a span."""
    spool.mkdir()
    body = "fox " * 1000
    with open(spool / DEAD, "wb") as handle:
        for index in range(calls):
            handle.write(_call(f"c{index}", span_id=f"s{index}") + _line(
                "call_body", {"call_id": f"c{index}", "request_json": json.dumps({"content": body + str(index)}),
                              "output_text": body}) + _line(
                "span", {"span_id": f"s{index}", "trace_id": "t", "name": "chat", "start_time": "2025-01-01T00:00:00+00:00"}))


def _limit_shown(limit: str) -> str:
    """How DuckDB shows a memory limit once set (e.g. 64MB as 61.0 MiB)."""
    con = duckdb.connect()
    try:
        con.execute(f"SET memory_limit = '{limit}'")
        return con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    finally:
        con.close()


def _limits_seen(monkeypatch) -> list[str]:
    """The limit in force on the ingest's connection, each batch, read from inside the ingest."""
    from workbench.insight import ingest as insight

    seen, real = [], insight.derive

    def derive(con, frames):
        seen.append(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])
        return real(con, frames)

    monkeypatch.setattr(insight, "derive", derive)
    return seen


def test_an_ingest_within_duckdbs_memory_limit_stores_every_record(tmp_path, caplog, monkeypatch):
    from workbench.store import ingest

    seen = _limits_seen(monkeypatch)
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    _backlog(spool, 3_000)  # 27 MB of spool, 4 batches
    with caplog.at_level("INFO", logger="workbench.store"):
        assert ingest_spools(db, spool, own_process=True) == 9_000
    assert "without the limit" not in caplog.text  # done within the limit, never again without it
    assert len(seen) == 4 and set(seen) == {_limit_shown(ingest.INGEST_MEMORY_LIMIT)}
    assert _limit_shown(ingest.INGEST_MEMORY_LIMIT) == _limit_shown("64MB")
    assert _rows(db, "SELECT count(*), count(DISTINCT call_id), sum(length(b.request_json)) FROM calls "
                     "JOIN call_bodies b USING (call_id)") == [(3_000, 3_000, 3_000 * 4015 + sum(
                         len(str(index)) for index in range(3_000)))]
    assert _rows(db, "SELECT count(*) FROM spans") == [(3_000,)]
    assert _rows(db, "SELECT sum(calls) FROM call_rollup") == [(3_000,)]


def test_a_batch_duckdb_cannot_do_within_the_limit_is_done_again_without_it(tmp_path, caplog, monkeypatch):
    from workbench.store import ingest

    monkeypatch.setattr(ingest, "INGEST_MEMORY_LIMIT", "1MB")  # too little for any batch
    monkeypatch.setattr(ingest, "MEMORY_RAISES", 0)  # nor raised
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    _backlog(spool, 500)
    with caplog.at_level("INFO", logger="workbench.store"):
        assert ingest_spools(db, spool, own_process=True) == 1_500
    assert "needed more than 1MB of DuckDB's memory: ingesting without the limit" in caplog.text
    assert _rows(db, "SELECT count(*), count(DISTINCT call_id) FROM calls JOIN call_bodies USING (call_id)") == [
        (500, 500)]
    assert _rows(db, "SELECT count(*) FROM spans") == [(500,)]
    assert not list(spool.glob("*.jsonl"))  # the dead writer's file, ingested whole, removed
    with open_store(db) as con:  # the store itself keeps no limit
        assert con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] != "976.5 KiB"


def test_a_batch_whose_commit_runs_out_of_the_limit_is_done_again_without_it(tmp_path, caplog, monkeypatch):
    """DuckDB says it ran out of memory at COMMIT as a TransactionException (the keys' indexes it
    checks there grow with the store): that batch too is done again without the limit. Before, the
    ingester ended there, and every later one at the same batch: a 100,000-case eval's results never
    reached the store."""
    from workbench.store import ingest

    real, failed = ingest._transaction, []

    def transaction(con, *args):
        if con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] == _limit_shown(ingest.INGEST_MEMORY_LIMIT):
            failed.append(True)  # what DuckDB 1.x raised at a 186 MB store's COMMIT, word for word
            raise duckdb.TransactionException("TransactionContext Error: Failed to commit: could not allocate block "
                                              "of size 256.0 KiB (60.9 MiB/61.0 MiB used)")
        return real(con, *args)

    monkeypatch.setattr(ingest, "_transaction", transaction)
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    _backlog(spool, 500)
    with caplog.at_level("INFO", logger="workbench.store"):
        assert ingest_spools(db, spool, own_process=True) == 1_500
    assert failed == [True] and "needed more than 64MB of DuckDB's memory: ingesting within 256MB" in caplog.text
    assert _rows(db, "SELECT count(*), count(DISTINCT call_id) FROM calls JOIN call_bodies USING (call_id)") == [
        (500, 500)]
    assert not list(spool.glob("*.jsonl"))


# what DuckDB 2.0 raised at a 100,000-case eval's store, at ~51,000 calls, where every later ingester failed too
_INVALIDATED = ('FATAL Error: Failed: database has been invalidated because of a previous fatal error. The database '
                'must be restarted prior to being used again.\nOriginal error: "Failed to flush table spans during commit: '
                'could not allocate block of size 256.0 KiB (60.8 MiB/61.0 MiB used)"')


def _invalidating_commit(monkeypatch, ingest) -> list[str]:
    """Commits that fail within the first limit as DuckDB's do when they invalidate the database: the
    connection takes no statement more (closed here). The limits the commits were tried within."""
    real, tried = ingest._transaction, []

    def transaction(con, *args):
        tried.append(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])
        if tried[-1] == _limit_shown(ingest.INGEST_MEMORY_LIMIT):
            con.close()
            raise duckdb.FatalException(_INVALIDATED)
        return real(con, *args)

    monkeypatch.setattr(ingest, "_transaction", transaction)
    return tried


def test_a_commit_that_invalidates_the_database_is_done_again_on_a_new_connection(tmp_path, monkeypatch):
    """Out of memory at COMMIT, DuckDB may invalidate the database: the raised limit could not even
    be set on that connection, the ingester ended, and so did every later one at the same batch (the
    store stayed at 51,168 of 100,000 calls, the spool's other 465 MB never stored)."""
    from workbench.store import ingest

    tried = _invalidating_commit(monkeypatch, ingest)
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    _backlog(spool, 500)
    assert ingest_spools(db, spool, own_process=True) == 1_500
    assert tried[0] == _limit_shown("64MB") and set(tried[1:]) == {_limit_shown("256MB")}
    assert _rows(db, "SELECT count(*), count(DISTINCT call_id) FROM calls JOIN call_bodies USING (call_id)") == [
        (500, 500)]
    assert not list(spool.glob("*.jsonl"))


def test_a_standing_by_ingester_drains_on_a_new_connection_after_one_was_invalidated(tmp_path, monkeypatch):
    """The standby's drains too (`ingest_spools_when_told`, its parent's words on a pipe here), and
    the drains after it keep the memory the store's commits needed."""
    import os

    from workbench.store import ingest

    tried = _invalidating_commit(monkeypatch, ingest)
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    _backlog(spool, 500)
    later = spool / f"{socket.gethostname()}-999999997-0badf00d.jsonl"
    later.write_bytes(_call("late", span_id="s-late"))
    read, write = os.pipe()
    os.write(write, f"drain {DEAD}\ndrain {later.name}\n".encode())
    os.close(write)  # then its input ends: the parent is gone, what it drained is in
    ingest.ingest_spools_when_told(db, spool, read)
    os.close(read)
    assert tried[0] == _limit_shown("64MB") and set(tried[1:]) == {_limit_shown("256MB")}
    assert _rows(db, "SELECT count(*), count(DISTINCT call_id) FROM calls") == [(501, 501)]
    assert not list(spool.glob("*.jsonl"))


def test_a_standing_by_ingesters_end_ingests_on_the_store_its_last_drain_left_open(tmp_path, monkeypatch):
    """The end's word right after a drain: every spool (the end's files, another process's) ingested
    on the connection the drain opened, not after a close and an open of its own."""
    import os

    from workbench.store import ingest

    opened = []
    monkeypatch.setattr(ingest, "open_store", lambda *args, **kwargs: opened.append(args) or open_store(*args, **kwargs))
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    spool.mkdir()
    drained, last = (spool / f"{socket.gethostname()}-99999999{n}-0badf00d.jsonl" for n in (7, 8))
    drained.write_bytes(_call("drained"))
    last.write_bytes(_call("last"))
    (spool / DEAD).write_bytes(_call("other"))
    read, write = os.pipe()
    os.write(write, f"drain {drained.name}\ningest {drained.name} {last.name}\n".encode())
    os.close(write)
    ingest.ingest_spools_when_told(db, spool, read)
    os.close(read)
    assert len(opened) == 1
    assert _rows(db, "SELECT call_id FROM calls ORDER BY call_id") == [("drained",), ("last",), ("other",)]
    assert not list(spool.glob("*.jsonl"))


def test_an_ingest_inside_an_apps_process_leaves_duckdbs_memory_alone(tmp_path, caplog, monkeypatch):
    """The limit is the database instance's: a dashboard or an app ingesting before it reads shares
    that instance with its own queries, which the ingester's limit must not starve."""
    from workbench.store import ingest

    monkeypatch.setattr(ingest, "INGEST_MEMORY_LIMIT", "1MB")  # a limit no batch fits in
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    _backlog(spool, 500)
    with open_store(db) as reader:  # a reader of this process holds the instance meanwhile
        before = reader.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
        with caplog.at_level("INFO", logger="workbench.store"):
            assert ingest_spools(db, spool) == 1_500
        assert reader.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] == before
    assert "without the limit" not in caplog.text  # never limited, so never done again
    assert _rows(db, "SELECT count(*) FROM calls") == [(500,)]


def test_an_ingest_holding_the_only_connection_to_the_store_works_within_duckdbs_memory_limit(tmp_path, monkeypatch):
    """A process that ingests with no other connection to the store (a script's, a command's, the
    benchmark's ingester) is as bounded as an ingester process: unlimited, DuckDB kept every block it
    wrote, so a backlog's ingest grew with the backlog. The limit is set for the ingest only."""
    from workbench.store import ingest

    seen = _limits_seen(monkeypatch)
    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    _backlog(spool, 500)
    with open_store(db) as con:
        unlimited = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert ingest_spools(db, spool) == 1_500
    assert seen and set(seen) == {_limit_shown(ingest.INGEST_MEMORY_LIMIT)}
    with open_store(db) as con:
        assert con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] == unlimited
    assert _rows(db, "SELECT count(*) FROM calls") == [(500,)]


def test_rollups_folded_batch_by_batch_are_those_made_from_every_stored_call(tmp_path):
    """Each rollup, folded one batch at a time into the groups earlier batches made (the same day,
    run, model, latency bucket; a first or last moment still null), and through the re-read path
    (a call already stored, left out of the fold), holds exactly the rows one aggregation of all the
    stored calls gives (as the migrations filled them): one row a group, the same figures."""
    from workbench.store import rollup

    db, spool_dir = tmp_path / "wb.duckdb", tmp_path / "spool"
    spool = Spool(db, spool_dir, flush_interval_s=3600)

    def call(index: int) -> dict:
        day = f"2025-01-0{1 + index % 2}"
        started = f"{day}T00:00:{index * 37 % 60:02d}+00:00"  # earlier and later than the stored ones
        return {"call_id": f"c{index}", "run_id": ["r1", "r2", None][index % 3], "provider": "openai",
                "model_requested": ["m1", "m2"][index % 2], "model_served": None if index % 4 else "m1",
                "prompt_id": None, "settled": index % 5 != 0, "input_tokens": index, "output_tokens": 2,
                "cache_read_tokens": index % 3,
                "cache_write_tokens": None if 20 <= index < 40 else index % 4 and 10,  # a batch of unknowns
                "cost_micros": None if index % 7 == 0 else 100 + index, "replayed": index % 6 == 0,
                "currency": "USD", "started_at": started, "first_byte_at": started,
                "ended_at": f"{day}T00:01:{index * 7 % 60:02d}+00:00"}

    def same(con) -> None:
        for spec in rollup.ROLLUPS:
            stored = sorted(con.execute(f"SELECT * FROM {spec.table}").fetchall(), key=repr)
            assert stored == sorted(con.execute(spec.aggregate(spec.source)).fetchall(), key=repr), spec.table

    for first in range(0, 60, 20):
        for index in range(first, first + 20):
            spool.append("call", call(index))
        spool.append("call", call(max(first - 1, 0)))  # stored already, or earlier in this batch: counted once
        spool.flush(ingest=False)
        ingest_spools(db, spool_dir)
        with open_store(db, read_only=True) as con:
            assert con.execute("SELECT count(*) FROM calls").fetchall() == [(first + 20,)]
            same(con)


def test_a_batch_cut_keeps_each_replayed_call_with_the_prefix_the_recorder_spooled_after_it(tmp_path):
    """The recorder spools a call, its body, then its prefix: a cut by the budget moves all three to
    the next batch. Cut between the call and its prefix, the call was judged with a prefix built from
    its capped body, and the captured prefix then hit that row's key in the next batch, which was
    redone through the conflict path (a wasted transaction at nearly every cut of an eval's spool)."""
    import shutil

    import workbench
    from workbench.capture.recorder import recorder
    from workbench.evaluate.gate import evaluate
    from workbench.evaluate.suite import load_suites
    from workbench.store.ingest import _read_lines

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "evals", tmp_path / "evals", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(repo / "cassettes", tmp_path / "cassettes")
    shutil.copy(repo / "models.toml", tmp_path / "models.toml")
    workbench.configure(db=tmp_path / "wb.duckdb")
    try:
        assert evaluate(load_suites([tmp_path / "evals" / "classifier.py"])["classifier"]).exit_code == 0
        recorder().spool.flush(ingest=False)
        (spool,) = recorder().spool.spool_dir.glob("*.jsonl")
        whole = spool.read_bytes()
        offset, batches = 0, []
        while offset < len(whole):
            data, offset = _read_lines(spool, offset, limit=6000)  # a cut every call or two
            batches.append([json.loads(line) for line in data.splitlines()])
    finally:
        workbench.configure()
    assert sum(batches, []) == [json.loads(line) for line in whole.splitlines()]  # nothing lost or read twice
    ids = [{kind: {line["row"]["call_id"] for line in batch if line["kind"] == kind} for kind in ("call", "call_prefix")}
           for batch in batches]
    assert sum(len(batch["call"]) for batch in ids) == 8 and len(batches) > 3
    assert all(batch["call"] == batch["call_prefix"] for batch in ids), ids
def test_a_batch_cut_by_its_budget_ends_where_a_match_of_every_line_would_end_it():
    """The cut found from the end is the one matching every line of the batch
    finds: random lines of every kind (a call's text inside another record's value, both JSON
    spacings, junk), cut at every position."""
    import random

    from workbench.store.ingest import _CALL_LINE, _before_last_call

    def by_every_match(data: bytes, end: int) -> int:
        starts = [(match.start(), match.group(1)) for match in _CALL_LINE.finditer(data, 0, end)]
        calls = [index for index, (_, kind) in enumerate(starts) if kind == b"call"]
        if not calls:
            return end
        last = calls[-1]
        cut = starts[last][0]
        if last and starts[last - 1][1] == b"call_prefix" and data.rfind(b"\n", 0, cut) == starts[last - 1][0]:
            cut = starts[last - 1][0]
        return cut if cut > 0 else end

    lines = [b'{"kind": "call", "row": {}}', b'{"kind":"call","row":{}}', b'{"kind":"call_prefix"}',
             b'{"kind": "call_prefix", "row": {"a": "\\n{\\"kind\\": \\"call\\""}}', b'{"kind": "span"}',
             b'{"kind": "call_body", "row": {"x": 1}}', b'{"kind":  "call"}', b'{"kind": "callx"}', b"junk", b""]
    shuffled = random.Random(21)
    for _ in range(3000):
        data = b"\n".join(shuffled.choice(lines) for _ in range(shuffled.randint(1, 9))) + b"\n"
        for end in range(len(data)):
            assert _before_last_call(data, end) == by_every_match(data, end), (data, end)


def test_the_folds_statements_are_parsed_once_and_serve_every_store_of_the_process(tmp_path):
    """A fold's statements, parsed once a process (`rollup._parsed`), run on every connection: two
    stores written batch by batch in turn each hold rollups equal to an aggregation of their own
    calls, and their later batches parse no statement again."""
    from workbench.store import rollup

    def same(db: Path) -> None:
        with open_store(db, read_only=True) as con:
            for spec in rollup.ROLLUPS:
                stored = sorted(con.execute(f"SELECT * FROM {spec.table}").fetchall(), key=repr)
                assert stored == sorted(con.execute(spec.aggregate(spec.source)).fetchall(), key=repr), spec.table

    stores = [(tmp_path / f"{name}.duckdb", tmp_path / f"{name}-spool") for name in ("a", "b")]
    parsed = []
    for batch in range(3):
        for number, (db, spool_dir) in enumerate(stores):
            spool = Spool(db, spool_dir, flush_interval_s=3600)
            for index in range(5):
                spool.append("call", json.loads(_call(
                    f"c{batch}-{index}", run_id=f"r{index % 2}", cost_micros=10 * index + number, currency="USD",
                    started_at=f"2025-01-0{1 + batch}T00:00:0{index}+00:00"))["row"])
            spool.flush(ingest=False)
            ingest_spools(db, spool_dir)
            same(db)
            parsed.append(rollup._parsed.cache_info().misses)
    assert parsed[1:] == [parsed[1]] * (len(parsed) - 1)  # after the first batch of each kind of fold, none


def _collections_in_batch(tmp_path: Path, ingest) -> list[bool]:
    """Whether each collection the ingest of 50 calls set off (one at every allocation that could
    make a cycle) started inside a batch's commit; `ingest(db, spool)` runs it."""
    import gc
    import sys

    db, spool = tmp_path / "wb.duckdb", tmp_path / "spool"
    spool.mkdir()
    (spool / DEAD).write_bytes(b"".join(_call(f"c{index}") for index in range(50)))
    in_batch: list[bool] = []

    def collected(phase: str, info: dict) -> None:
        if phase == "start":
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_name != "_commit_batch":
                frame = frame.f_back
            in_batch.append(frame is not None)

    thresholds = gc.get_threshold()
    gc.callbacks.append(collected)
    gc.set_threshold(1)
    try:
        ingest(db, spool)
    finally:
        gc.callbacks.remove(collected)
        gc.set_threshold(*thresholds)
    assert gc.isenabled()
    assert _rows(db, "SELECT count(*) FROM calls") == [(50,)]
    return in_batch


def test_a_batch_sets_off_no_garbage_collection_and_leaves_it_as_it_found_it(tmp_path):
    """A batch allocates a few objects per record and leaves almost no cycles: a collection set off
    while it is committed frees nothing and walks every object of the process. Collections outside
    the batch happen as before."""
    in_batch = _collections_in_batch(tmp_path, ingest_spools)
    assert in_batch and not any(in_batch)


def test_a_batch_on_an_apps_thread_leaves_the_apps_collector_alone(tmp_path):
    """A spool's flush thread ingests inside the app: the collector stays the app's (its own threads
    run on and may switch it meanwhile), so collections go on during the batch as they would."""
    import threading

    def on_a_thread(db: Path, spool: Path) -> None:
        worker = threading.Thread(target=ingest_spools, args=(db, spool))
        worker.start()
        worker.join()

    assert any(_collections_in_batch(tmp_path, on_a_thread))
