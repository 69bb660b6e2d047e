"""What `workbench eval` loads: a progress bar only on a terminal (in CI or a pipe, not even its
module); PyYAML only for a YAML cassette (the example suites' cassettes are JSON); ElementTree only
for --junit."""

from __future__ import annotations

import os
import subprocess
import sys

from eval_support import OFFLINE_ENV

# the exit hooks run before the command's process ends (`workbench.cli.core._exit`): what was imported by then
LOADED_AT_EXIT = """
import atexit, sys
atexit.register(lambda: print("loaded:", sorted(name for name in sys.modules if name.startswith("rich.progress"))))
atexit.register(lambda: print("yaml, xml loaded:", "yaml" in sys.modules, "xml.etree.ElementTree" in sys.modules))
from workbench.cli import main
main()
"""


def _eval_classifier(examples) -> str:
    result = subprocess.run([sys.executable, "-c", LOADED_AT_EXIT, "eval", "classifier"], cwd=examples,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, **OFFLINE_ENV, "WORKBENCH_DB": str(examples / "wb.duckdb")})
    assert result.returncode == 0, result.stderr
    assert "classifier" in result.stdout  # the report was printed
    return result.stdout


def test_an_eval_in_a_pipe_never_imports_the_progress_bar(examples):
    assert "loaded: []" in _eval_classifier(examples)


def test_an_eval_replaying_a_json_cassette_without_junit_imports_neither_pyyaml_nor_elementtree(examples):
    assert (examples / "cassettes" / "classifier.json").is_file()
    assert "yaml, xml loaded: False False" in _eval_classifier(examples)
