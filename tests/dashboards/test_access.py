"""Who can reach the dashboard: it listens on loopback unless told otherwise, and `--host` beyond
this machine needs a password the user set (never a default, at least 12 characters); the pages
ask for it (tests/dashboards/test_pages.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import free_port, stop
from workbench.cli.project import _exposed_without_password


def listening(port: int) -> set[str]:
    """The addresses a TCP socket listens on at `port`, read from the kernel's tables (Linux)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                if width == 8:
                    found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
                else:
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                    found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


def dashboard(tmp_path: Path, *args: str, password: str | None = None) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != "WORKBENCH_DASHBOARD_PASSWORD"}
    env["WORKBENCH_SPOOL_DIR"] = str(tmp_path / "spool")
    if password is not None:
        env["WORKBENCH_DASHBOARD_PASSWORD"] = password
    return subprocess.Popen([sys.executable, "-m", "workbench", "dashboard", "--db", str(tmp_path / "wb.duckdb"), *args],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_listening(port: int, process: subprocess.Popen, timeout: float = 120) -> set[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if listening(port):
            time.sleep(0.5)  # every socket of the server is open
            return listening(port)
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port} after {timeout}s")


@pytest.mark.parametrize(("args", "password", "expected"), [
    ((), None, {"127.0.0.1"}),  # the default: this machine only
    (("--host", "127.0.0.2"), "a password of my own", {"127.0.0.2"}),
])
def test_the_dashboard_listens_where_it_is_told_and_on_loopback_by_default(tmp_path, args, password, expected):
    port = free_port()
    process = dashboard(tmp_path, "--port", str(port), *args, password=password)
    try:
        assert wait_listening(port, process) == expected
    finally:
        stop(process)


@pytest.mark.parametrize("password", [None, "", "short"])
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "dashboard.example.com"])
def test_listening_beyond_this_machine_needs_a_password_the_user_set(tmp_path, host, password):
    result = dashboard(tmp_path, "--host", host, "--port", str(free_port()), password=password)
    try:
        out, err = result.communicate(timeout=120)
    finally:
        if result.poll() is None:
            stop(result)
    assert result.returncode == 2 and "WB_DASHBOARD_EXPOSED" in err and "Traceback" not in err
    assert "WORKBENCH_DASHBOARD_PASSWORD" in err and "secrets.token_urlsafe" in err


def test_a_long_enough_password_lets_the_dashboard_listen_on_the_network(monkeypatch):
    monkeypatch.setenv("WORKBENCH_DASHBOARD_PASSWORD", "twelve chars")
    assert _exposed_without_password("0.0.0.0") is None
    monkeypatch.delenv("WORKBENCH_DASHBOARD_PASSWORD")
    for loopback in ("127.0.0.1", "localhost", "::1", "[::1]", "127.8.9.10"):
        assert _exposed_without_password(loopback) is None
