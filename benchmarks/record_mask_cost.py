"""What recording costs per call, masking included, counted in instructions (wall time is noise on a
shared machine): N calls through `workbench.http_client()` over an in-process transport (no network),
a clean ~2 KB JSON answer or a clean ~300-event stream, with a bearer key sent; the spool written.

    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python benchmarks/record_mask_cost.py --kind clean --calls 400

Per call: (instructions at --calls N - instructions at --calls 0) / N."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import httpx2

import workbench

ANSWER = " ".join(["lorem ipsum dolor sit amet"] * 70)  # ~1.9 KB of answer text: a ~2.3 KB JSON body


def _json_body() -> bytes:
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 20, "completion_tokens": 400, "total_tokens": 420}}).encode()


def _stream_body() -> bytes:
    def event(delta: dict, usage: dict | None = None) -> str:
        chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": None}] if delta else []}
        if usage:
            chunk["usage"] = usage
        return "data: " + json.dumps(chunk) + "\n\n"
    words = ANSWER.split(" ")
    events = [event({"content": word + " "}) for word in words[:300]]
    events.append(event({}, {"prompt_tokens": 20, "completion_tokens": 300, "total_tokens": 320}))
    return ("".join(events) + "data: [DONE]\n\n").encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("clean", "stream"), default="clean")
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    body = _json_body() if args.kind == "clean" else _stream_body()
    kind = "application/json" if args.kind == "clean" else "text/event-stream"
    transport = httpx2.MockTransport(lambda request: httpx2.Response(200, headers={"content-type": kind}, content=body))
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": ANSWER}],
               "stream": args.kind == "stream"}
    with tempfile.TemporaryDirectory() as folder:
        workbench.configure(db=Path(folder) / "wb.duckdb")
        client = workbench.http_client(transport=transport)
        for _ in range(args.calls):
            client.post("https://api.openai.com/v1/chat/completions", json=request,
                        headers={"authorization": "Bearer sk-" + "bench-0123456789abcdef0123"}).read()
        client.close()
        from workbench.capture.recorder import recorder

        recorder().spool.flush(ingest=False, wait=True)  # every call's rows built and written, none ingested


if __name__ == "__main__":
    main()
