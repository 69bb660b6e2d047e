"""Nothing recorded is lost when an application records faster than the spool thread writes: past
the records that may wait (`MAX_WAITING`), the appending thread writes them itself, so what waits in
memory is bounded. Records are dropped (and counted) only when the spool file cannot be written at
all, past `MAX_PENDING` kept for it to become writable."""

from __future__ import annotations

import orjson

from workbench.store import spool as spool_module
from workbench.store.spool import MAX_PENDING, MAX_WAITING, Spool


def test_a_burst_past_the_pending_cap_from_one_thread_loses_no_record(tmp_path):
    # the spool thread wakes once an hour: every record of the burst is appended before it writes any
    spool = Spool(tmp_path / "wb.duckdb", tmp_path / "spool", flush_interval_s=3600)
    burst = MAX_PENDING + 25_000
    for index in range(burst):
        spool.append("span", {"span_id": f"s{index}", "name": "burst"})
    assert spool.stats["dropped"] == 0
    spool.flush(ingest=False)
    spool.stop()
    lines = b"".join(path.read_bytes() for path in (tmp_path / "spool").glob("*.jsonl")).splitlines()
    ids = [orjson.loads(line)["row"]["span_id"] for line in lines]
    assert len(ids) == burst and set(ids) == {f"s{index}" for index in range(burst)}
    assert ids == sorted(ids, key=lambda span_id: int(span_id[1:]))  # in the order they were appended
    assert spool.stats["written"] == burst and spool.stats["write_errors"] == 0


def test_records_waiting_for_a_spool_thread_behind_are_bounded_the_appender_writes_the_rest(tmp_path):
    spool = Spool(tmp_path / "wb.duckdb", tmp_path / "spool", flush_interval_s=3600)  # its thread asleep
    for index in range(3 * MAX_WAITING):
        spool.append("span", {"span_id": f"s{index}", "name": "x" * 2000})  # a body each, as calls have
    # every record past the bound was written by the appending thread, before the spool thread woke
    assert spool.stats["written"] >= 2 * MAX_WAITING and spool.stats["dropped"] == 0
    spool.flush(ingest=False)
    spool.stop()
    assert spool.stats["written"] == 3 * MAX_WAITING


def test_an_unwritable_spool_keeps_the_cap_of_records_and_counts_what_it_drops(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_module, "MAX_WAITING", 100)
    monkeypatch.setattr(spool_module, "MAX_PENDING", 1_000)
    (tmp_path / "a-file").write_text("not a folder")
    spool = Spool(tmp_path / "wb.duckdb", tmp_path / "a-file" / "spool", flush_interval_s=3600)
    for index in range(1_500):
        spool.append("span", {"span_id": f"s{index}", "name": "burst"})  # never raises: fail-open
    assert spool.stats["write_errors"] >= 1 and spool.stats["dropped"] == 500
    # the oldest waited, in order, for the spool to become writable
    (tmp_path / "a-file").unlink()
    (tmp_path / "a-file").mkdir()
    spool.flush(ingest=False)
    spool.stop()
    lines = b"".join(path.read_bytes() for path in (tmp_path / "a-file" / "spool").glob("*.jsonl")).splitlines()
    assert [orjson.loads(line)["row"]["span_id"] for line in lines] == [f"s{index}" for index in range(1_000)]
