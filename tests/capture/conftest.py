"""Capture tests: each records into its own store under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench
from fixtures.capture_store import Store, register_test_models


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Record into tmp_path/wb.duckdb (settings re-read) with the test model rows registered."""
    register_test_models()
    workbench.configure(db=tmp_path / "wb.duckdb")
    return Store(tmp_path / "wb.duckdb")
