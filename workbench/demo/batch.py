"""A batch job for the resume test and benchmark: N chat calls through `workbench.http_client()`
in one run named `batch`, one call per item, against the URL given (the fake provider).

    python -m workbench.demo.batch URL --calls 100 [--pause-after 60] [--resume RUN_ID]

It prints the run id, then `done N` after each call. `--pause-after N` stops after N calls and
waits to be killed (past the spool's flush interval, so the N calls are on disk); `--resume` opens
the run with `resume=`, and `workbench runs resume RUN_ID -- python -m workbench.demo.batch URL`
resumes it without the flag."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import workbench

MODEL = "batch-model"  # priced by the row registered below: the figures are exact integers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workbench.demo.batch")
    parser.add_argument("url", help="base URL of an OpenAI-compatible provider (no /v1)")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--pause-after", type=int, default=None)
    parser.add_argument("--resume", default=None)
    args = parser.parse_args(argv)
    workbench.register_model(id=MODEL, provider="openai", input=15, output=60, scale=2, context_window=128_000,
                             max_output=16_000, source="workbench/demo/batch.py", as_of="2026-01-01")
    client = workbench.http_client()
    with workbench.run("batch", resume=args.resume) as run:
        print(run.run_id, flush=True)
        for item in range(args.calls):
            if item == args.pause_after:
                time.sleep(3600)  # killed here
            reply = client.post(f"{args.url}/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": f"Summarise item {item}"}]})
            reply.raise_for_status()
            print(f"done {item + 1}", flush=True)


def start(url: str, db: Path, *options: str, calls: int = 100, via: tuple[str, ...] = ()) -> subprocess.Popen:
    """The job in a process of its own recording into `db` (`via`: a command to run it through,
    such as `workbench runs resume RUN_ID --`); its stdout and stderr are pipes."""
    command = [*via, sys.executable, "-m", "workbench.demo.batch", url, "--calls", str(calls), *options]
    return subprocess.Popen(command, env={**os.environ, "WORKBENCH_DB": str(db)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stored_count(db: Path, run_id: str, table: str = "calls") -> int:
    """How many rows of `table` (calls or runs) the run has in the store, its spools ingested first."""
    from workbench.config import spool_dir_of
    from workbench.store import queries

    def count(con) -> int:
        frame = queries.run_calls(con, run_id) if table == "calls" else queries.run_detail(con, run_id)
        return frame.height

    try:
        return queries.read(db, spool_dir_of(db), count, ingest_wait=True)
    except queries.StoreMissing:
        return 0


def kill_when_stored(job: subprocess.Popen, db: Path, calls: int, timeout_s: float = 120) -> str:
    """Wait until the paused job's first `calls` calls are in the store, SIGKILL it, return its run id."""
    try:
        run_id = job.stdout.readline().strip()
        deadline = time.monotonic() + timeout_s
        while stored_count(db, run_id) < calls:
            if job.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the batch job ended or stalled before {calls} calls")
            time.sleep(0.05)
    finally:  # killed whatever happened: never left paused
        job.send_signal(signal.SIGKILL)
        job.wait()
    return run_id


if __name__ == "__main__":
    main()
