from __future__ import annotations

from pathlib import Path

import pytest

import workbench
from eval_support import examples_copy, set_answers


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


@pytest.fixture
def examples(tmp_path) -> Path:
    """A fresh copy of the repository's example suites, cassettes and models.toml (what a clone has)."""
    return examples_copy(tmp_path / "repo")
