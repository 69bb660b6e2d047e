"""Where the verdicts and compactions are read: `workbench report cache --why`, the Prompt cache
page's "why calls missed", the Run explorer's verdicts, diffs and agent turns, the Compaction page's
reported and inferred side by side; every figure equals the store's own rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from fixtures.dashboard_app import render as page
from insight_traffic import DOCS, Clock, ask, claude, provider
from workbench.money import format_amount

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def traffic(store, fake_url, _fake_server):
    """A run whose system prompt carries the time (cold, then a changed prefix), then drops it (a
    changed prefix again), then finds its entry evicted (unexplained); the store flushed."""
    clock = Clock()
    fake = provider(clock)
    _fake_server.provider = fake
    client = claude(fake_url)
    with workbench.run("stamped") as run:
        for question in ("What is replay?", "What is a gate?"):
            ask(client, question, system=f"Now: 10:{int(clock.now) % 60:02d} UTC.\n{DOCS}")
            clock.advance(7)
        ask(client, "What is a cassette?")
        clock.advance(5)
        fake.evict()
        ask(client, "What is a baseline?")
    workbench.flush()
    return store, run.run_id


def test_report_cache_why_prints_what_the_store_holds(traffic):
    store, _ = traffic
    out = subprocess.run([sys.executable, "-m", "workbench", "report", "cache", "--why", "--db", str(store.path),
                          "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    expected = {row["v"]: (row["n"], row["lost"]) for row in store.rows(
        "SELECT cache_verdict AS v, count(*) AS n, coalesce(sum(cache_miss_micros), 0) AS lost FROM calls GROUP BY 1")}
    assert {row["verdict"]: (row["calls"], row["lost_micros"]) for row in report["verdicts"]} == expected
    assert set(expected) == {"cold", "prefix_changed", "unexplained"}
    changing = report["changing_prefixes"]
    assert [(row["region"], row["calls"]) for row in changing] == [("system block 0", 2)]
    diffs = {row["diff"] for row in store.rows("SELECT diff FROM call_prefixes WHERE diff IS NOT NULL")}
    assert changing[0]["example_diff"] in diffs and any("[-0-]{+7+}" in diff for diff in diffs)
    assert {row["fate"] for row in report["cache_writes"]} <= {"read", "wasted", "alive"}
    table = subprocess.run([sys.executable, "-m", "workbench", "report", "cache", "--why", "--db", str(store.path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "prefix_changed" in table.stdout and "system block 0" in table.stdout


def test_the_pages_show_each_verdict_its_diff_and_the_money_lost(traffic, monkeypatch):
    store, run_id = traffic
    at = page(store.path, monkeypatch, "prompt_cache.py")
    why = next(df.value for df in at.dataframe if "verdict" in df.value.columns)
    lost = {row["cache_verdict"]: row["lost"] for row in store.rows(
        "SELECT cache_verdict, sum(cache_miss_micros) AS lost FROM calls GROUP BY 1")}
    shown = dict(zip(why["verdict"], why["lost"]))
    assert shown == {verdict: format_amount(micros) for verdict, micros in lost.items()}

    at = page(store.path, monkeypatch, "run_explorer.py", run_id=run_id)
    calls = next(df.value for df in at.dataframe if "cache_verdict" in df.value.columns)
    assert list(calls["cache_verdict"]) == ["cold", "prefix_changed", "prefix_changed", "unexplained"]
    assert list(calls["changed_region"])[1:3] == ["system block 0", "system block 0"]
    assert any("[-0-]{+7+}" in code.value for code in at.code)  # the diff, as text
