"""Insight runs inside ingestion and never costs a record: a batch insight cannot judge goes in
without verdicts; a call recorded without a prefix record (an older recorder) is judged from its
stored body."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import duckdb

from workbench.store.ingest import ingest_spools

DEAD = f"{socket.gethostname()}-999999999-deadbeef.jsonl"
BODY = {"model": "claude-x", "max_tokens": 10, "system": [{"type": "text", "text": "Be brief. " * 600,
                                                              "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Hi"}]}


def _spool(folder: Path, calls: int) -> None:
    folder.mkdir()
    lines = []
    for index in range(calls):
        call_id = f"c{index}"
        lines.append({"kind": "call", "row": {
            "call_id": call_id, "wire": "anthropic.messages", "provider": "anthropic", "model_requested": "claude-x",
            "settled": True, "input_tokens": 5, "cache_read_tokens": 0 if index == 0 else 1500,
            "cache_write_tokens": 1500 if index == 0 else 0, "output_tokens": 3,
            "started_at": f"2025-01-01T00:00:0{index}+00:00"}})
        lines.append({"kind": "call_body", "row": {"call_id": call_id, "request_json": json.dumps(BODY)}})
    (folder / DEAD).write_text("".join(json.dumps(line) + "\n" for line in lines))


def _rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_a_call_with_no_prefix_record_is_judged_from_its_stored_body(tmp_path):
    _spool(tmp_path / "spool", 2)
    ingest_spools(tmp_path / "wb.duckdb", tmp_path / "spool")
    assert _rows(tmp_path / "wb.duckdb", "SELECT call_id, cache_verdict, cache_entry_call_id FROM calls ORDER BY 1") == [
        ("c0", "cold", None), ("c1", "hit", "c0")]
    assert _rows(tmp_path / "wb.duckdb", "SELECT call_id, read_by FROM cache_reads") == [("c0", "c1")]


def test_a_batch_insight_cannot_judge_still_goes_in(tmp_path, monkeypatch, caplog):
    import workbench.insight.ingest as insight

    def broken(con, frames):
        raise RuntimeError("a bug in insight")

    monkeypatch.setattr(insight, "derive", broken)
    _spool(tmp_path / "spool", 2)
    assert ingest_spools(tmp_path / "wb.duckdb", tmp_path / "spool") == 4
    assert _rows(tmp_path / "wb.duckdb", "SELECT call_id, cache_verdict FROM calls ORDER BY 1") == [
        ("c0", None), ("c1", None)]
    assert "could not derive" in caplog.text and "a bug in insight" in caplog.text
