"""A real project's own pytest-recording suite, run offline twice: with pytest-recording (as the
project runs it), and with pytest-recording uninstalled and Workbench installed. Same tests must
pass; both times are reported. Nothing of the project is changed or committed: it is cloned into
benchmarks/out/ (gitignored), or its checkout is given with --project.

    python benchmarks/pytest_recording_suite.py                      # clone, install, 3 runs of each
    python benchmarks/pytest_recording_suite.py --project PATH --runs 5 --append

The project: genai-impact/ecologits (MPL-2.0), which measures the environmental impact of LLM
calls by wrapping the SDKs (openai, Azure OpenAI, anthropic, mistralai, cohere, google-genai,
huggingface_hub, litellm) and tests every wrapper with `@pytest.mark.vcr`, a `vcr_config` fixture
(filter_headers) and its committed cassettes in `tests/cassettes/<module>/<test>.yaml`. Its clients
are built inside the tests with no Workbench code; huggingface_hub calls through requests and
aiohttp, so vcrpy's half of the compatibility is exercised too. None of its cassettes are in
tests/fixtures/corpus.

Both environments install the project with all its extras and its dev tools at the versions of its
poetry.lock (constraints), except that the Workbench one has no pytest-recording and takes the vcrpy
Workbench requires. Offline: each run is inside a fresh network namespace (`unshare -n`) when the
machine allows it, else the table says "not isolated". The project's conftest loads tiktoken's
cl100k_base at import, which tiktoken downloads on first use: TIKTOKEN_CACHE_DIR points it at the
copy litellm ships in its wheel. Runs alternate (A, B, C, A, B, C, ...) so load drifts evenly."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ElementTree
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "out"
SOURCE = "https://github.com/genai-impact/ecologits.git"
COMMIT = "2d0a1c76358a1aad0c530d47794e37465ad029e8"  # v0.9.1, 2025-11-13
EXTRAS = "openai,mistralai,anthropic,cohere,huggingface-hub,google-genai,litellm,opentelemetry"
DEV = ["pytest", "pytest-dotenv", "pytest-asyncio", "numpy", "toml"]  # its dev group, pytest-recording aside
# where the lock holds two versions (per Python version), the one for this interpreter
LOCK_CHOICE = {"numpy": "2.2.6", "tiktoken": "0.9.0", "vcrpy": "7.0.0"}
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|skipped|error).*?) in [\d.]+s")  # pytest's last line


def sh(*command, **options) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], check=True, **options)


def checkout(project: Path | None) -> Path:
    if project is not None:
        return project.resolve()
    target = OUT / "ecologits"
    if not (target / ".git").exists():
        sh("git", "clone", "--quiet", SOURCE, target)
    sh("git", "-C", target, "checkout", "--quiet", COMMIT)
    return target


def constraints(project: Path, skip: set[str]) -> Path:
    lock = tomllib.loads((project / "poetry.lock").read_text())
    pins: dict[str, str] = {}
    for package in lock["package"]:
        pins.setdefault(package["name"], LOCK_CHOICE.get(package["name"], package["version"]))
    path = OUT / f"constraints-{'-'.join(sorted(skip)) or 'all'}.txt"
    path.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items()) if name not in skip))
    return path


def environment(name: str, project: Path, extra: list[str], skip: set[str]) -> Path:
    venv = OUT / f"venv-{name}"
    python = venv / "bin" / "python"
    if not python.exists():
        sh(sys.executable, "-m", "venv", venv)
        sh(python, "-m", "pip", "install", "-q", "--upgrade", "pip")
        sh(python, "-m", "pip", "install", "-q", "-c", constraints(project, skip), f"{project}[{EXTRAS}]", *DEV, *extra)
    return python


def versions(python: Path, names: list[str]) -> str:
    code = ("import importlib.metadata as m\n"
            f"for n in {names!r}:\n"
            "    try: print(f'{n} {m.version(n)}')\n"
            "    except m.PackageNotFoundError: print(f'{n} absent')")
    return ", ".join(subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.split("\n")[:-1])


def isolated() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-n", "true"], capture_output=True).returncode == 0


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_suite(python: Path, project: Path, env: dict, offline: bool, junit: Path) -> tuple[float, float, str, dict]:
    """Wall time, CPU time (the test process and the children it waited for: on a loaded machine the
    steadier figure), pytest's summary line and every test's outcome."""
    # -c: the project's own configuration, never that of a repository it is checked out inside
    command = [str(python), "-m", "pytest", "-c", "pyproject.toml", "tests/", "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}"]
    if offline:
        command = ["unshare", "-n", *command]
    start, cpu = time.perf_counter(), _cpu()
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, _cpu() - cpu
    summary = [match.group(1) for line in result.stdout.splitlines() if (match := SUMMARY.match(line))]
    return wall, cpu, summary[-1] if summary else result.stdout[-2000:], outcomes(junit)


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from the JUnit file."""
    found = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                state = child.tag
        found[f"{case.get('classname')}::{case.get('name')}"] = state
    return found


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"


def _usual(runs: list[dict[str, str]]) -> dict[str, str]:
    """Each test's most frequent outcome over the runs (a test that fails once in three is flaky, not failing)."""
    return {test: Counter(run.get(test, "absent") for run in runs).most_common(1)[0][0] for test in runs[0]}


def report(raw: dict) -> list[str]:
    runs = raw["runs"]  # variant -> [{"wall", "cpu", "states"}]
    reference = _usual([run["states"] for run in runs["pytest-recording"]])
    lines = [
        f"- project: genai-impact/ecologits at {raw['commit']} (`{SOURCE}`), its own `tests/` unchanged: "
        f"{len(reference)} tests",
        f"- environment A: {raw['versions']['A']}",
        f"- environment B: {raw['versions']['B']} (this checkout)",
        f"- offline: {'each run in its own network namespace (unshare -n): no network at all' if raw['offline'] else 'not isolated'}",
        f"- load average at the end: {raw['load']}",
        "",
        "| variant | passed, per run | failed (run: test) | usual outcome of every test = pytest-recording's | "
        "CPU time, median (min-max) | wall time, median (min-max) |",
        "|---|---|---|---|---|---|",
    ]
    for name, results in runs.items():
        states = [result["states"] for result in results]
        passed = ", ".join(str(sum(1 for state in run.values() if state == "passed")) for run in states)
        failed = "; ".join(f"{index + 1}: {test}" for index, run in enumerate(states)
                           for test, state in sorted(run.items()) if state in ("failure", "error")) or "none"
        usual = _usual(states)
        differing = sorted(test for test in set(reference) | set(usual) if usual.get(test) != reference.get(test))
        same = "yes" if not differing else f"NO: {differing[:5]}"
        lines.append(f"| {name} | {passed} | {failed} | {same} | {_spread([r['cpu'] for r in results])} | "
                     f"{_spread([r['wall'] for r in results])} |")
    lines.append(f"\n({len(runs['pytest-recording'])} runs of each, alternating. CPU: the test process and the "
                 "children it waited for.)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", type=Path, help="an ecologits checkout (default: clone it into benchmarks/out/)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant")
    parser.add_argument("--report", type=Path, help="only print the report of a previous run's raw results (JSON)")
    parser.add_argument("--append", action="store_true", help="append the results to benchmarks/RESULTS.md")
    args = parser.parse_args()
    raw = json.loads(args.report.read_text()) if args.report else measure(args)
    lines = report(raw)
    print("\n".join(lines))
    if args.append:
        machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        with (REPO / "benchmarks" / "RESULTS.md").open("a") as handle:
            handle.write(f"\n## A real pytest-recording suite, with pytest-recording and with Workbench — {raw['stamp']}\n\n"
                         f"- machine: {machine}\n- command: `{raw['command']}`\n" + "\n".join(lines) + "\n")


def measure(args) -> dict:
    OUT.mkdir(parents=True, exist_ok=True)
    project = checkout(args.project)
    commit = subprocess.run(["git", "-C", project, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    with_recording = environment("recording", project, ["pytest-recording"], set())
    with_workbench = environment("workbench", project, [str(REPO)], {"vcrpy", "pytest-recording"})
    sh(with_workbench, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", REPO)  # this checkout, as it is now
    offline = isolated()
    store = Path(tempfile.mkdtemp(prefix="wb-suite-"))
    base = {key: value for key, value in os.environ.items() if not key.startswith("WORKBENCH_")}
    variants = {
        "pytest-recording": (with_recording, {}),
        "Workbench": (with_workbench, {"WORKBENCH_DB": str(store / "wb.duckdb")}),
        "Workbench, capture off": (with_workbench, {"WORKBENCH_DB": str(store / "off.duckdb"), "WORKBENCH_CAPTURE": "false"}),
    }
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for run in range(args.runs):
        for variant, (name, (python, extra)) in enumerate(variants.items()):
            tokenizers = next(python.parent.parent.glob("lib/python*/site-packages/litellm/litellm_core_utils/tokenizers"))
            env = {**base, **extra, "TIKTOKEN_CACHE_DIR": str(tokenizers)}
            wall, cpu, summary, states = run_suite(python, project, env, offline, OUT / f"junit-{run}-{variant}.xml")
            runs[name].append({"wall": wall, "cpu": cpu, "states": states})
            changed = subprocess.run(["git", "-C", project, "status", "--porcelain", "--untracked-files=no"],
                                     capture_output=True, text=True).stdout  # its cassettes above all
            print(f"run {run + 1} {name}: {wall:.1f} s wall, {cpu:.1f} s CPU, {summary}" + (f"; CHANGED: {changed}" if changed else ""))
            if changed:
                sys.exit(f"the project's checkout changed during a run: {changed}")
    raw = {
        "stamp": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/pytest_recording_suite.py " + " ".join(sys.argv[1:]),
        "commit": commit, "offline": offline, "runs": runs,
        "load": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        "versions": {"A": versions(with_recording, ["pytest", "pytest-recording", "vcrpy", "openai", "anthropic"]),
                     "B": versions(with_workbench, ["pytest", "pytest-recording", "vcrpy", "replay-workbench"])},
    }
    (OUT / "pytest_recording_suite.json").write_text(json.dumps(raw, indent=1))
    return raw


if __name__ == "__main__":
    main()
