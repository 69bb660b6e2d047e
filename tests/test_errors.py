"""Every WB_ code the source raises is registered, and the README's table documents it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workbench.errors import CODES, WorkbenchError

ROOT = Path(__file__).resolve().parents[1]


def _codes_in(paths) -> set[str]:
    found = set()
    for path in paths:
        found |= set(re.findall(r"\bWB_[A-Z_]+[A-Z]\b", path.read_text()))
    return found


def test_every_code_used_in_the_source_is_registered():
    sources = [*ROOT.joinpath("workbench").rglob("*.py"), *ROOT.joinpath("dashboards").rglob("*.py")]
    used = _codes_in(sources)
    assert used, "the scan found no codes at all"
    assert used <= set(CODES), used - set(CODES)


def test_every_registered_code_is_documented_in_the_readme():
    readme = ROOT.joinpath("README.md").read_text()
    missing = [code for code in CODES if f"`{code}`" not in readme]
    assert not missing


def test_an_unregistered_code_is_refused():
    with pytest.raises(ValueError):
        WorkbenchError("WB_NOT_A_CODE", "cause", "fix")
    error = WorkbenchError("WB_EVAL_THRESHOLD", "mean fell", "fix the prompt")
    assert (error.code, error.exit_code) == ("WB_EVAL_THRESHOLD", 1)
    assert WorkbenchError("WB_CASSETTE_INVALID", "c", "f").exit_code == 2
