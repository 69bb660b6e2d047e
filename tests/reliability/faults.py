"""The reliability suite: faults a careless user or an attacker would bring (canaries in every place a
credential travels, killed and starved processes, a full or read-only disk, hostile files, abrupt
exits), each followed by the invariants of DESIGN.md's "What must always hold". Most scenarios run
in a child process, because what they break (the interpreter's exit, a mount, a process-wide
tracer) must not leak into the test process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.store.db import open_store
from workbench.store.spool import ingesters_of  # noqa: F401 - the tests find it here, beside the wait on it

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, *args: str, cwd: Path, env: dict | None = None, timeout: float = 120,
               prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (the repository's `tests/` on its path), in `cwd`."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]), **(env or {})}
    full_env.pop("PYTEST_XDIST_TESTRUNUID", None)
    return subprocess.run([*(prefix or []), sys.executable, "-c", code, *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def workbench_cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120,
                  prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    return run_python("from workbench.cli import main; main()", *args, cwd=cwd, env=env, timeout=timeout,
                      prefix=prefix)


def store_text(db: Path) -> str:
    """Every text of every table of a store (each column cast to text), one line per row and column.
    Opened as Workbench's readers open it: waiting out an ingester that still holds it."""
    with open_store(db, read_only=True, wait_s=60) as con:
        lines = []
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall():
            columns = [name for (name,) in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema = 'main'",
                [table]).fetchall()]
            for column in columns:
                for (value,) in con.execute(f'SELECT CAST("{column}" AS VARCHAR) FROM "{table}"').fetchall():
                    if value is not None:
                        lines.append(f"{table}.{column}: {value}")
        return "\n".join(lines)


def count(db: Path, sql: str) -> int:
    with open_store(db, read_only=True, wait_s=60) as con:
        return con.execute(sql).fetchall()[0][0]


def ingesters_until_none(db, timeout_s: float = 90) -> set[int]:
    """Wait for every ingester of `db` to end; the pids of those seen meanwhile."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = set(ingesters_of(db))
        if not running:
            return seen
        seen.update(running)
        time.sleep(0.02)
    raise AssertionError(f"ingesters still running: {ingesters_of(db)}")


def assert_spool_whole_after_the_standby_left(db, calls: int) -> None:
    """A killed process's standby ingester saw its input end without a word and left without
    opening the store; the spool holds every one of the `calls` calls, and a later ingestion (any
    reader's) stores them all."""
    from workbench.config import spool_dir_of
    from workbench.store.ingest import ingest_spools

    ingesters_until_none(db)
    assert not db.exists()
    spooled = sum(path.read_bytes().count(b'"kind":"call"') for path in spool_dir_of(db).glob("*.jsonl"))
    assert spooled == calls
    ingest_spools(db, spool_dir_of(db), wait=True)
    assert count(db, "SELECT count(*) FROM calls") == calls


def _can_unshare() -> list[str] | None:
    """The `unshare` prefix that gives a child its own mount namespace (root: a plain one; else a
    user namespace mapped to root), or None where neither works."""
    if shutil.which("unshare") is None:
        return None
    for prefix in (["unshare", "--mount", "--propagation", "private"],
                   ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]):
        if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    return None


@pytest.fixture(scope="session")
def mount_namespace() -> list[str]:
    """A prefix that runs a command in a private mount namespace, where it may mount a small tmpfs
    (a full disk) or remount one read-only, without touching the machine's mounts."""
    prefix = _can_unshare()
    if prefix is None:
        pytest.fail("the disk-fault tests need `unshare` (util-linux) with mount namespaces: "
                    "run as root, or enable unprivileged user namespaces")
    return prefix


def in_namespace(prefix: list[str], script: str, cwd: Path, env: dict | None = None,
                 timeout: float = 180) -> subprocess.CompletedProcess:
    """Run a bash `script` in a private mount namespace (see `mount_namespace`), with `$PY` the
    interpreter and the repository importable; its mounts vanish with it."""
    full_env = {**os.environ, "PY": sys.executable,
                "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]), **(env or {})}
    full_env.pop("PYTEST_XDIST_TESTRUNUID", None)
    return subprocess.run([*prefix, "bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
