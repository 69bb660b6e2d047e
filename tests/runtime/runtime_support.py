"""Shared by the runtime tests: the fake's models and readers of the store's rows."""

from __future__ import annotations

import json
from pathlib import Path

import workbench
from workbench.capture import flush
from workbench.demo.fake_provider import FakeProvider
from workbench.store.db import open_store

CLAUDE, GPT, SMALL = "claude-test", "gpt-test", "claude-small"
SMALL_WINDOW = 2400


def register_models() -> None:
    common = {"source": "test", "as_of": "2026-01-01"}
    workbench.register_model(id=CLAUDE, provider="anthropic", context_window=200_000, max_output=8192,
                             input=300, output=1500, **common)
    workbench.register_model(id=GPT, provider="openai", context_window=128_000, max_output=4096,
                             input=250, output=1000, **common)
    workbench.register_model(id=SMALL, provider="anthropic", context_window=SMALL_WINDOW, max_output=1024,
                             input=300, output=1500, **common)


class Store:
    def __init__(self, db: Path) -> None:
        self.db = db

    def rows(self, sql: str, *params) -> list[dict]:
        flush()
        with open_store(self.db, read_only=True) as con:
            cursor = con.execute(sql, list(params))
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def run(self, run_id: str | None = None, name: str | None = None) -> dict:
        if run_id is not None:
            return self.rows("SELECT * FROM runs WHERE run_id = ?", run_id)[0]
        return self.rows("SELECT * FROM runs WHERE name = ? ORDER BY started_at DESC LIMIT 1", name)[0]

    def calls(self, run_id: str) -> list[dict]:
        return self.rows("SELECT * FROM calls WHERE run_id = ? ORDER BY started_at", run_id)

    def events(self, run_id: str, name: str) -> list[dict]:
        rows = self.rows("SELECT * FROM span_events WHERE run_id = ? AND name = ? ORDER BY time, seq", run_id, name)
        return [json.loads(row["attributes"]) for row in rows]

    def assert_bill_exact(self, run_id: str, billed=None) -> dict:
        """The run's stored bill is the sum over its settled calls (and equals `billed` when given)."""
        run = self.run(run_id)
        calls = self.calls(run_id)
        settled = [call for call in calls if call["settled"]]
        for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"):
            assert run[f"billed_{name}"] == sum(call[name] for call in settled), name
            if billed is not None:
                assert getattr(billed, name) == run[f"billed_{name}"], name
        assert run["billed_cost_micros"] == sum(call["cost_micros"] for call in settled)
        assert run["billed_calls"] == len(settled)
        if billed is not None:
            assert (billed.cost_micros, billed.calls) == (run["billed_cost_micros"], run["billed_calls"])
        return run


def bodies(fake: FakeProvider, path_suffix: str = "") -> list[dict]:
    return [request.json for request in fake.requests if request.path.endswith(path_suffix)]
