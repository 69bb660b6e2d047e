"""Recording a cassette of N interactions: is it linear in N? Two trees side by side in one run
(this checkout and, with `--baseline`, another one: a copy of main), each size recorded by each
tree in turn, so both figures come from the same minutes of the same machine.

    python benchmarks/record_scale.py --sizes 1000,10000
    python benchmarks/record_scale.py --sizes 1000,10000 --baseline /tmp/main-copy --append
    python benchmarks/record_scale.py --sizes 300 --profile      # cProfile of one recording, this tree

Three recording paths, each a fresh process (`--path`):

* `http`: the documented way, `openai.OpenAI(http_client=workbench.http_client(cassette=...,
  mode="record"))`, N chat completions with distinct prompts against the fake provider served over
  HTTP on 127.0.0.1 by another process (its CPU is not counted).
* `cassette`: the write path alone: N interactions (a ~0.5 KB request, a ~1.7 KB answer) handed to
  a recording session (`Cassette(path, "record").record(...)`, its saves as it grows), no network.
* `eval`: the eval's record step (`evaluate(suite, mode="record", record_baseline=True)`) of the
  generated classifier suite of `benchmarks/eval_replay.py` against the in-process fake provider, as
  that benchmark's "record" columns measure it.

Per run: wall time, the process's own CPU (its /proc stat, read every 10 ms while it runs), the CPU
of the detached ingesters its spool started (each one's /proc stat, its last reading), their count,
and CPU per interaction, the process's own and with its ingesters'; `x 1st` is that against the
first size (1.00 = linear; the goal of #21 is 10,000 within 11x of 1,000, i.e. at most 1.10)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from eval_replay import _cmdline, _own_cpu, free_port, offline_env, write_suite  # noqa: E402

HTTP_CODE = """
import sys
import openai
import workbench
count, cassette, base_url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url, api_key="sk-" "bench-secret-0123456789",
                       http_client=workbench.http_client(cassette=cassette, mode="record"))
for n in range(count):
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": f"ticket {n}: my invoice is wrong"}])
client.close()
"""

EVAL_CODE = """
import sys
from pathlib import Path
from workbench.evaluate.gate import evaluate
from workbench.evaluate.suite import load_suites
suite = load_suites([Path(sys.argv[1])])["bench"]
network = __import__('workbench.demo.examples', fromlist=['fake_network']).fake_network()
outcome = evaluate(suite, mode="record", record_baseline=True, network=network)
assert outcome.error is None, outcome.error
"""

CASSETTE_CODE = """
import json, sys
from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse
from workbench.replay.session import Cassette
count, path = int(sys.argv[1]), sys.argv[2]
cassette = Cassette(path, "record")
answer = json.dumps({"choices": [{"message": {"role": "assistant", "content": "billing " * 200}}]}).encode()
for n in range(count):
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"ticket {n}: " + "my invoice is wrong " * 20}]})
    cassette.record(Interaction(
        request=RecordedRequest(uri="https://api.openai.com/v1/chat/completions", body=body.encode(),
                                headers={"authorization": ["Bearer " "sk-" "bench-secret-0123456789"], "content-type": ["application/json"]}),
        response=RecordedResponse(status=200, headers={"content-type": ["application/json"]}, body=answer)))
cassette.save()
"""

SERVER_CODE = """
import sys
from workbench.demo import fake_server
from workbench.demo.fake_server import FakeServer
from workbench.demo.fake_provider import FakeProvider
fake_server._Handler.disable_nagle_algorithm = True
server = FakeServer(FakeProvider())
print(server.url, flush=True)
sys.stdin.read()
server.close()
"""


def _ingesters(root: Path) -> list[str]:
    marker = str(root / "store").encode()
    return [pid for pid in os.listdir("/proc") if pid.isdigit()
            and b"ingest_spools" in (line := _cmdline(pid)) and marker in line]


def run(command: list[str], root: Path, env: dict) -> dict:
    """Wall and own CPU of one recording process, and the CPU of the ingesters it started (until
    the last has finished)."""
    done = threading.Event()
    cpu: dict[str, float] = {}
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def watch() -> None:
        while not done.is_set():
            for pid in [str(child.pid), *_ingesters(root)]:
                cpu[pid] = max(cpu.get(pid, 0.0), _own_cpu(pid))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    errors = child.stderr.read()
    _, status, _usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    while _ingesters(root):
        time.sleep(0.01)
    done.set()
    watcher.join()
    own = cpu.pop(str(child.pid), 0.0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{errors.decode(errors='replace')[-3000:]}")
    return {"wall": wall, "own_cpu": own, "ingester_cpu": sum(cpu.values()), "ingesters": len(cpu)}


def record_once(tree: Path, path: str, count: int, base: Path, server_url: str) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"rec-{count}-", dir=base))
    env = {**offline_env(root, "http://127.0.0.1:9/v1"), "PYTHONPATH": str(tree), "NO_PROXY": "127.0.0.1"}
    if path in ("http", "cassette"):
        cassette = root / "cassettes" / "scale.json"
        command = [HTTP_CODE, str(count), str(cassette), f"{server_url}/v1"] if path == "http" else \
            [CASSETTE_CODE, str(count), str(cassette)]
        result = run([sys.executable, "-c", *command], root, env)
    else:
        suite_file = write_suite(root, "bench", count)
        cassette = root / "cassettes" / "bench.json"
        result = run([sys.executable, "-c", EVAL_CODE, str(suite_file)], root, env)
    recorded = len(json.loads(cassette.read_bytes())["interactions"])
    if recorded != count:
        raise SystemExit(f"{tree}: {recorded} interactions in the cassette, not {count}")
    return {**result, "cassette_mb": cassette.stat().st_size / 1e6}


def profile(path: str, count: int, base: Path, server_url: str) -> None:
    """cProfile of one recording, in this process (the fake server in another for `http`)."""
    import cProfile
    import pstats

    root = Path(tempfile.mkdtemp(prefix=f"prof-{count}-", dir=base))
    os.environ.update({**offline_env(root, "http://127.0.0.1:9/v1"), "NO_PROXY": "127.0.0.1"})
    os.chdir(root)
    if path == "http":
        code, argv = HTTP_CODE, ["-", str(count), str(root / "cassettes" / "scale.json"), f"{server_url}/v1"]
    elif path == "cassette":
        code, argv = CASSETTE_CODE, ["-", str(count), str(root / "cassettes" / "scale.json")]
    else:
        code, argv = EVAL_CODE, ["-", str(write_suite(root, "bench", count))]
    sys.argv = argv
    sys.path.insert(0, str(REPO))
    profiler = cProfile.Profile()
    profiler.runctx(code, {"__name__": "__profiled__"}, {})
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--path", choices=["http", "eval", "cassette"], default="http")
    parser.add_argument("--baseline", type=Path, help="another tree (a copy of main) recorded in the same run")
    parser.add_argument("--profile", action="store_true", help="cProfile one recording of the first size in this process (this tree)")
    parser.add_argument("--append", action="store_true", help="append the table to benchmarks/RESULTS.md")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    base = Path(tempfile.mkdtemp(prefix="wb-record-scale-"))
    trees = {"this branch": REPO, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    load_before = os.getloadavg()
    server = subprocess.Popen([sys.executable, "-c", SERVER_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, text=True)
    server_url = server.stdout.readline().strip()
    rows = []
    try:
        if args.profile:
            profile(args.path, sizes[0], base, server_url)
            return
        for count in sizes:
            for name, tree in (reversed(trees.items()) if count % 2 else trees.items()):
                result = record_once(tree, args.path, count, base, server_url)
                rows.append({"tree": name, "count": count, **result, "load": os.getloadavg()[0]})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.stdin.close()
        server.wait()
    text = render(args, rows, load_before, os.getloadavg())
    print(text)
    if args.append:
        with open(REPO / "benchmarks" / "RESULTS.md", "a") as handle:
            handle.write("\n" + text)


def render(args, rows: list[dict], load_before, load_after) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## Recording at scale, {args.sizes} interactions, path `{args.path}` — {now}", "",
        f"- command: `python benchmarks/record_scale.py --sizes {args.sizes} --path {args.path}"
        f"{' --baseline <copy of main>' if args.baseline else ''}`",
        f"- machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after", "",
        "| tree | interactions | cassette | wall | own CPU | ingesters (their CPU) | own CPU per interaction | x 1st "
        "| own + ingesters per interaction | x 1st | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    first: dict[str, tuple[float, float]] = {}
    for row in rows:
        own, total = row["own_cpu"] / row["count"], (row["own_cpu"] + row["ingester_cpu"]) / row["count"]
        first_own, first_total = first.setdefault(row["tree"], (own, total))
        lines.append(f"| {row['tree']} | {row['count']:,} | {row['cassette_mb']:.1f} MB | {row['wall']:.1f} s | "
                     f"{row['own_cpu']:.1f} s | {row['ingesters']} ({row['ingester_cpu']:.1f} s) | "
                     f"{own * 1000:.2f} ms | {own / first_own:.2f} | {total * 1000:.2f} ms | "
                     f"{total / first_total:.2f} | {row['load']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
