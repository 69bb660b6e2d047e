"""Replay tests: each test records into its own store and its own cassettes under tmp_path.

`WORKBENCH_DB` is set (and the cached settings re-read) as well as `workbench.configure(db=...)`, because
the replay session keeps its "played" records beside `settings().db`, which `configure` does not change."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.capture_store import store_under


@pytest.fixture(autouse=True)
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Record into tmp_path/wb.duckdb; no WORKBENCH_RECORD_MODE leaks in from the environment."""
    yield from store_under(tmp_path, monkeypatch)
