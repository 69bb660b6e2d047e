"""Where `workbench demo` runs the example suites: the folder it runs in when that is a project, a
fresh copy of the example in a folder with none of it, and the example where it is (never writing)
in a folder with part of a project; the commands it suggests next run from that folder as printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from workbench.demo.examples import EXAMPLE, example_project, project_for_demo
from workbench.demo.run import Summary, print_summary

ROOT = Path(__file__).resolve().parents[2]


def suggested(summary: Summary, db_option: Path | None, cwd: Path) -> list[str]:
    """The commands the demo prints under "Next:", when run in `cwd` (the working directory)."""
    assert Path.cwd() == cwd
    console = Console(record=True, width=400, markup=False)
    print_summary(summary, cwd / "wb.duckdb", console, db_option)
    return [line.strip() for line in console.export_text().split("Next:")[1].splitlines() if line.strip()]


def summary_for(project: Path, wrote: bool) -> Summary:
    return Summary(calls=1, runs=1, spend="0.00 USD", unpriced_calls=0, cache_read_tokens=0, cache_savings="0.00 USD",
                   failed_runs=0, failed_cost="0.00 USD", compactions=0, verdicts={}, project=project, wrote_example=wrote)


def test_this_checkout_is_the_example_project():
    assert example_project() == ROOT


def test_an_empty_folder_gets_a_copy_of_the_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert project_for_demo(tmp_path) == (tmp_path, True)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(EXAMPLE)
    assert sorted(path.name for path in (tmp_path / "evals").iterdir()) == sorted(
        path.name for path in (ROOT / "evals").iterdir() if path.name != "__pycache__")
    lines = suggested(summary_for(tmp_path, True), None, tmp_path)
    assert "workbench eval" in lines and not any("--evals" in line or "--db" in line for line in lines)


def test_a_project_folder_is_used_as_it_is(tmp_path):
    (tmp_path / "evals").mkdir()
    (tmp_path / "models.toml").write_text("")
    assert project_for_demo(tmp_path) == (tmp_path, False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["evals", "models.toml"]


def test_a_folder_with_part_of_a_project_is_left_alone_and_the_next_commands_say_where(tmp_path, monkeypatch):
    (tmp_path / "cassettes").mkdir()
    monkeypatch.chdir(tmp_path)
    project, wrote = project_for_demo(tmp_path)
    assert (project, wrote) == (example_project(), False) and [p.name for p in tmp_path.iterdir()] == ["cassettes"]
    lines = suggested(summary_for(project, False), Path("my store.duckdb"), tmp_path)
    assert "workbench report cost --by model --db 'my store.duckdb'" in lines
    compares = [line for line in lines if line.startswith("workbench eval compare")]
    assert len(compares) == 2 and all(f"--evals {project / 'evals'}" in compare for compare in compares)
    env = {key: value for key, value in os.environ.items() if not key.startswith("WORKBENCH_")}
    for compare in compares:  # the two versions, then the matrix of versions and models: both replay here
        result = subprocess.run([sys.executable, "-m", "workbench", *compare.split()[1:]], cwd=tmp_path, timeout=300,
                                env={**env, "WORKBENCH_DB": str(tmp_path / "wb.duckdb")}, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
