"""Insight tests: each records into its own store under tmp_path, against the fake provider over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench
from fixtures.capture_store import Store, register_test_models


@pytest.fixture
def store(tmp_path: Path) -> Store:
    register_test_models()
    workbench.register_model(id="wbt-claude-cache", provider="anthropic", input=300, output=1500, cache_read=30,
                             cache_write_5m=375, cache_write_1h=600, cache_min_tokens=1024, context_window=200_000,
                             max_output=64_000, source="tests/insight/conftest.py", as_of="2025-01-01")
    workbench.configure(db=tmp_path / "wb.duckdb")
    return Store(tmp_path / "wb.duckdb")

