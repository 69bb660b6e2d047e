"""`workbench demo` fills a store with everything the product shows, deterministically per seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[2]


def demo(db: Path, seed: int = 7) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", "demo", "--seed", str(seed), "--db", str(db)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def figures(db: Path) -> dict:
    with duckdb.connect(str(db), read_only=True) as con:
        def one(sql: str):
            return con.execute(sql).fetchall()[0][0]

        return {
            "calls": one("SELECT count(*) FROM calls"),
            "cost": one("SELECT sum(cost_micros) FROM calls"),
            "sdk_calls": one("SELECT count(*) FROM calls c JOIN runs r USING (run_id) WHERE r.name IN ('support-chat', 'docs-qa')"),
            "responses_calls": one("SELECT count(*) FROM calls WHERE wire = 'openai.responses'"),
            "runtime_calls": one("SELECT count(*) FROM calls c JOIN runs r USING (run_id) WHERE r.kind IN ('llm', 'agent')"),
            "cache_reads": one("SELECT sum(cache_read_tokens) FROM calls"),
            "compactions": one("SELECT count(*) FROM compactions WHERE outcome = 'ok'"),
            "failed": sorted(row[0] for row in con.execute(
                "SELECT coalesce(error_code, error_type) FROM runs WHERE status = 'failed' AND parent_run_id IS NULL").fetchall()),
            "failed_billed": one("SELECT sum(billed_cost_micros) FROM runs WHERE status = 'failed' AND parent_run_id IS NULL"),
            "unsettled": one("SELECT sum(billed_unsettled) FROM runs WHERE status = 'failed' AND parent_run_id IS NULL"),
            "eval_verdicts": sorted(row[0] for row in con.execute(
                "SELECT verdict FROM eval_runs WHERE matrix_id IS NULL").fetchall()),
            "matrix_cells": one("SELECT count(*) FROM eval_runs WHERE matrix_id IS NOT NULL"),
        }


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    db = tmp_path_factory.mktemp("demo") / "wb.duckdb"
    result = demo(db)
    return result, figures(db) if db.exists() else {}


def test_the_demo_records_everything_the_product_shows(first):
    result, got = first
    assert result.returncode == 0, result.stderr
    assert got["sdk_calls"] > 0 and got["responses_calls"] > 0 and got["runtime_calls"] > 0
    assert got["cache_reads"] > 0 and got["compactions"] >= 1
    assert {"WB_BUDGET_EXCEEDED", "WB_AGENT_MAX_TURNS", "WB_AGENT_TOOL_LOOP", "WB_LLM_TRUNCATED",
            "WB_AGENT_DEADLINE", "RemoteProtocolError"} <= set(got["failed"])
    assert got["failed_billed"] > 0 and got["unsettled"] >= 1  # the cut stream: counted, not estimated
    assert got["eval_verdicts"] == ["pass", "pass", "pass"]
    assert got["matrix_cells"] == 4  # the example classifier's versions x models, replayed
    assert "eval classifier    pass" in result.stdout and "workbench dashboard" in result.stdout


def test_the_same_seed_gives_the_same_figures(first, tmp_path):
    again = tmp_path / "again.duckdb"
    assert demo(again).returncode == 0
    assert figures(again) == first[1]
