from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import workbench


@pytest.fixture
def store(tmp_path):
    workbench.configure(db=tmp_path / "wb.duckdb")
    yield tmp_path / "wb.duckdb"
    workbench.configure()


SUITE = '''
import json, pathlib
from workbench.evaluate import define_prompt, define_eval, exact, numeric_tolerance

ANSWERS = json.loads((pathlib.Path(__file__).parent / "answers.json").read_text())
PROMPT = define_prompt("sorter", "v1", system="Sort.", template="Sort {{{{items}}}}")

def target(vars, ctx):
    return ANSWERS[vars["key"]]

define_eval("sorter", PROMPT, [{{"id": f"c{{i}}", "vars": {{"key": f"c{{i}}"}}, "expected": "ok"}} for i in range({cases})],
            [exact()], tolerance=0.05, target=target)
'''


@pytest.fixture
def project(tmp_path):
    """A project folder with one pure-Python suite whose answers a test can change."""

    def make(cases: int = 20) -> Path:
        (tmp_path / "evals").mkdir(exist_ok=True)
        (tmp_path / "evals" / "sorter.py").write_text(SUITE.format(cases=cases))
        set_answers(tmp_path, {f"c{i}": "ok" for i in range(cases)})
        return tmp_path

    return make


def set_answers(root: Path, answers: dict) -> None:
    import json

    (root / "evals" / "answers.json").write_text(json.dumps(answers))


def workbench_cli(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    environment = {**os.environ, "WORKBENCH_DB": str(root / "wb.duckdb"), **(env or {})}
    environment.pop("WORKBENCH_EVAL_RECORD", None) if env is None or "WORKBENCH_EVAL_RECORD" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], cwd=root, capture_output=True, text=True, env=environment, timeout=120
    )


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()
