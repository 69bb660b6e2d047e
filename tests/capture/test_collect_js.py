"""The OpenTelemetry JavaScript SDK (its OTLP/HTTP JSON exporter, installed with `npm ci` from the
committed lock file) sends a TypeScript-style agent's GenAI spans to `workbench collect`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures.capture_store import expected_cost
from test_collect import FIXTURES, _calls, _start, _usage


@pytest.fixture(scope="session")
def js_sender(tmp_path_factory) -> Path:
    npm = shutil.which("npm")
    assert npm, "npm is not on PATH: install Node.js (Debian: apt-get install nodejs npm; .ci/run does)"
    folder = tmp_path_factory.mktemp("otlp-js")
    for name in ("package.json", "package-lock.json", "send.mjs"):
        shutil.copy(FIXTURES / "js" / name, folder / name)
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=folder, check=True, timeout=300)
    return folder / "send.mjs"


def test_the_javascript_sdk_exporter_records_calls_runs_and_turns(js_sender, tmp_path):
    for collector in _start(tmp_path):
        subprocess.run([shutil.which("node"), str(js_sender), collector.url], check=True, timeout=120)

        first, second = _calls(collector)
        usages = [_usage(200, 0, 1800, 120), _usage(2000, 1800, 0, 120)]
        assert [{name: call[name] for name in usages[0]} for call in (first, second)] == usages
        assert [first["cost_micros"], second["cost_micros"]] == [expected_cost("wbt-claude", usage) for usage in usages]
        (run,) = collector.rows("SELECT * FROM runs")
        assert (run["name"], run["kind"], run["billed_calls"]) == ("answer ticket", "agent", 2)
        assert run["billed_cost_micros"] == first["cost_micros"] + second["cost_micros"]
        turns = collector.rows("SELECT attributes FROM span_events WHERE name = 'agent.turn' ORDER BY seq")
        assert [json.loads(turn["attributes"])["cost_micros"] for turn in turns] == [
            expected_cost("wbt-claude", usage) for usage in usages]
