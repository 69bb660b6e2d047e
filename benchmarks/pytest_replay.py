"""pytest replay at 100, 1,000 and 10,000 interactions: pytest-recording (+ vcrpy) and Workbench's
pytest-recording compatibility (`workbench_vcr`), on the same generated suite, in the same run.

    python benchmarks/pytest_replay.py                         # 100, 1,000, 10,000; best of 3
    python benchmarks/pytest_replay.py --sizes 100 1000 --runs 3 --append
    python benchmarks/pytest_replay.py --sizes 100 1000 --instructions --append   # valgrind: the load does not move it

The suite: N tests, one interaction each, as a pytest-recording suite is written: modules of 100
tests, each test `@pytest.mark.vcr` making one chat-completions call through its module's
`openai.OpenAI()` (one client per module: building a client loads the CA bundle, 50-500 ms, which
would bury both plugins' costs under the SDK's),
its cassette `cassettes/<module>/<test>.yaml` in vcrpy's format (what `--record-mode=once` writes),
no `vcr_config` (pytest-recording's defaults: record mode none, match_on without the body).

Both run in one environment of their own, benchmarks/out/venv-pytest-replay (created on first use):
this checkout, pytest, pytest-recording, openai and nothing else (a development environment's other
pytest plugins, hypothesis and langsmith, cost seconds of start-up that are no one's here).

Variants, each `python -m pytest -q -p no:randomly -p no:cacheprovider` in a subprocess, alternating:

* pytest-recording: `-p no:workbench -p no:workbench_vcr` (Workbench installed but not loaded);
* Workbench: pytest-recording installed too, Workbench takes its place (its default: capture on,
  each replayed call spooled for the store).

Wall and CPU (the pytest process and the children it waited for) of the pytest process, best of
--runs. On a shared machine both move 10-30% between identical runs: `--instructions` runs each
variant once under `valgrind --tool=cachegrind --cache-sim=no` instead (after one run without it, so
bytecode is written and Workbench's price lookups are kept beside the store, as in a project's later
sessions) and reports the instructions the pytest process retired, which the load does not move. Workbench hands the spooled calls, as the session ends, to the ingester standing by since its
first test (not pytest's child when it works: its CPU is not in pytest's; nothing is lost, the spool
is on disk); its time until the calls are in the store is reported apart."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / "benchmarks" / "out" / "venv-pytest-replay"
PYTHON = VENV / "bin" / "python"
PER_MODULE = 100
URL = "https://api.openai.com/v1/chat/completions"
TEST = '''
@pytest.mark.vcr
def test_{i}():
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{{"role": "user", "content": "Question {i}: where is order #{order}?"}}])
    assert reply.choices[0].message.content.startswith("Order #{order}")
'''
VARIANTS = {
    "pytest-recording": ["-p", "no:workbench", "-p", "no:workbench_vcr"],
    "Workbench": [],
    "Workbench before": [],  # --before: the same, from another environment
}


def interaction(i: int) -> dict:
    order = 100000 + i
    request = {"messages": [{"role": "user", "content": f"Question {i}: where is order #{order}?"}], "model": "gpt-4o-mini"}
    response = {
        "id": f"chatcmpl-{i:08d}", "object": "chat.completion", "created": 1_700_000_000 + i,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": f"Order #{order} left the warehouse yesterday and arrives within 3 days."}}],
        "usage": {"prompt_tokens": 18, "completion_tokens": 17, "total_tokens": 35},
    }
    return {
        "request": {"body": json.dumps(request), "method": "POST", "uri": URL, "headers": {
            "accept": ["application/json"], "content-type": ["application/json"], "host": ["api.openai.com"],
            "user-agent": ["OpenAI/Python 1.109.1"]}},
        "response": {"status": {"code": 200, "message": "OK"}, "body": {"string": json.dumps(response)}, "headers": {
            "content-type": ["application/json"], "openai-processing-ms": ["412"], "x-request-id": [f"req_{i:08d}"]}},
    }


def make_suite(root: Path, n: int) -> Path:
    suite = root / f"suite_{n}"
    if suite.exists():
        return suite
    tests = suite / "tests"
    tests.mkdir(parents=True)
    for module_number, start in enumerate(range(0, n, PER_MODULE)):
        module = f"test_chat_{module_number:03d}"
        cassettes = tests / "cassettes" / module
        cassettes.mkdir(parents=True)
        body = ["import openai\nimport pytest\n\nclient = openai.OpenAI()\n"]
        for i in range(start, min(n, start + PER_MODULE)):
            body.append(TEST.format(i=i, order=100000 + i))
            (cassettes / f"test_{i}.yaml").write_text(
                yaml.safe_dump({"interactions": [interaction(i)], "version": 1}, sort_keys=False))
        (tests / f"{module}.py").write_text("".join(body))
    (suite / "pytest.ini").write_text("[pytest]\n")
    return suite


def environment() -> Path:
    if not PYTHON.exists():
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([PYTHON, "-m", "pip", "install", "-q", "-e", REPO, "pytest", "pytest-recording", "openai", "pyyaml"],
                       check=True)
    subprocess.run([PYTHON, "-m", "compileall", "-q", REPO / "workbench"], check=True)  # pip compiled the peer's
    return PYTHON


def versions() -> str:
    code = "import importlib.metadata as m; print(', '.join(f'{n} {m.version(n)}' for n in " \
           "('pytest', 'pytest-recording', 'vcrpy', 'openai', 'httpx')))"
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _in_store(db: Path, n: int) -> bool:
    """Whether the suite's n calls are in the store. A spool file can outlive its records: an
    ingester that ran while its writer was alive leaves the file (with its offset at the end) to the
    next one, so the file's presence says nothing; the store is read once no ingester holds it."""
    spool = db.parent / (db.name + ".workbench") / "spool"  # workbench.config.spool_dir_of
    if spool.exists() and not any(spool.glob("*.jsonl")):
        return True  # every file finished and removed (a spooled record never leaves its file unread)
    from workbench.store.spool import ingesters_of

    if ingesters_of(db) or not db.exists():
        return False
    import duckdb

    try:
        with duckdb.connect(str(db), read_only=True) as con:
            return con.execute("SELECT count(*) FROM calls").fetchone()[0] >= n
    except duckdb.Error:  # an ingester started meanwhile holds it
        return False


def run(suite: Path, variant: str, n: int, store: Path, before: Path | None, instructions: bool = False) -> dict:
    env = {**os.environ, "WORKBENCH_DB": str(store / "wb.duckdb"), "OPENAI_API_KEY": "sk-bench-not-a-key"}
    env.pop("WORKBENCH_CAPTURE", None)
    # bytecode caches warm for both, as in a user's environment: without them every run compiles
    # this checkout's modules (site-packages were compiled by pip) and the suite's rewritten tests
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    python = before if variant == "Workbench before" else PYTHON
    command = [str(python), "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", *VARIANTS[variant],
               "tests"]
    if instructions:  # the standby ingester is not pytest's child: valgrind counts the pytest process alone
        command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *command]
    start, cpu = time.perf_counter(), _cpu()
    result = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, _cpu() - cpu
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-500:]
    if f"{n} passed" not in last:
        raise SystemExit(f"{variant} at {n}: {last}\n{result.stdout[-3000:]}")
    refs = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr) if instructions else None
    if instructions and refs is None:
        raise SystemExit(f"{variant} at {n}: no instruction count from valgrind\n{result.stderr[-2000:]}")
    settled = None
    if variant != "pytest-recording":  # the detached ingester: until the calls are in the store
        while not _in_store(store / "wb.duckdb", n) and time.perf_counter() - start < wall + 120:
            time.sleep(0.05)
        settled = time.perf_counter() - start
    count = int(refs.group(1).replace(",", "")) if refs else None
    return {"wall": wall, "cpu": cpu, "settled": settled, "instructions": count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None, help="where suites are generated (kept between runs)")
    parser.add_argument("--append", action="store_true", help="append the table to benchmarks/RESULTS.md")
    parser.add_argument("--before", type=Path, default=None,
                        help="the python of another environment holding an earlier Workbench: a third variant")
    parser.add_argument("--label", default="", help="a note for the section title (e.g. before / after)")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions under valgrind's cachegrind, once a variant (after a run without it)")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    work = args.work or Path(tempfile.gettempdir()) / "wb-pytest-replay"
    work.mkdir(parents=True, exist_ok=True)
    environment()
    variants = ["pytest-recording", "Workbench", *(["Workbench before"] if args.before else [])]
    rows = []
    for n in args.sizes:
        suite = make_suite(work, n)
        results: dict[str, list[dict]] = {variant: [] for variant in variants}
        if args.instructions:
            for variant in variants:  # warm: bytecode written, the store's price lookups kept
                store = Path(tempfile.mkdtemp(prefix="store-", dir=work))
                run(suite, variant, n, store, args.before)
                results[variant].append(run(suite, variant, n, store, args.before, instructions=True))
                shutil.rmtree(store, ignore_errors=True)
                print(n, variant, results[variant][-1], flush=True)
        for attempt in range(0 if args.instructions else args.runs):
            for variant in variants:
                store = Path(tempfile.mkdtemp(prefix="store-", dir=work))
                results[variant].append(run(suite, variant, n, store, args.before))
                shutil.rmtree(store, ignore_errors=True)
                print(n, variant, attempt, results[variant][-1], flush=True)
        rows.append((n, results))
    table = (render_instructions if args.instructions else render)(rows, args)
    print(table)
    if args.append:
        with (REPO / "benchmarks" / "RESULTS.md").open("a") as handle:
            handle.write(table)


def _heading(args, measure: str) -> list[str]:
    load = os.getloadavg()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"\n## pytest replay, pytest-recording and Workbench side by side{measure}"
        f"{' — ' + args.label if args.label else ''} — {stamp}\n",
        f"- command: `python benchmarks/pytest_replay.py --sizes {' '.join(map(str, args.sizes))}"
        f"{' --instructions' if args.instructions else f' --runs {args.runs}'}`",
        f"- machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{versions()}",
        f"- suite: N tests in modules of {PER_MODULE}, one openai chat-completions call each, one vcrpy YAML cassette "
        "each, pytest-recording's default config",
        f"- load average at the end: {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}\n",
    ]


def render_instructions(rows, args) -> str:
    lines = [*_heading(args, ", counted in instructions (valgrind)"),
             "| tests (= interactions) | variant | instructions (pytest process) | ratio to pytest-recording |",
             "|---:|---|---:|---:|"]
    for n, results in rows:
        peer = results["pytest-recording"][0]["instructions"]
        for variant, measured in results.items():
            count = measured[0]["instructions"]
            lines.append(f"| {n:,} | {variant} | {count / 1e9:.3f} G | {count / peer:.3f} |")
    lines.append("\n(once each under `valgrind --tool=cachegrind --cache-sim=no`, after a run without it: bytecode "
                 "written, Workbench's price lookups kept beside its store, as in a project's later sessions)\n")
    return "\n".join(lines) + "\n"


def render(rows, args) -> str:
    lines = [
        *_heading(args, ""),
        "| tests (= interactions) | pytest-recording wall | Workbench wall | ratio | pytest-recording CPU | "
        "Workbench CPU | ratio | Workbench: calls in the store |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, results in rows:
        peer, ours = results["pytest-recording"], results["Workbench"]
        pw, ow = min(r["wall"] for r in peer), min(r["wall"] for r in ours)
        pc, oc = min(r["cpu"] for r in peer), min(r["cpu"] for r in ours)
        settled = min(r["settled"] for r in ours)
        lines.append(f"| {n:,} | {pw:.2f} s | {ow:.2f} s | {ow / pw:.2f} | {pc:.2f} s | {oc:.2f} s | {oc / pc:.2f} | "
                     f"{settled:.2f} s |")
        if "Workbench before" in results:
            old = results["Workbench before"]
            bw, bc = min(r["wall"] for r in old), min(r["cpu"] for r in old)
            lines.append(f"| {n:,}, Workbench before | | {bw:.2f} s | {bw / pw:.2f} | | {bc:.2f} s | {bc / pc:.2f} | "
                         f"{min(r['settled'] for r in old):.2f} s |")
    lines.append(f"\n(best of {args.runs} each, runs alternating; CPU: the pytest process and the children it waited "
                 "for; last column: wall until the suite's calls are in the store)\n")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
