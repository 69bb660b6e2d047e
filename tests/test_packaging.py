"""What `pip install replay-workbench` gets: every package, and what lives at the repository root —
the dashboard app (`dashboards/`) and the example project the demo runs (`models.toml`, `evals/`,
`cassettes/`) — inside the wheel; and the wheel, installed alone with only the dependencies it
declares, runs the demo from an empty folder, every call priced, every command it suggests working."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from importlib.metadata import distribution
from pathlib import Path

import duckdb
import pytest
from packaging.requirements import Requirement

from workbench.config import spool_dir_of
from workbench.store.ingest import ingest_spools

REPO = Path(__file__).resolve().parents[1]
# what the build reads: the project file and the folders and files it packages (not a venv, a store, ...)
SOURCES = ("pyproject.toml", "README.md", "workbench", "dashboards", "models.toml", "evals", "cassettes")
EXAMPLE = {f"workbench/_example/{path.relative_to(REPO).as_posix()}" for path in
           [REPO / "models.toml", *(REPO / "evals").iterdir(), *(REPO / "cassettes").iterdir()] if path.is_file()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(folder / "out"),
         str(source)], capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (folder / "out").glob("replay_workbench-*.whl")
    return wheel


def test_the_package_list_names_every_folder_of_the_code():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(path.parent.relative_to(REPO).parts) for path in (REPO / "workbench").rglob("*.py")
               if "__pycache__" not in path.parts}
    assert listed == folders | {"workbench._dashboards", "workbench._example", "workbench._example.evals",
                                "workbench._example.cassettes"}


def test_the_wheel_ships_every_module_the_dashboard_and_the_example_where_they_are_found(wheel, tmp_path):
    names = set(zipfile.ZipFile(wheel).namelist())
    code = {path.relative_to(REPO).as_posix() for path in (REPO / "workbench").rglob("*.py") if "__pycache__" not in path.parts}
    pages = {f"workbench/_dashboards/{path.name}" for path in (REPO / "dashboards").glob("*.py")}
    assert code <= names and pages <= names and "workbench/_dashboards/app.py" in pages
    assert EXAMPLE <= names and "workbench/_example/cassettes/classifier.json" in EXAMPLE
    assert not [name for name in names if name.startswith("workbench/_example/") and name not in EXAMPLE]

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


def _declared_closure(wheel: Path) -> set[str]:
    """The distributions the wheel needs (no extras), followed through their own requirements."""
    metadata = zipfile.ZipFile(wheel).read(next(name for name in zipfile.ZipFile(wheel).namelist()
                                                if name.endswith(".dist-info/METADATA"))).decode()
    pending = [(Requirement(line.split(":", 1)[1].strip()), "") for line in metadata.splitlines()
               if line.startswith("Requires-Dist:")]
    needed: set[str] = set()
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = distribution(requirement.name).metadata["Name"]
        for wanted in [""] * (name not in needed) + sorted(requirement.extras):
            pending += [(Requirement(text), wanted) for text in distribution(name).requires or []]
        needed.add(name)
    return needed


def _environment_of(wheel: Path, folder: Path) -> Path:
    """A fresh virtual environment holding the wheel and, beside it, only the distributions it
    declares (linked from this environment: no network, no index), so a dependency the wheel forgot
    to declare is missing there as it would be after `pip install replay-workbench`."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    linked = folder / "declared"
    linked.mkdir()
    for name in _declared_closure(wheel):
        dist = distribution(name)
        for top in {file.parts[0] for file in dist.files or [] if file.parts[0] != ".."}:
            target = Path(dist.locate_file(top))
            if target.exists() and not (linked / top).exists():
                (linked / top).symlink_to(target, target_is_directory=target.is_dir())
    (site / "declared.pth").write_text(str(linked) + "\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    return python.parent


def _serves(command: list[str], cwd: Path, env: dict) -> str | None:
    """None when the server answers its health check, else what it printed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = cwd.parent / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen([*command, "--port", str(port)], cwd=cwd, env=env, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 180  # a loaded CI machine starts streamlit slowly
            while time.monotonic() < deadline and process.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                        if response.status == 200:
                            return None
                except OSError:
                    time.sleep(0.5)
        finally:
            process.terminate()
            process.wait(timeout=30)
    return log.read_text(errors="replace") or f"nothing, exit code {process.returncode}"


def test_the_wheel_alone_runs_the_demo_from_an_empty_folder_and_every_next_command_works(wheel, tmp_path):
    bin_dir = _environment_of(wheel, tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("WORKBENCH_", "PYTHON", "VIRTUAL_ENV", "OPENAI_", "ANTHROPIC_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    where = subprocess.run(["workbench", "--version"], cwd=empty, env=env, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0 and shutil.which("workbench", path=env["PATH"]) == str(bin_dir / "workbench")

    demo = subprocess.run(["workbench", "demo"], cwd=empty, env=env, capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "Wrote the example project into" in demo.stdout and "unpriced" not in demo.stdout
    assert {path.name for path in empty.iterdir()} == {".workbench", "models.toml", "evals", "cassettes"}
    store = empty / ".workbench" / "workbench.duckdb"
    ingest_spools(store, spool_dir_of(store), wait=True)  # after the ingester the demo left at exit
    with duckdb.connect(str(store), read_only=True) as con:
        calls, unpriced = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE settled AND cost_micros IS NULL) FROM calls").fetchall()[0]
    assert calls > 0 and unpriced == 0
    assert re.findall(r"^  eval \S+ +(\S+)$", demo.stdout, re.MULTILINE) == ["pass", "pass", "pass"]

    suggested = [line.strip() for line in demo.stdout.split("Next:")[1].splitlines() if line.strip()]
    assert "workbench dashboard" in suggested and len(suggested) >= 5
    for command in suggested:
        if command == "workbench dashboard":
            failure = _serves(command.split(), empty, env)
            assert failure is None, f"the dashboard did not come up: {failure}"
            continue
        result = subprocess.run(command.split(), cwd=empty, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
