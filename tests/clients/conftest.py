"""Third-party clients driven the way their own docs drive them, against the fake provider over
HTTP: each test records into its own store and cassettes under tmp_path, with `instrument()` in
effect (left as found)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures.capture_store import store_under

# LiteLLM fetches its model price map from GitHub when imported unless told to use its bundled copy
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(autouse=True)
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    yield from store_under(tmp_path, monkeypatch)
