"""Every command and code sample of the README, run as a newcomer would, in a copy of the project
(the store in a temporary folder; the official SDKs pointed, as the README says, at the fake provider
that `workbench fake-provider` serves)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from workbench.demo.examples import write_example

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, re.DOTALL)
SETUP_DEMO = "pip install -e . && workbench demo"
SETUP_TESTS = "pip install -e '.[test]' && pytest -n 2 -q"


def blocks(language: str) -> list[str]:
    return [body for kind, body in BLOCKS if kind == language]


def commands() -> list[str]:
    return [line.strip() for body in blocks("bash") for line in body.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of what a newcomer's checkout has: the example suites, cassettes and models."""
    folder = tmp_path_factory.mktemp("project")
    write_example(folder)
    return folder


def environment(project: Path, **extra: str | None) -> dict[str, str]:
    """The environment of a newcomer's shell; a variable given as None is unset."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("WORKBENCH_")}
    env.update({"WORKBENCH_DB": str(project / ".workbench" / "workbench.duckdb"), **extra})
    return {key: value for key, value in env.items() if value is not None}


def expected_exit(command: str) -> int:
    """The exit code a README command announces with `# exit N`, else 0."""
    match = re.search(r"#\s*exit (\d+)", command)
    return int(match.group(1)) if match else 0


def shell(command: str, project: Path, **extra: str) -> subprocess.CompletedProcess:
    # `workbench` is the console script of this environment, as after `pip install -e .`
    command = command.split("  #")[0]
    command = re.sub(r"^workbench\b", f"{sys.executable} -m workbench", command)
    command = re.sub(r"^pytest\b", f"{sys.executable} -m pytest", command)
    return subprocess.run(command, shell=True, cwd=project, env=environment(project, **extra),
                          capture_output=True, text=True, timeout=300)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def fake_provider_env(project) -> Iterator[dict[str, str]]:
    """`workbench fake-provider` started as the README starts it (on a free port instead of the
    README's), and the variables the README exports, which must be the ones it prints."""
    start = next(command for command in commands() if command.startswith("workbench fake-provider"))
    readme_port = re.search(r"--port (\d+)", start).group(1)
    exports = [command for command in commands() if command.startswith("export ") and "_BASE_URL=" in command]
    assert exports and all(readme_port in command for command in exports)
    port = str(free_port())
    process = subprocess.Popen([sys.executable, "-m", "workbench", *start.split()[1:-1], port], cwd=project,
                               env=environment(project), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = [process.stdout.readline() for _ in range(6)]
        assert [line.strip() for line in printed if line.startswith("export ")] == [
            command.replace(readme_port, port) for command in exports], (printed, process.stderr.read())
        yield dict(pair.replace(readme_port, port).split("=", 1) for command in exports for pair in command.split()[1:])
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_two_setup_commands_are_the_ones_ci_and_newcomers_run():
    assert SETUP_DEMO in commands() and SETUP_TESTS in commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[test]'" in ci
    assert "\npytest -n 2 -q\n" in ci  # the test command, verbatim


def test_the_demo_then_every_report_command(project):
    demo = shell(SETUP_DEMO.split(" && ")[1], project)
    assert demo.returncode == 0, demo.stderr
    assert "calls recorded" in demo.stdout and "eval classifier    pass" in demo.stdout
    reports = [command for command in commands() if command.startswith(("workbench report", "workbench runs"))]
    assert len(reports) >= 6
    for command in reports:
        result = shell(command, project)
        assert result.returncode == 0, (command, result.stderr)
        assert "Traceback" not in result.stderr
    listed = shell("workbench runs list --limit 1 --format json", project)
    run_id = re.search(r'"run_id": "(\w+)"', listed.stdout).group(1)
    shown = shell(f"workbench runs show {run_id}", project)
    assert shown.returncode == 0 and "billed" in shown.stdout


def test_the_dashboard_command_serves_the_app(project):
    port = free_port()
    assert "workbench dashboard" in commands()
    process = subprocess.Popen(
        [sys.executable, "-m", "workbench", "dashboard", "--port", str(port)], cwd=project,
        env=environment(project), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120  # the server imports what the pages need before it answers
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard did not come up"
                time.sleep(0.5)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_python_samples_capture_and_bill_through_the_real_sdk(project, fake_provider_env):
    capture, billing = blocks("python")[:2]
    script = project / "sample.py"
    script.write_text(capture + "\n" + billing)
    result = subprocess.run([sys.executable, str(script)], cwd=project, capture_output=True, text=True, timeout=120,
                            env=environment(project, **fake_provider_env))
    assert result.returncode == 0, result.stderr
    calls, cost = result.stdout.splitlines()[0].split()
    assert (int(calls), int(cost) > 0) == (1, True)
    assert result.stdout.splitlines()[1].split()[:2] == ["1", "0"]  # one call answered, none unsettled


def test_the_resume_sample_pays_only_for_what_the_earlier_run_did_not_answer(project, fake_provider_env):
    sample = next(body for body in blocks("python") if "resume=first.run_id" in body)
    script = project / "resume_sample.py"
    script.write_text(sample)
    result = subprocess.run([sys.executable, str(script)], cwd=project, capture_output=True, text=True, timeout=120,
                            env=environment(project, **fake_provider_env))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "2"]


def record_then_replay(project: Path, env: dict[str, str], sample_mark: str, test_file: str) -> None:
    """A README pytest sample, run with the README's two commands: recorded against the fake
    provider the README starts, then replayed with neither the provider nor the key."""
    sample = next(body for body in blocks("python") if sample_mark in body)
    tests = project / "tests"
    tests.mkdir(exist_ok=True)
    (tests / test_file).write_text(sample)
    record, replay = [command for command in commands() if command.startswith(f"pytest tests/{test_file}")]
    recorded = shell(record, project, **env)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    replayed = shell(replay, project, OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY=None)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_the_pytest_plugin_sample_records_then_replays(project, fake_provider_env):
    record_then_replay(project, fake_provider_env, "workbench_cassette", "test_greeting.py")
    assert (project / "tests" / "cassettes" / "greeting.json").is_file()  # beside the test file


def test_the_ambient_cassette_sample_records_then_replays(project, fake_provider_env):
    sample = next(body for body in blocks("python") if "workbench.cassette(" in body)
    (project / "ambient_app.py").write_text(sample)
    recorded = shell(f"{sys.executable} ambient_app.py", project, **fake_provider_env, WORKBENCH_RECORD_MODE="record")
    assert recorded.returncode == 0, recorded.stderr
    assert "Hello" in (project / "cassettes" / "app.json").read_text()
    replayed = shell(f"{sys.executable} ambient_app.py", project, OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                     OPENAI_API_KEY="sk-other")
    assert replayed.returncode == 0, replayed.stderr


def test_the_pytest_recording_sample_records_then_passes_offline_with_the_network_blocked(project, fake_provider_env):
    record_then_replay(project, fake_provider_env, "@pytest.mark.vcr", "test_summary.py")
    cassette = (project / "tests" / "cassettes" / "test_summary" / "test_summary.yaml").read_text()
    assert "Summarise" in cassette and fake_provider_env["OPENAI_API_KEY"] not in cassette


def test_the_eval_and_cassette_commands_and_the_ci_job(project, fake_provider_env):
    for command in commands():
        if command.startswith(("workbench eval", "workbench check", "workbench cassettes")):
            result = shell(command, project, **fake_provider_env)
            assert result.returncode == expected_exit(command), (command, result.stdout, result.stderr)
            assert "Traceback" not in result.stderr
    job = yaml.safe_load(next(body for body in blocks("yaml")))
    steps = [step["run"] for step in job["jobs"]["evals"]["steps"] if "run" in step]
    summary = project / "summary.md"
    for step in steps[1:]:  # after the install
        result = shell(step, project, GITHUB_STEP_SUMMARY=str(summary))
        assert result.returncode == 0, (step, result.stderr)
    assert "classifier" in summary.read_text() and (project / "eval-results.xml").is_file()


def test_the_suite_sample_defines_a_suite(project, tmp_path):
    sample = next(body for body in blocks("python") if "define_eval(" in body)
    folder = tmp_path / "readme_suite"
    folder.mkdir()
    shutil.copy(ROOT / "evals" / "classifier_cases.jsonl", folder / "classifier_cases.jsonl")
    (folder / "suite.py").write_text(sample)
    code = (
        "from pathlib import Path\nfrom workbench.evaluate.suite import load_suites\n"
        f"suites = load_suites([Path({str(folder / 'suite.py')!r})])\n"
        "suite = suites['classifier']\nprint(len(suite.cases), [s.name for s in suite.scorers])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env=environment(project))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "8 ['exact[category]', 'json_valid']"
