"""A batch job for the resume test and benchmark: N chat calls through `workbench.http_client()`
in one run named `batch`, one call per item, against the URL given (the fake provider).

    python -m workbench.demo.batch URL --calls 100 [--pause-after 60] [--resume RUN_ID]

It prints the run id, then `done N` after each call. `--pause-after N` stops after N calls and
waits to be killed (past the spool's flush interval, so the N calls are on disk); `--resume` opens
the run with `resume=`, and `workbench runs resume RUN_ID -- python -m workbench.demo.batch URL`
resumes it without the flag."""

from __future__ import annotations

import argparse
import time

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


if __name__ == "__main__":
    main()
