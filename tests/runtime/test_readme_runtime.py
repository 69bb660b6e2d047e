"""The README's runtime sample, run as a newcomer would (a copy of the project's models.toml, the
Anthropic endpoint pointed at the fake provider over real HTTP); and every test its contract table
names exists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def runtime_section() -> str:
    return README[README.index("## The runtime\n"):README.index("## Money and the model registry\n")]


def test_the_runtime_sample_runs_and_continues_from_its_transcript(fake_provider, fake_url, tmp_path):
    [sample] = re.findall(r"```python\n(.*?)```", runtime_section(), re.DOTALL)
    shutil.copy(ROOT / "models.toml", tmp_path / "models.toml")
    (tmp_path / "sample.py").write_text(sample)
    env = {key: value for key, value in os.environ.items() if not key.startswith("WORKBENCH_")}
    env.update(ANTHROPIC_BASE_URL=fake_url, ANTHROPIC_API_KEY="sk-ant-readme",
               WORKBENCH_DB=str(tmp_path / "wb.duckdb"), WORKBENCH_TRANSCRIPT_SECRET="readme-" + "k" * 40)
    result = subprocess.run([sys.executable, "sample.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "1", "2", "1"]  # one turn, then one more from the transcript
    second = fake_provider.requests[1].json["messages"]
    assert second[0]["content"][0]["text"] == "Where is order A-17?"
    assert second[-1]["content"][-1]["text"] == "And when will it arrive?"


def test_every_test_the_contract_table_names_exists():
    named = re.findall(r"`(test_\w+\.py)(?:::(\w+))?`", runtime_section())
    assert len(named) > 25
    for file, test in named:
        path = ROOT / "tests" / "runtime" / file
        assert path.is_file(), file
        if test:
            assert f"def {test}(" in path.read_text(), f"{file}::{test}"
    sources = "".join(path.read_text() for path in (ROOT / "tests" / "runtime").glob("test_*.py"))
    for tail in re.findall(r"`…(?:::)?(\w+)`", runtime_section()):  # a row's further tests, abbreviated
        assert re.search(rf"def \w*{tail}\(", sources), tail
