"""The ledger agrees with itself on real traffic: the recorded corpus (priced by the project's rows and
the price library, billed by real runs, half of it replayed) and the demo store. Every page's KPIs
equal its rows and charts, and equal plain sums over the stored rows, to the micro-unit."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from fixtures.ledger_checks import check_pages, raw_figures
from workbench.capture.runs import Run
from workbench.errors import WorkbenchError
from workbench.ids import new_id
from workbench.models import ModelRegistry, read_models_toml
from workbench.replay.cassette import load_cassette
from workbench.store import queries as q
from workbench.store.db import open_store
from workbench.store.ingest import write_rows
from workbench.wire import parse_exchange, priced

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
START = datetime(2025, 6, 1, tzinfo=timezone.utc)


def _corpus_store(path: Path) -> tuple[Path, int]:
    """Every corpus interaction as a call in a run per file (tagged with its source project), priced
    as the recorder prices; every other call marked replayed. Returns the store and the live cost."""
    registry = ModelRegistry()
    for spec in read_models_toml(ROOT / "models.toml"):
        registry.register(spec)
    calls, runs, live_cost = [], [], 0
    for index, cassette in enumerate(sorted(CORPUS.glob("*/*.yaml"))):
        try:
            interactions = load_cassette(cassette)
        except WorkbenchError:  # the few the corpus keeps as unreadable (Python-object YAML tags)
            continue
        run = Run(cassette.stem[:40], "app", {"tenant": cassette.parent.name.split("__")[0]}, None, None)
        for number, interaction in enumerate(interactions):
            call = parse_exchange(interaction.exchange())
            call.call_id, call.run_id = new_id(), run.run_id
            call.started_at = START + timedelta(hours=index, minutes=number)
            call.ended_at = call.started_at + timedelta(seconds=1)
            call.replayed = (index + number) % 2 == 1
            priced(call, registry)
            run.attribute(call)
            live_cost += (call.cost_micros or 0) if not call.replayed else 0
            row = call.flat()
            for name in ("request_json", "response_json", "output_text", "tool_calls"):
                row.pop(name)
            calls.append(row)
        run.status, run.ended_at = "ok" if index % 3 else "failed", START + timedelta(hours=index + 1)
        runs.append(run)
    with open_store(path) as con:
        write_rows(con, "call", calls)
        write_rows(con, "run", [run.row() for run in runs])
        write_rows(con, "run_tag", [{"run_id": run.run_id, "key": k, "value": v} for run in runs
                                    for k, v in run.tags.items()])
    return path, live_cost


def test_the_corpus_ledger_agrees_to_the_micro_unit(tmp_path):
    db, live_cost = _corpus_store(tmp_path / "corpus.duckdb")

    def work(con):
        return check_pages(con, q.Filters(), top=4), raw_figures(con), check_pages(con, q.Filters(source="live"))

    shown, raw, live = q.read(db, None, work)
    assert live_cost > 0 and shown["cost_micros"] == raw["cost_micros"] == live["cost_micros"] == live_cost
    assert shown["replayed_cost_micros"] == raw["replayed_cost_micros"] > 0
    assert shown["unpriced_calls"] == raw["unpriced_calls"] and shown["calls"] == raw["calls"]
    assert shown["failed_cost_micros"] == raw["failed_cost_micros"]


def test_the_demo_ledger_agrees_to_the_micro_unit(tmp_path):
    db = tmp_path / "demo.duckdb"
    result = subprocess.run([sys.executable, "-m", "workbench", "demo", "--seed", "11", "--db", str(db)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr

    def work(con):
        return check_pages(con, q.Filters(), top=2), raw_figures(con)

    shown, raw = q.read(db, db.parent / "spool", work)
    for name in ("cost_micros", "replayed_cost_micros", "calls", "replayed_calls", "unpriced_calls",
                 "failed_cost_micros"):
        assert shown[name] == raw[name], name
    assert shown["cost_micros"] > 0 and shown["replayed_calls"] > 0  # the example suites replay
