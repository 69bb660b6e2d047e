"""A real PostgreSQL for the DuckLake catalog, started by the tests (initdb into a temporary folder,
pg_ctl on a free port), and a shared folder for the lake's data files.

The lake needs the ducklake and postgres_scanner extensions for the running DuckDB: `.ci/run`
installs `replay-workbench[lake]` (DuckDB 1.5.5 and the packaged extensions) in an environment of its
own and runs these tests there with WORKBENCH_LAKE_TESTS=required, where a missing extension or a
missing PostgreSQL fails them. In the embedded environment (another DuckDB) they are skipped."""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REQUIRED = os.environ.get("WORKBENCH_LAKE_TESTS") == "required"


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"the lake tests are required here: {reason}")
    pytest.skip(f"{reason} (the lake tests run in .ci/run's lake environment)")


def _pg_bin() -> Path | None:
    """Debian's server binaries (newest version), else a pg_ctl on PATH."""
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    if versions:
        return Path(versions[-1]).parent
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Postgres:
    """A PostgreSQL server of the test session: `database()` makes a fresh database on it."""

    def __init__(self, bin_dir: Path, folder: Path, port: int, as_user: list[str]) -> None:
        self.bin, self.folder, self.port, self.as_user = bin_dir, folder, port, as_user

    def run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.as_user, str(self.bin / tool), *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{tool} failed: {done.stdout}{done.stderr}"

    def database(self) -> str:
        name = "wb_" + uuid.uuid4().hex[:12]
        self.run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return f"dbname={name} host=127.0.0.1 port={self.port} user=postgres"


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    try:
        from workbench.store import lake

        import duckdb

        lake.load_extension(duckdb.connect(), "ducklake")
        lake.load_extension(duckdb.connect(), "postgres_scanner")
    except Exception as exc:  # noqa: BLE001 - reported as the reason
        _unavailable(f"DuckDB cannot load the lake's extensions: {exc}")
    bin_dir = _pg_bin()
    if bin_dir is None:
        _unavailable("no PostgreSQL server (pg_ctl) is installed")
    # initdb refuses root: the server then runs as the `postgres` user, in a folder it owns
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    folder = Path(tempfile.mkdtemp(prefix="wb-pg-"))
    if as_user:
        shutil.chown(folder, "postgres")
    server = Postgres(bin_dir, folder, _free_port(), as_user)
    server.run("initdb", "-D", str(folder / "data"), "-U", "postgres", "-A", "trust")
    server.run("pg_ctl", "-D", str(folder / "data"), "-l", str(folder / "log"), "-w", "-o",
               f"-p {server.port} -k {folder} -c listen_addresses=127.0.0.1", "start")
    try:
        yield server
    finally:
        server.run("pg_ctl", "-D", str(folder / "data"), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def lake_db(postgres, tmp_path, monkeypatch) -> str:
    """A new, empty lake: `WORKBENCH_DB` names it, `WORKBENCH_LAKE_DATA_PATH` is a shared folder."""
    from workbench.config import settings

    db = "ducklake:postgres:" + postgres.database()
    data = tmp_path / "lake-data"
    data.mkdir()
    monkeypatch.setenv("WORKBENCH_DB", db)
    monkeypatch.setenv("WORKBENCH_LAKE_DATA_PATH", str(data) + "/")
    monkeypatch.chdir(tmp_path)
    settings.cache_clear()
    yield db
    settings.cache_clear()


def _spool(folder: Path, machine: str, calls: int) -> dict[str, int]:
    """Spool files as a recorder on `machine` writes them (another host's: never deleted here),
    and the cost of each call id they hold."""
    folder.mkdir(parents=True)
    costs: dict[str, int] = {}
    for part in range(2):
        with open(folder / f"{machine}-{100 + part}-{part:08x}.jsonl", "w") as spool:
            for n in range(calls // 2):
                call_id = f"{machine}-{part}-{n}"
                costs[call_id] = 1000 + n
                row = {"call_id": call_id, "run_id": f"{machine}-run", "provider": "openai", "wire": "openai.chat",
                       "model_requested": "gpt-4o-mini", "model_served": "gpt-4o-mini", "http_status": 200,
                       "settled": True, "replayed": False, "input_tokens": 10, "output_tokens": 5,
                       "cost_micros": costs[call_id], "currency": "USD",
                       "started_at": "2026-11-30T10:00:00+00:00", "ended_at": "2026-11-30T10:00:01+00:00"}
                spool.write(json.dumps({"kind": "call", "row": row}) + "\n")
                spool.write(json.dumps({"kind": "call_body", "row": {"call_id": call_id, "output_text": "ok"}}) + "\n")
    return costs


@pytest.fixture
def spooled():
    """Writes spool files of synthetic calls: `spooled(folder, machine, calls)` -> {call_id: cost}."""
    return _spool
