"""Peak memory of ingesting a large spool backlog: the ingester process's maximum resident set size
while `ingest_spools` moves a backlog of N calls (a `calls` row, a ~4 KB `call_bodies` row and a
span each, as the recorder spools them) into a new store.

    python benchmarks/ingest_memory.py [--calls 40000] [--cached] [--repo PATH] [--append]

`--cached`: a suite of distinct prompts over a system prompt long enough to be cached, every call
its own run (as an eval's cases), a millisecond apart (all within one cache life): every other call
reads the cache (hit), the rest do not (unexplained), and every tenth sends an older call's question
under another system prompt (prefix_changed against that call, 5,000 calls back). The default backlog
repeats one prompt under the model's minimum. Call and run ids are made by the checkout's
`workbench.ids.new_id`, as the recorder makes them (their order decides what a commit loads of the
key indexes); span and trace ids are random, as OpenTelemetry's.

`--repo` imports Workbench from another checkout (e.g. a worktree of main, for the figure before a
change); `--append` adds the result to benchmarks/RESULTS.md. The backlog is written once per run
into a temporary folder; the ingester is a fresh process, so its peak is the ingestion's alone. The
line's columns: commit, calls, backlog, records, wall time of the ingest, peak RSS, peak / backlog,
CPU time of the ingest, CPU time of the whole ingester process (its imports included)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


SYSTEM = ("You are the support agent of an online shop; answer in two sentences. " * 90)[:6000]
CHANGED_BACK = 5000  # how far back a changed call's question was first asked


def _cached_call(index: int, new_id) -> tuple[str, dict]:
    """The `--cached` suite's call `index`: its request and its usage."""
    asked = index - CHANGED_BACK if index % 10 == 7 and index >= CHANGED_BACK else index
    system = SYSTEM + (f" Variant {index}." if asked != index else "")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": f"Case {asked}: where is order {asked}?"}]
    read = 1500 if index % 2 == 0 else 0
    return (json.dumps({"model": "gpt-4o-mini", "messages": messages}),
            {"input_tokens": 2000 - read, "cache_read_tokens": read, "run_id": new_id()})


def write_backlog(spool: Path, calls: int, cached: bool = False, repo: Path = REPO) -> int:
    """A dead writer's spool file holding `calls` calls, their ids made by `repo`'s Workbench;
    returns its size in bytes."""
    sys.path.insert(0, str(repo))
    from workbench.ids import new_id
    spool.mkdir(parents=True)
    path = spool / f"{socket.gethostname()}-999999998-{uuid.uuid4().hex[:8]}.jsonl"
    start = datetime.now(timezone.utc)
    request = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "fox " * 500}]})
    response = json.dumps({"choices": [{"message": {"role": "assistant", "content": "lorem ipsum " * 160}}]})
    with open(path, "w") as handle:
        for index in range(calls):
            call_id, span_id = new_id(), uuid.uuid4().hex[:16]
            usage = {"input_tokens": 520}
            now = start.isoformat()
            if cached:
                request, usage = _cached_call(index, new_id)
                now = (start + timedelta(milliseconds=index)).isoformat()
            records = [
                {"kind": "call", "row": {"call_id": call_id, "wire": "openai.chat", "provider": "openai",
                                         "model_requested": "gpt-4o-mini", "http_status": 200, "settled": True,
                                         "output_tokens": 480, "cost_micros": 12345, **usage,
                                         "started_at": now, "ended_at": now, "tool_names": [], "span_id": span_id}},
                {"kind": "call_body", "row": {"call_id": call_id, "request_json": request, "response_json": response,
                                              "output_text": "lorem ipsum " * 160, "tool_calls": None}},
                {"kind": "span", "row": {"span_id": span_id, "trace_id": uuid.uuid4().hex, "name": "chat gpt-4o-mini",
                                         "kind": "CLIENT", "start_time": now, "end_time": now,
                                         "status_code": "UNSET", "attributes": '{"gen_ai.request.model": "gpt-4o-mini"}'}},
            ]
            handle.write("".join(json.dumps(record) + "\n" for record in records))
    return path.stat().st_size


INGESTER = """
import resource, sys, time
sys.path.insert(0, sys.argv[3])
from workbench.store.ingest import ingest_spools
started, cpu = time.perf_counter(), time.process_time()
count = ingest_spools(sys.argv[1], sys.argv[2])
usage = resource.getrusage(resource.RUSAGE_SELF)
print(count, time.perf_counter() - started, usage.ru_maxrss, time.process_time() - cpu, usage.ru_utime + usage.ru_stime)
"""


def measure(calls: int, repo: Path, cached: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        size = write_backlog(root / "spool", calls, cached, repo)
        env = {**os.environ, "PYTHONPATH": str(repo)}
        out = subprocess.run([sys.executable, "-c", INGESTER, str(root / "wb.duckdb"), str(root / "spool"), str(repo)],
                             env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1].split()
        records, seconds, peak_kb = int(out[0]), float(out[1]), int(out[2])
    return {"calls": calls, "records": records, "backlog_mb": size / 2**20, "seconds": seconds,
            "peak_mb": peak_kb / 1024, "ratio": peak_kb * 1024 / size, "ingest_cpu": float(out[3]),
            "process_cpu": float(out[4])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40_000)
    parser.add_argument("--cached", action="store_true", help="distinct prompts long enough to be cached, with hits")
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("--append", action="store_true")
    args = parser.parse_args()
    result = measure(args.calls, args.repo.resolve(), args.cached)
    commit = subprocess.run(["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    line = (f"| {commit} | {result['calls']:,} | {result['backlog_mb']:.0f} MB | {result['records']:,} | "
            f"{result['seconds']:.1f} s | {result['peak_mb']:.0f} MB | {result['ratio']:.2f}x | "
            f"{result['ingest_cpu']:.2f} s | {result['process_cpu']:.2f} s |")
    print(line)
    if args.append:
        with open(REPO / "benchmarks" / "RESULTS.md", "a") as results:
            results.write(line + "\n")
    print(f"# {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    main()
