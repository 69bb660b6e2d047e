"""Third-party clients driven the way their own docs drive them, against the fake provider over
HTTP: each test records into its own store and cassettes under tmp_path, with `instrument()` in
effect (left as found)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import workbench
from fixtures.capture_store import Store, register_test_models
from workbench.config import settings

# LiteLLM fetches its model price map from GitHub when imported unless told to use its bundled copy
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(autouse=True)
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Record into tmp_path/wb.duckdb (the replay session keeps its played records beside it too)."""
    db = tmp_path / "wb.duckdb"
    monkeypatch.setenv("WORKBENCH_DB", str(db))
    monkeypatch.delenv("WORKBENCH_RECORD_MODE", raising=False)
    settings.cache_clear()
    register_test_models()
    workbench.configure(db=db)
    yield Store(db)
    settings.cache_clear()


@pytest.fixture
def instrumented():
    already = workbench.capture.instrumented()
    workbench.instrument()
    yield
    if not already:
        workbench.uninstrument()
