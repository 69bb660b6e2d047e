"""Without the ducklake extension for the running DuckDB, a lake store is an error naming the fix
(the `lake` extra), in any environment: DuckDB cannot load it by name (no `INSTALL`ed copy in this
HOME) and the package on the path ships it for another DuckDB only."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_lake_without_its_extension_names_the_extra_to_install(tmp_path):
    package = tmp_path / "shadow" / "duckdb_extension_ducklake"
    (package / "extensions" / "v0.0.1").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "extensions" / "v0.0.1" / "ducklake.duckdb_extension").write_bytes(b"not for this DuckDB")
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(tmp_path / "shadow"),
           "WORKBENCH_DB": "ducklake:postgres:dbname=team host=127.0.0.1", "WORKBENCH_LAKE_DATA_PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "workbench", "runs", "list"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "WB_LAKE_EXTENSION_MISSING" in done.stderr
    assert "pip install 'replay-workbench[lake]'" in done.stderr.replace("\n", " ")
    assert "Traceback" not in done.stderr
