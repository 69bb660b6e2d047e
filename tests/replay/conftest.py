"""Replay tests: each test records into its own store and its own cassettes under tmp_path.

`WORKBENCH_DB` is set (and the cached settings re-read) as well as `workbench.configure(db=...)`, because
the replay session keeps its "played" records beside `settings().db`, which `configure` does not change."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench
from fixtures.capture_store import Store, register_test_models
from workbench.config import settings


@pytest.fixture(autouse=True)
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Record into tmp_path/wb.duckdb; no WORKBENCH_RECORD_MODE leaks in from the environment."""
    db = tmp_path / "wb.duckdb"
    monkeypatch.setenv("WORKBENCH_DB", str(db))
    monkeypatch.delenv("WORKBENCH_RECORD_MODE", raising=False)
    settings.cache_clear()
    register_test_models()
    workbench.configure(db=db)
    yield Store(db)
    settings.cache_clear()
