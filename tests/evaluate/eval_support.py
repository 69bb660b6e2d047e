"""Helpers for the eval tests (imported by name: `from eval_support import ...`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def examples_copy(root: Path) -> Path:
    """A fresh copy of the repository's example suites, cassettes and models.toml (what a clone has)."""
    root.mkdir(parents=True)
    shutil.copytree(REPO / "evals", root / "evals", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "cassettes", root / "cassettes")
    shutil.copy(REPO / "models.toml", root / "models.toml")
    return root


# environment that makes any real network call fail fast (a dead proxy, no keys)
OFFLINE_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "ALL_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "", "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "",
}


def no_network():
    """A runner Network whose every call fails the test: what replay must never reach."""
    import httpx2

    from workbench.evaluate.runner import Network

    def refuse(request):
        raise AssertionError(f"network call in replay: {request.method} {request.url}")

    return Network(sync=lambda: httpx2.MockTransport(refuse), async_=lambda: httpx2.MockTransport(refuse))


def workbench_cli(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m workbench ARGS` in `root`, its store in `root`; WORKBENCH_EVAL_RECORD unset unless given."""
    environment = {**os.environ, "WORKBENCH_DB": str(root / "wb.duckdb"), **(env or {})}
    if "WORKBENCH_EVAL_RECORD" not in (env or {}):
        environment.pop("WORKBENCH_EVAL_RECORD", None)
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], cwd=root, capture_output=True, text=True, env=environment, timeout=120
    )


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def set_answers(root: Path, answers: dict) -> None:
    """The answers of conftest's `sorter` suite (the same helper as conftest.set_answers)."""
    import json

    (root / "evals" / "answers.json").write_text(json.dumps(answers))
