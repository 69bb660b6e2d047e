"""The command line's conventions, as a user meets them: `--version`; fixed values checked before
the store opens; one output convention (a table, `--format csv|json` to stdout) on every command that
prints data; run ids whole and their unique starts accepted; text printed as it is, brackets and all;
and every command, given bad or hostile input, answers with a `WB_` code and exit 2, never a
traceback."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

from workbench.demo.examples import write_example

ROOT = Path(__file__).resolve().parents[1]
HOSTILE_NAME = "[[model]] [/x] [bold]nightly"

STORE = textwrap.dedent("""
    import sys
    import workbench
    from workbench.demo.fake_provider import FakeProvider, FakeTransport

    client = workbench.http_client(transport=FakeTransport(FakeProvider()))
    for n in range(20):  # more runs than hex digits: two ids surely share their first character
        with workbench.run(sys.argv[1] if n == 0 else f"run-{n}", note="[red]tag[/]"):
            client.post("https://api.openai.com/v1/chat/completions", json={
                "model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"[[model]] hello {n}"}]})
    workbench.flush()
""")


def clean_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("WORKBENCH_")}
    return {**env, "COLUMNS": "200", **extra}


def workbench(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=cwd, env=clean_env(**env),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A store with 20 runs of one call each; the first run has a name full of brackets."""
    db = tmp_path_factory.mktemp("store") / "wb.duckdb"
    made = subprocess.run([sys.executable, "-c", STORE, HOSTILE_NAME], cwd=ROOT, env=clean_env(WORKBENCH_DB=str(db)),
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    return db


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of what a newcomer's checkout has: the example suites, cassettes and models."""
    folder = tmp_path_factory.mktemp("project")
    write_example(folder)
    return folder


def run_ids(store: Path) -> list[str]:
    listed = workbench("runs", "list", "--format", "json", "--db", str(store))
    assert listed.returncode == 0, listed.stderr
    return [row["run_id"] for row in json.loads(listed.stdout)]


def test_version_is_the_installed_distributions():
    result = workbench("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"workbench {version('replay-workbench')}")


def test_a_command_builds_only_its_own_branch_and_help_lists_every_command():
    import typer

    from workbench.cli import app
    from workbench.cli.core import command_tree

    def built(argv: list[str]) -> set[str]:
        return set(typer.main.get_command(command_tree(argv)).commands)

    everything = built([])
    assert {"eval", "report", "runs", "demo", "dashboard", "collect", "store", "cassettes"} <= everything
    assert built(["eval", "nosuch"]) == {"eval"} and built(["demo"]) == {"demo"}
    assert built(["report", "cost", "--format", "json"]) == {"report"}
    # help, the version, nothing and a misspelt command see the whole tree
    for argv in (["--help"], ["--version"], ["evl"], []):
        assert built(argv) == everything, argv
    assert set(typer.main.get_command(app).commands) == everything  # the app itself is left whole
    listed = workbench("--help").stdout
    assert all(f" {name} " in listed for name in everything), listed
    misspelt = workbench("evl")
    assert misspelt.returncode == 2 and "Did you mean 'eval'?" in misspelt.stderr


def test_fixed_values_are_checked_before_anything_opens_the_store(tmp_path):
    db = tmp_path / "never.duckdb"
    for args in (["report", "cost", "--format", "nope"], ["report", "cache", "--format", "xml"],
                 ["report", "failures", "--by", "model"], ["runs", "list", "--limit", "0"]):
        result = workbench(*args, "--db", str(db))
        assert result.returncode == 2 and "WB_CLI_USAGE" in result.stderr, (args, result.stderr)
    assert "'model', 'prompt'" in workbench("report", "cache", "--by", "nope", "--db", str(db)).stderr
    assert not db.exists() and not list(tmp_path.iterdir())
    # the mode of an eval is checked before any suite is looked for
    assert "WB_CLI_USAGE" in workbench("eval", "--mode", "sometimes", cwd=tmp_path).stderr


def test_eval_help_shows_the_options_the_readme_uses():
    readme = (ROOT / "README.md").read_text()
    used = set()
    for line in readme.splitlines():
        line = line.strip().removeprefix("- run: ")
        if line.startswith("workbench eval") and not line.startswith(("workbench eval compare", "workbench eval cases")):
            used |= set(re.findall(r"--[a-z][a-z-]+", line.split("  #")[0]))
    assert {"--record-baseline", "--junit", "--markdown", "--prompt-version", "--mode"} <= used
    shown = workbench("eval", "--help").stdout
    assert all(option in shown for option in used), used
    assert "compare" in shown and "cases-from-runs" in shown


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_every_command_that_prints_data_prints_csv_and_json_to_stdout(store, project, fmt):
    [first, *_] = run_ids(store)
    db = ["--db", str(store)]
    commands = [
        ["report", "cost", *db], ["report", "cache", "--by", "prompt", *db], ["report", "compactions", *db],
        ["report", "failures", *db], ["report", "evals", *db], ["runs", "list", *db], ["runs", "show", first, *db],
        ["cassettes", "show", "cassettes/classifier.json"], ["cassettes", "check"], ["check"], ["eval", "classifier"],
        ["eval", "compare", "classifier", "v1", "v2"],
    ]
    for command in commands:
        result = workbench(*command, "--format", fmt, cwd=project, WORKBENCH_DB=str(project / "wb.duckdb"))
        assert result.returncode == 0, (command, result.stderr)
        if fmt == "json":
            data = json.loads(result.stdout)
            assert isinstance(data, (list, dict)), command
        else:
            header, *rows = list(csv.reader(io.StringIO(result.stdout)))
            assert header and all(len(row) == len(header) for row in rows), command
    shown = json.loads(workbench("runs", "show", first, "--format", "json", *db).stdout)
    assert shown["run"]["run_id"] == first and shown["calls"][0]["request_json"]  # the bodies too
    cost = json.loads(workbench("report", "cost", "--format", "json", *db).stdout)
    assert all(isinstance(row["cost_micros"], int) for row in cost)  # money exact, in micros


def test_run_ids_print_whole_and_a_unique_start_or_end_names_a_run(store, tmp_path):
    ids = run_ids(store)
    table = workbench("runs", "list", "--db", str(store)).stdout
    assert sorted(re.findall(r"\b[0-9a-f]{32}\b", table)) == sorted(ids)
    target = ids[3]
    # an id starts with the millisecond it was made in (workbench/ids.py): a start past it names one run
    shown = workbench("runs", "show", target[:18], "--db", str(store))
    assert shown.returncode == 0 and target in shown.stdout, shown.stderr
    # ... and so does its random end, as the dashboard shows it
    by_end = workbench("runs", "show", target[-8:], "--db", str(store))
    assert by_end.returncode == 0 and target in by_end.stdout, by_end.stderr
    # the longest start two runs share (the error names up to 10 runs)
    shared = next(prefix for size in range(31, 0, -1) for prefix in sorted({run_id[:size] for run_id in ids})
                  if 1 < sum(i.startswith(prefix) for i in ids) <= 10)
    ambiguous = workbench("runs", "show", shared, "--db", str(store))
    assert ambiguous.returncode == 2 and "WB_RUN_AMBIGUOUS" in ambiguous.stderr
    assert all(run_id in ambiguous.stderr for run_id in ids if run_id.startswith(shared))
    exported = workbench("cassettes", "export", str(tmp_path / "run.json"), "--run", target[-12:], "--db", str(store))
    assert exported.returncode == 0, exported.stderr
    assert json.loads((tmp_path / "run.json").read_text())["workbench"]["exported_from_run"] == target


def test_text_with_brackets_prints_as_it_is(store, tmp_path):
    listed = workbench("runs", "list", "--db", str(store))
    assert HOSTILE_NAME in listed.stdout
    named = next(row["run_id"] for row in json.loads(workbench("runs", "list", "--format", "json", "--db", str(store)).stdout)
                 if row["name"] == HOSTILE_NAME)
    shown = workbench("runs", "show", named, "--db", str(store))
    assert shown.returncode == 0 and HOSTILE_NAME in shown.stdout and "[[model]] hello 0" in shown.stdout
    assert "[red]tag[/]" in shown.stdout
    folder = tmp_path / "[red]cassettes"
    folder.mkdir()
    shutil.copy(ROOT / "cassettes" / "classifier.json", folder / "[[case]].json")
    assert "[red]cassettes/[[case]].json" in workbench("cassettes", "show", str(folder / "[[case]].json")).stdout
    missing = workbench("runs", "show", "[/x]", "--db", str(store))
    assert "'[/x]'" in missing.stderr and "Traceback" not in missing.stderr


def test_check_in_a_folder_with_nothing_to_check_says_so(tmp_path):
    result = workbench("check", cwd=tmp_path)
    assert result.returncode == 2 and "WB_CHECK_EMPTY" in result.stderr and "nothing to check" in result.stderr


# Every command (its path in the tree) with bad and hostile input. Placeholders: {store} a store,
# {tmp} an empty folder of the test's own, {file} a file that is no cassette, store or suite.
HOSTILE: list[tuple[str, list[str]]] = [
    ("", ["no-such-command"]), ("", ["--bogus"]),
    ("check", ["--format", "xml"]), ("check", ["--lock", "{tmp}"]), ("check", ["--cassettes", "{file}"]),
    ("dashboard", ["--port", "-1"]), ("dashboard", ["--port", "99999999999999999999"]), ("dashboard", ["--db", "{tmp}"]),
    ("demo", ["--seed", "[bold]"]), ("demo", ["--db", "{tmp}"]),
    ("fake-provider", ["--port", "-5"]), ("fake-provider", ["--port", "70000"]), ("fake-provider", ["--port", "many"]),
    ("collect", ["--port", "-1"]), ("collect", ["--db", "{tmp}"]), ("collect", ["--host", "0.0.0.0", "--port", "0"]),
    ("collect", ["--host", "[bogus]", "--port", "0"]),
    ("cassettes show", ["{tmp}/missing.json"]), ("cassettes show", ["{tmp}"]), ("cassettes show", ["{file}"]),
    ("cassettes show", ["{tmp}/[/x].json"]), ("cassettes show", ["cassettes/classifier.json", "--models", "{tmp}/none.toml"]),
    ("cassettes show", ["cassettes/classifier.json", "--format", "yaml"]),
    ("cassettes check", ["{tmp}/missing"]), ("cassettes check", ["{tmp}"]), ("cassettes check", ["--format", "[x]"]),
    ("cassettes export", ["{tmp}/out.json", "--run", "[/nope]", "--db", "{store}"]),
    ("cassettes export", ["{tmp}/out.json", "--run", "", "--db", "{store}"]),
    ("cassettes export", ["{tmp}", "--run", "{run}", "--db", "{store}"]), ("cassettes export", ["{tmp}/out.json"]),
    ("eval run", ["--mode", "bogus"]), ("eval run", ["no-such-suite"]), ("eval run", ["--evals", "{tmp}/none"]),
    ("eval run", ["--max-cost-increase", "-1"]), ("eval run", ["--max-cost-increase", "nan"]),
    ("eval run", ["--max-cost-increase", "inf"]), ("eval run", ["classifier", "--junit", "{tmp}"]),
    ("eval run", ["classifier", "--prompt-version", "[v9]"]), ("eval run", ["{file}"]),
    ("eval compare", ["no-such-suite", "v1", "v2"]), ("eval compare", ["classifier", "v1", "v9"]),
    ("eval compare", ["classifier", "v1", "v2", "--mode", "sometimes"]), ("eval compare", ["classifier", "--epochs", "0"]),
    ("eval compare", ["classifier", "--format", "yaml"]), ("runs resume", ["[/nope]", "--db", "{store}", "--", "true"]),
    ("runs resume", ["abc", "--db", "{tmp}/missing.duckdb", "--", "true"]),
    ("store maintain", ["--keep-days", "-1", "--db", "{store}"]), ("store maintain", ["--db", "{tmp}/missing.duckdb"]),
    ("store copy", ["--db", "{store}", "--to", "{tmp}"]), ("store copy", ["--db", "{tmp}/missing.duckdb", "--to", "{tmp}/x.duckdb"]),
    ("eval cases-from-runs", []), ("eval cases-from-runs", ["--prompt", "p", "--limit", "-3"]),
    ("eval cases-from-runs", ["--prompt", "p", "--since", "2020-13-45"]),
    ("eval cases-from-runs", ["--prompt", "[/p]"]), ("eval cases-from-runs", ["--prompt", "p", "--limit", "1e999"]),
    ("prompts lock", ["--lock", "{tmp}"]), ("prompts lock", ["--evals", "{file}"]),
    ("report cost", ["--by", "nope", "--db", "{store}"]), ("report cost", ["--fail-above", "lots", "--db", "{store}"]),
    ("report cost", ["--top", "-2", "--db", "{store}"]), ("report quarantine", ["--db", "{tmp}/missing.duckdb"]),
    ("report quarantine", ["--format", "yaml"]), ("models", ["--models", "{file}"]), ("models", ["--format", "xml"]), ("report cost", ["--since", "2020-02-30", "--db", "{store}"]),
    ("report cost", ["--db", "{tmp}"]), ("report cost", ["--db", "{tmp}/missing.duckdb"]), ("report cost", ["--db", "{file}"]),
    ("report cache", ["--by", "day"]), ("report cache", ["--since", "[/x]", "--db", "{store}"]),
    ("report compactions", ["--format", "xml"]), ("report compactions", ["--since", "yesterday", "--db", "{store}"]),
    ("report failures", ["--by", "model"]), ("report failures", ["--db", "{tmp}/missing.duckdb"]),
    ("report evals", ["--since", "99999-01-01", "--db", "{store}"]), ("report evals", ["--format", "html"]),
    ("runs list", ["--limit", "-1"]), ("runs list", ["--limit", "0"]), ("runs list", ["--limit", str(10**30)]),
    ("runs list", ["--since", "2026-1-1x", "--db", "{store}"]),
    ("runs show", ["[/nope]", "--db", "{store}"]), ("runs show", ["", "--db", "{store}"]),
    ("runs show", ["abc", "--db", "{tmp}/missing.duckdb"]), ("runs show", ["abc", "--format", "pdf"]),
]


def command_paths() -> set[str]:
    import typer

    from workbench.cli import app

    def walk(command, path: str) -> set[str]:
        children = getattr(command, "commands", None)
        if not children:
            return {path}
        return set().union(*(walk(child, f"{path} {name}".strip()) for name, child in children.items()))

    return walk(typer.main.get_command(app), "")


def test_every_command_is_driven_with_hostile_input():
    assert command_paths() <= {path for path, _ in HOSTILE}, command_paths() - {path for path, _ in HOSTILE}


@pytest.mark.parametrize(("path", "args"), HOSTILE, ids=[f"{path or 'workbench'}: {' '.join(args)}" for path, args in HOSTILE])
def test_bad_and_hostile_input_is_a_wb_error_with_exit_2(path, args, store, project, tmp_path):
    (tmp_path / "notes.txt").write_text("not a cassette, a store or a suite\n")
    values = {"store": str(store), "tmp": str(tmp_path), "file": str(tmp_path / "notes.txt")}
    if any("{run}" in arg for arg in args):
        values["run"] = run_ids(store)[0]
    command = [*path.split(), *[arg.format(**values) for arg in args]]
    result = workbench(*command, cwd=project, WORKBENCH_DB=str(project / "hostile.duckdb"))
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert re.search(r"^(✗ )?WB_[A-Z_]+: ", result.stderr, re.MULTILINE), result.stderr
    assert re.search(r"^ *fix: \S", result.stderr, re.MULTILINE), result.stderr
