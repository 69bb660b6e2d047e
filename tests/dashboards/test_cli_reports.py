"""`workbench report cost` and `workbench models` as an auditor uses them, on the fixture store: exact
figures by any key, unpriced calls flagged in one warning line, replayed calls apart, spend alerts
that exit 1 naming what crossed the line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dashboard_store as fx
from workbench.cli import app
from workbench.errors import WorkbenchError
from workbench.money import format_amount
from workbench.store.queries import ledger

CALLS = fx.call_rows()
BY_ID = {c["call_id"]: c for c in CALLS}


def cost(*ids: str) -> int:
    return sum(BY_ID[i]["cost_micros"] or 0 for i in ids)


def workbench(db: Path, *args: str):
    return CliRunner().invoke(app, [*args, "--db", str(db)], catch_exceptions=True)


def test_cost_by_a_tag_key_adds_up_and_keeps_replayed_calls_apart(dashboard_db):
    result = workbench(dashboard_db, "report", "cost", "--by", "env", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {row["env"]: row for row in json.loads(result.stdout)}
    # R2a has no tag of its own: its calls are R2's (env=prod); c11 ran outside any run
    assert rows["prod"]["cost_micros"] == cost("c01", "c02", "c03", "c04", "c05")
    assert rows["dev"]["cost_micros"] == cost("c07", "c08")  # c09 was replayed, c10 is unpriced
    assert rows["dev"]["replayed_cost_micros"] == cost("c09") and rows["dev"]["unpriced_calls"] == 1
    assert rows["(none)"]["cost_micros"] == cost("c11")
    assert sum(row["calls"] for row in rows.values()) == len(CALLS)
    assert {"ttfb_p50_ms", "duration_p99_ms"} <= set(rows["prod"])


def test_the_table_is_exact_and_one_line_warns_of_unpriced_calls(dashboard_db):
    result = workbench(dashboard_db, "report", "cost", "--by", "model")
    assert result.exit_code == 0, result.output
    mystery = next(line for line in result.stdout.splitlines() if "mystery" in line)
    assert "unpriced" in mystery and "0.00" not in mystery  # never shown as free
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "1 calls are unpriced" in result.stderr and "mystery" in result.stderr
    assert "(USD)" in result.stdout  # the currency named once, in the header
    paid = sum(c["cost_micros"] or 0 for c in CALLS if not c["replayed"])
    assert f"total {format_amount(paid)} paid; replayed calls would cost {format_amount(cost('c09'))}" in result.stdout


@pytest.mark.parametrize("by", ["provider", "prompt", "day", "week", "month", "run", "team", "tag:env"])
def test_every_breakdown_adds_up_to_the_total(dashboard_db, by):
    result = workbench(dashboard_db, "report", "cost", "--by", by, "--top", "1", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert sum(row["cost_micros"] or 0 for row in rows) == sum(c["cost_micros"] or 0 for c in CALLS if not c["replayed"])
    assert sum(row["calls"] for row in rows) == len(CALLS)


def test_a_spend_alert_names_each_group_that_crossed(dashboard_db):
    prod, dev = cost("c01", "c02", "c03", "c04", "c05"), cost("c07", "c08")
    line = (prod + dev) / 2 / 10**8  # dollars, between the two groups
    result = workbench(dashboard_db, "report", "cost", "--by", "env", "--fail-above", f"{line:.6f}")
    assert isinstance(result.exception, WorkbenchError) and result.exception.code == "WB_SPEND_ABOVE"
    assert result.exception.exit_code == 1
    assert "env=prod" in result.exception.cause and "env=dev" not in result.exception.cause
    assert workbench(dashboard_db, "report", "cost", "--by", "env", "--fail-above", "1000000").exit_code == 0


def test_a_spend_alert_on_the_total_exits_1_for_cron(dashboard_db):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "workbench", "report", "cost", "--db", str(dashboard_db), *args],
                              capture_output=True, text=True, timeout=120)

    crossed = run("--fail-above", "0.01")
    assert crossed.returncode == 1, crossed.stderr
    assert "WB_SPEND_ABOVE" in crossed.stderr and "total spent" in crossed.stderr and "fix:" in crossed.stderr
    quiet = run("--since", "1d", "--fail-above", "0.01")  # the fixture's calls are from 2024
    assert quiet.returncode == 0, quiet.stderr
    bad = run("--fail-above", "fifty")
    assert bad.returncode == 2 and "WB_CONFIG_INVALID" in bad.stderr


def test_runs_show_puts_the_bill_beside_the_exact_cost(dashboard_db):
    result = workbench(dashboard_db, "runs", "show", "R4")
    assert result.exit_code == 0, result.output
    # R4 paid for nothing priced (c10 is unpriced) and replayed c09
    assert "billed: 1 live call: unpriced; 1 replayed call: would cost" in result.stdout
    listed = workbench(dashboard_db, "runs", "list", "--format", "json")
    r4 = next(row for row in json.loads(listed.stdout) if row["run_id"] == "R4")
    assert (r4["calls"], r4["cost_micros"], r4["replayed_calls"]) == (1, None, 1)


def test_models_says_what_a_model_is_priced_at_and_from_where():
    result = CliRunner().invoke(app, ["models", "gpt-4o-mini", "in-house-70b", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {row["model"]: row for row in json.loads(result.stdout)}
    assert rows["gpt-4o-mini"]["priced_by"].startswith(("gpt-4o-mini@", "genai-prices "))
    assert rows["gpt-4o-mini"]["input_per_m"] == "0.150 USD"
    assert rows["in-house-70b"]["priced_by"] == "unpriced"


def test_the_report_says_when_its_latency_is_read_from_the_buckets(dashboard_db, monkeypatch):
    """A small store's percentiles are exact, unmarked. On a store of more live calls than are ranked
    exactly, by model they come from the latency buckets and the header says so; by run, from the
    calls, exact, and the header has no such mark; JSON carries the flag on every row."""
    small = workbench(dashboard_db, "report", "cost", "--by", "model", "--format", "json")
    assert small.exit_code == 0 and not any(row["latency_approx"] for row in json.loads(small.stdout))
    monkeypatch.setattr(ledger, "EXACT_LATENCY_UP_TO", 0)
    bucketed, exact = (workbench(dashboard_db, "report", "cost", "--by", by) for by in ("model", "run"))
    assert bucketed.exit_code == exact.exit_code == 0, bucketed.output + exact.output
    assert "within 1.0% of the exact one" in bucketed.stdout and "≈" not in exact.stdout
    rows = json.loads(workbench(dashboard_db, "report", "cost", "--by", "model", "--format", "json").stdout)
    assert rows and all(row["latency_approx"] for row in rows)


@pytest.mark.parametrize("by", ["error_code", "prompt"])
def test_the_failures_table_shows_each_group_whole_in_a_terminals_width(dashboard_db, by):
    """The table holds what fits a terminal (its tokens are in --format csv and json): with every
    column, rich squeezed the group's column to nothing at 140 characters."""
    rows = json.loads(workbench(dashboard_db, "report", "failures", "--by", by, "--format", "json").stdout)
    result = workbench(dashboard_db, "report", "failures", "--by", by)
    assert result.exit_code == 0, result.output
    key = "error_code" if by == "error_code" else "prompt_id"
    groups = [row[key] for row in rows if row[key]]
    assert groups and all(any(group in line for line in result.stdout.splitlines()) for group in groups), result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("┃"))
    assert all(f" {name} " in header for name in ("runs", "calls", "unsettled", "replayed_calls")), header
    assert "input_tokens" in rows[0] and max(len(line) for line in result.stdout.splitlines()) <= 140
