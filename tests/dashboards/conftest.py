"""The dashboard tests' store: built once per test process (xdist worker), never shared between them."""

from __future__ import annotations

from pathlib import Path

import pytest

import dashboard_store


@pytest.fixture(scope="session")
def dashboard_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dashboard_store.build(tmp_path_factory.mktemp("dashboard") / "workbench.duckdb")
