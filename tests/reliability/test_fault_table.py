"""The published table of fault tests (benchmarks/RESULTS.md) stays true: every row names a test
that exists, and every reliability test has a row."""

from __future__ import annotations

import re

from reliability.faults import REPO


def _table() -> str:
    text = (REPO / "benchmarks" / "RESULTS.md").read_text()
    start = text.index("## Fault tests")
    end = text.find("\n## ", start + 1)  # its own section: later sections' tables are not fault rows
    return text[start:end if end != -1 else len(text)]


def test_every_row_names_a_test_that_exists():
    rows = [line for line in _table().splitlines() if line.startswith("| ") and "`tests/" in line]
    assert len(rows) >= 20
    for row in rows:
        path, name = re.search(r"`(tests/[\w/]+\.py)::(\w+)`", row).groups()
        assert re.search(rf"^def {name}\(", (REPO / path).read_text(), re.MULTILINE), row


def test_every_reliability_test_has_a_row():
    table = _table()
    for path in sorted((REPO / "tests" / "reliability").glob("test_*.py")):
        if path.name == "test_fault_table.py":
            continue
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.MULTILINE):
            assert f"tests/reliability/{path.name}::{name}`" in table, f"{path.name}::{name} has no row"
