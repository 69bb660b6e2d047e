"""`workbench demo` fills a store that looks like real use: a month of traffic (backdated through the
real recording path), several apps, users and tags, thousands of calls, prompts cached the way the
real APIs cache them, and everything the product shows; deterministically per seed."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from workbench.cli import core
from workbench.demo.fake_provider import ANTHROPIC_MIN_CACHE_TOKENS

ROOT = Path(__file__).resolve().parents[2]


def demo(db: Path, seed: int = 7) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", "demo", "--seed", str(seed), "--db", str(db)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


def settled(db: Path) -> Path:
    """`db` once the demo's records are all in it: the demo leaves its last spooled records to a
    detached ingester at exit, and this waits for it (the ingest lock) and ingests what is left."""
    from workbench.config import spool_dir_of
    from workbench.store.ingest import ingest_spools

    ingest_spools(db, spool_dir_of(db), wait=True)
    return db


def figures(db: Path) -> dict:
    with duckdb.connect(str(settled(db)), read_only=True) as con:
        def one(sql: str):
            return con.execute(sql).fetchall()[0][0]

        return {
            "calls": one("SELECT count(*) FROM calls"),
            "runs": one("SELECT count(*) FROM runs"),
            "cost": one("SELECT sum(cost_micros) FROM calls"),
            "cache_reads": one("SELECT sum(cache_read_tokens) FROM calls"),
            "cache_writes": one("SELECT sum(cache_write_tokens) FROM calls"),
            "by_app": dict(con.execute("SELECT name, count(*) FROM runs WHERE parent_run_id IS NULL GROUP BY name")
                           .fetchall()),
            "compactions": one("SELECT count(*) FROM compactions WHERE outcome = 'ok'"),
            "failed": sorted(row[0] for row in con.execute(
                "SELECT coalesce(error_code, error_type) FROM runs WHERE status = 'failed' AND parent_run_id IS NULL"
            ).fetchall()),
            "failed_billed": one("SELECT sum(billed_cost_micros) FROM runs WHERE status = 'failed' AND parent_run_id IS NULL"),
            "unsettled": one("SELECT sum(billed_unsettled) FROM runs WHERE status = 'failed' AND parent_run_id IS NULL"),
            "eval_verdicts": sorted(row[0] for row in con.execute(
                "SELECT verdict FROM eval_runs WHERE matrix_id IS NULL").fetchall()),
            "matrix_cells": one("SELECT count(*) FROM eval_runs WHERE matrix_id IS NOT NULL"),
        }


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    db = tmp_path_factory.mktemp("demo") / "wb.duckdb"
    return demo(db), db


@pytest.fixture(scope="module")
def con(first):
    result, db = first
    assert result.returncode == 0, result.stderr
    with duckdb.connect(str(settled(db)), read_only=True) as connection:
        yield connection


def rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def test_a_month_of_traffic_in_the_past_recorded_through_the_real_path(con):
    first, last, days = rows(con, "SELECT min(started_at), max(started_at), count(DISTINCT started_at::DATE) "
                                  "FROM calls")[0]
    assert last - first >= timedelta(days=30) and days >= 30
    now = datetime.now(timezone.utc)
    (future,) = rows(con, "SELECT count(*) FROM calls WHERE started_at > now()")[0]
    assert future == 0 and first < now - timedelta(days=30)
    run_first, run_days = rows(con, "SELECT min(started_at), count(DISTINCT started_at::DATE) FROM runs")[0]
    assert run_first <= first + timedelta(minutes=1) and run_days >= 30
    # every call has the span capture made for it, at the call's own (backdated) time
    (unmatched,) = rows(con, "SELECT count(*) FROM calls c LEFT JOIN spans s USING (span_id) "
                             "WHERE s.span_id IS NULL OR abs(epoch(s.start_time) - epoch(c.started_at)) > 0.001")[0]
    assert unmatched == 0
    (traffic_days,) = rows(con, "SELECT count(DISTINCT started_at::DATE) FROM runs WHERE name = 'support-chat'")[0]
    assert traffic_days >= 30


def test_thousands_of_calls_from_several_apps_users_and_tags(con):
    (calls,) = rows(con, "SELECT count(*) FROM calls")[0]
    assert calls >= 2000
    apps = dict(rows(con, "SELECT name, count(*) FROM runs WHERE parent_run_id IS NULL GROUP BY name"))
    for app in ("support-chat", "docs-qa", "ticket-triage", "nightly-invoices", "support-agent", "handbook-reader",
                "daily-digest"):
        assert apps.get(app, 0) >= 10, app
    tags = dict(rows(con, "SELECT key, count(DISTINCT value) FROM run_tags GROUP BY key"))
    assert tags["user"] >= 20 and tags["customer"] >= 5 and tags["channel"] >= 4 and "job" in tags
    wires = {row[0] for row in rows(con, "SELECT DISTINCT wire FROM calls")}
    assert wires == {"openai.chat", "openai.responses", "anthropic.messages"}
    (streamed,) = rows(con, "SELECT count(*) FROM calls WHERE stream")[0]
    assert streamed >= 20
    (unpriced,) = rows(con, "SELECT count(*) FROM calls WHERE settled AND cost_micros IS NULL")[0]
    assert unpriced == 0


def test_prompts_are_cached_above_the_providers_minimum_as_the_real_apis_do(con):
    by_provider = dict(rows(con, "SELECT provider, max(cache_read_tokens) FROM calls GROUP BY provider"))
    assert by_provider["openai"] >= 1024 and by_provider["anthropic"] >= 1024
    anthropic = rows(con, "SELECT coalesce(model_served, model_requested), cache_read_tokens + cache_write_tokens "
                          "FROM calls WHERE provider = 'anthropic' AND cache_read_tokens + cache_write_tokens > 0 "
                          "AND NOT replayed")  # (the example suites' cassettes replay what they recorded)
    assert len(anthropic) >= 100
    for model, cached in anthropic:  # never below the model's minimum cacheable prefix
        minimum = max((v for k, v in ANTHROPIC_MIN_CACHE_TOKENS.items() if model.startswith(k)), default=0)
        assert cached >= minimum, (model, cached)
    # entries expire (five minutes after last use), so the long docs are written again day after day
    (write_days,) = rows(con, "SELECT count(DISTINCT c.started_at::DATE) FROM calls c JOIN runs r USING (run_id) "
                              "WHERE r.name = 'docs-qa' AND c.cache_write_tokens > 0")[0]
    assert write_days >= 25
    reads, total = rows(con, "SELECT sum(cache_read_tokens), sum(input_tokens + cache_read_tokens + "
                             "cache_write_tokens) FROM calls")[0]
    assert 0.2 < reads / total < 0.95  # a real mix: hits within sessions, misses between them
    (short,) = rows(con, "SELECT count(*) FROM calls WHERE prompt_id = 'ticket-classifier' AND NOT replayed AND "
                         "cache_read_tokens + cache_write_tokens > 0")[0]
    assert short == 0  # a short prompt on Haiku 4.5 (minimum 4,096) is never cached


def test_every_chart_has_a_trend(con):
    models = dict(rows(con, "SELECT coalesce(model_served, model_requested), count(DISTINCT started_at::DATE) "
                            "FROM calls GROUP BY 1"))
    assert models["gpt-4o"] >= 5 and models["gpt-4o-mini"] >= 5  # support chat moved to the smaller model
    versions = dict(rows(con, "SELECT prompt_version, count(*) FROM calls WHERE prompt_id = 'ticket-classifier' "
                              "GROUP BY 1"))
    assert versions.get("v1", 0) > versions.get("v2", 0) > 0
    compaction_days, failed_compactions = rows(con, "SELECT count(DISTINCT occurred_at::DATE), "
                                                    "count(*) FILTER (WHERE outcome <> 'ok') FROM compactions")[0]
    assert compaction_days >= 5 and failed_compactions >= 1
    (eval_times,) = rows(con, "SELECT count(DISTINCT started_at::DATE) FROM eval_runs")[0]
    assert eval_times >= 5
    (failure_days,) = rows(con, "SELECT count(DISTINCT started_at::DATE) FROM runs WHERE status = 'failed'")[0]
    assert failure_days >= 5


def test_the_demo_records_everything_the_product_shows(first):
    result, db = first
    got = figures(db)
    assert {"WB_BUDGET_EXCEEDED", "WB_AGENT_MAX_TURNS", "WB_AGENT_TOOL_LOOP", "WB_LLM_TRUNCATED",
            "WB_AGENT_DEADLINE", "WB_AGENT_CONTEXT_EXHAUSTED", "RemoteProtocolError", "OverloadedError",
            "RuntimeError"} <= set(got["failed"])
    assert got["failed_billed"] > 0 and got["unsettled"] >= 1  # the cut stream: counted, not estimated
    assert got["compactions"] >= 5
    assert "regression" in got["eval_verdicts"] and got["eval_verdicts"].count("pass") >= 15
    assert got["matrix_cells"] == 4  # the example classifier's versions x models, replayed
    assert "eval classifier    pass" in result.stdout and "workbench dashboard" in result.stdout


def test_the_same_seed_gives_the_same_figures(first, tmp_path):
    again = tmp_path / "again.duckdb"
    assert demo(again).returncode == 0
    assert figures(again) == figures(first[1])


# the README's report commands, as a newcomer types them after `workbench demo` (a table, not CSV)
README_REPORTS = [line.removesuffix(" --format csv").split()[1:]
                  for line in (ROOT / "README.md").read_text().splitlines()
                  if line.startswith(("workbench report ", "workbench runs list"))]


@pytest.mark.parametrize("columns", [80, 140])
@pytest.mark.parametrize("command", README_REPORTS, ids=" ".join)
def test_every_readme_report_shows_every_value_whole_in_the_terminals_width(first, command, columns, monkeypatch):
    """No column squeezed to nothing, no right edge cropped: a table that fits, or one block a row.
    Every short text value of the rows (`--format json`: a model, a status, a run name) and every id
    stands whole on a line of at most `columns` characters (a terminal that wide: 140 is a pipe's)."""
    db = settled(first[1])
    monkeypatch.setattr(core.console, "width", columns)
    shown, data = (CliRunner().invoke(core.app, [*command, *extra, "--db", str(db)])
                   for extra in ((), ("--format", "json")))
    assert shown.exit_code == data.exit_code == 0, shown.output + data.output
    lines = shown.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= columns, shown.stdout
    rows = json.loads(data.stdout)
    rows = rows if isinstance(rows, list) else [row for table in rows.values() for row in table]  # cache --why: three
    values = {value for row in rows for name, value in row.items() if isinstance(value, str) and value
              and (len(value) <= 20 or name.endswith("_id"))}
    missing = sorted(value for value in values if not any(value in line for line in lines))
    assert not missing, f"{missing}\n{shown.stdout}"


def test_a_store_nobody_can_write_stops_the_demo_before_it_records_naming_why(tmp_path):
    # (a file where the store's folder should be: unwritable even for root, who passes every permission)
    (tmp_path / "not-a-folder").write_text("")
    result = demo(tmp_path / "not-a-folder" / "wb.duckdb")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "WB_STORE_UNWRITABLE" in result.stderr and "not-a-folder" in result.stderr  # not "is it a Workbench store?"
    assert "recording" not in result.stdout + result.stderr  # stopped before a day was recorded
