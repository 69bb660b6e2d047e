"""What `pip install replay-workbench` gets: every package, and the dashboard app, which lives at the
repository root in `dashboards/`, inside the wheel, where `workbench dashboard` finds it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist", ".workbench", ".venv",
                              ".pytest_cache", ".hypothesis", "tests", "docs", "cassettes", "evals", "benchmarks")


def test_the_package_list_names_every_folder_of_the_code():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(path.parent.relative_to(REPO).parts) for path in (REPO / "workbench").rglob("*.py")
               if "__pycache__" not in path.parts}
    assert listed == folders | {"workbench._dashboards"}


def test_the_wheel_ships_every_module_and_the_dashboard_where_the_cli_finds_it(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=SKIP)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "out"),
         str(source)], capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "out").glob("replay_workbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    code = {path.relative_to(REPO).as_posix() for path in (REPO / "workbench").rglob("*.py") if "__pycache__" not in path.parts}
    pages = {f"workbench/_dashboards/{path.name}" for path in (REPO / "dashboards").glob("*.py")}
    assert code <= names and pages <= names and "workbench/_dashboards/app.py" in pages

    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    found = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from workbench.cli import dashboard_app; "
         "print(dashboard_app())", str(site)], capture_output=True, text=True, timeout=60,
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == (site / "workbench" / "_dashboards" / "app.py").resolve()
