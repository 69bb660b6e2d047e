"""What `workbench eval` loads: a progress bar only on a terminal (in CI or a pipe, not even its
module)."""

from __future__ import annotations

import os
import subprocess
import sys

from eval_support import OFFLINE_ENV

# the exit hooks run before the command's process ends (`workbench.cli.core._exit`): what was imported by then
LOADED_AT_EXIT = """
import atexit, sys
atexit.register(lambda: print("loaded:", sorted(name for name in sys.modules if name.startswith("rich.progress"))))
from workbench.cli import main
main()
"""


def test_an_eval_in_a_pipe_never_imports_the_progress_bar(examples):
    result = subprocess.run([sys.executable, "-c", LOADED_AT_EXIT, "eval", "classifier"], cwd=examples,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, **OFFLINE_ENV, "WORKBENCH_DB": str(examples / "wb.duckdb")})
    assert result.returncode == 0, result.stderr
    assert "classifier" in result.stdout  # the report was printed
    assert "loaded: []" in result.stdout
