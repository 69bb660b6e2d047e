"""`workbench collect` throughput: GenAI spans/s a receiver process takes over OTLP/HTTP (each batch
decoded, turned into records and written to its spool before it answers), and how long after the
last answer every call is in the store (the collector's own ingester runs while it receives; the
rest is ingested when it stops).

    python benchmarks/collect_spans.py [--spans 20000] [--batch 512] [--senders 2] [--no-write]

Traces of 5 spans (a root and 4 chat calls with the current GenAI attributes), sent as the SDKs
send them: protobuf batches of `--batch` spans (the BatchSpanProcessor's default export size), over
kept-alive connections from `--senders` threads; the same spans as OTLP JSON are timed apart.
Appends its results to benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _requests(spans: int, batch: int) -> list[tuple[bytes, bytes]]:
    """(protobuf, JSON) bodies of `batch` spans each."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    def attribute(key, value):
        return KeyValue(key=key, value=AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value))

    bodies, start = [], 1_764_547_200_000_000_000
    for first in range(0, spans, batch):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.append(attribute("service.name", "bench"))
        scope = resource_spans.scope_spans.add()
        for number in range(first, min(first + batch, spans)):
            trace, position = divmod(number, 5)
            span = scope.spans.add(trace_id=(trace + 1).to_bytes(16, "big"), span_id=(number + 1).to_bytes(8, "big"),
                                   start_time_unix_nano=start + number * 1000, end_time_unix_nano=start + number * 1000 + 900)
            if position == 0:
                span.name = "handle request"
            else:
                span.name, span.kind = "chat wbt-bench", 3
                span.parent_span_id = (trace * 5 + 1).to_bytes(8, "big")
                for key, value in (("gen_ai.operation.name", "chat"), ("gen_ai.provider.name", "openai"),
                                   ("gen_ai.request.model", "gpt-4o-mini"), ("gen_ai.response.model", "gpt-4o-mini"),
                                   ("gen_ai.usage.input_tokens", 1200 + position),
                                   ("gen_ai.usage.cache_read.input_tokens", 1024), ("gen_ai.usage.output_tokens", 80)):
                    span.attributes.append(attribute(key, value))
        as_json = MessageToDict(request)  # ids come out base64; OTLP JSON writes them as hex
        for resource in as_json["resourceSpans"]:
            for scope_json in resource["scopeSpans"]:
                for span_json in scope_json["spans"]:
                    for name in ("traceId", "spanId", "parentSpanId"):
                        if name in span_json:
                            span_json[name] = base64.b64decode(span_json[name]).hex()
        bodies.append((request.SerializeToString(), json.dumps(as_json).encode()))
    return bodies


def _collector(folder: Path) -> tuple[subprocess.Popen, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("WORKBENCH_")}
    process = subprocess.Popen([sys.executable, "-m", "workbench", "collect", "--port", "0", "--db",
                                str(folder / "wb.duckdb")], cwd=folder, env=env, stdout=subprocess.PIPE, text=True)
    found = re.search(r"(http://127\.0\.0\.1:\d+/v1/traces)", process.stdout.readline())
    return process, found.group(1)


def _send(url: str, bodies: list[bytes], content_type: str, senders: int) -> float:
    import httpx

    queue = list(bodies)
    lock = threading.Lock()
    failures = []

    def work():
        with httpx.Client(timeout=60) as client:
            while True:
                with lock:
                    if not queue:
                        return
                    body = queue.pop()
                response = client.post(url, content=body, headers={"Content-Type": content_type})
                if response.status_code != 200:
                    failures.append(response.status_code)

    threads = [threading.Thread(target=work) for _ in range(senders)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="do not append to benchmarks/RESULTS.md")
    args = parser.parse_args()

    import duckdb

    from workbench.config import spool_dir_of
    from workbench.store.ingest import ingest_spools

    bodies = _requests(args.spans, args.batch)
    lines = []
    for label, index, content_type in (("protobuf", 0, "application/x-protobuf"), ("JSON", 1, "application/json")):
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            process, url = _collector(folder)
            try:
                seconds = _send(url, [pair[index] for pair in bodies], content_type, args.senders)
                began_wait = time.perf_counter()
            finally:
                process.terminate()
                process.wait(timeout=30)
            db = folder / "wb.duckdb"
            calls = args.spans - args.spans // 5
            # the collector's own ingester ran while it received; what is left goes in now
            ingest_spools(db, spool_dir_of(db))
            after = time.perf_counter() - began_wait
            con = duckdb.connect(str(db), read_only=True)
            stored = con.execute("SELECT count(*) FROM calls").fetchall()[0][0]
            con.close()
            lines.append(f"- {label}: {args.spans:,} spans in {seconds:.2f} s: **{args.spans / seconds:,.0f} spans/s** "
                         f"received and spooled ({sum(len(pair[index]) for pair in bodies) / 1e6:.1f} MB); "
                         f"{stored:,} of {calls:,} calls in the store {after:.2f} s after the last answer")
            print(lines[-1])
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    header = [f"## workbench collect — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
              f"- machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
              f"{platform.python_version()}; load average {load}",
              f"- command: `python benchmarks/collect_spans.py --spans {args.spans} --batch {args.batch} "
              f"--senders {args.senders}`",
              f"- traces of 5 spans (a root, 4 GenAI chat calls), batches of {args.batch} spans, {args.senders} "
              "senders on kept-alive connections; a batch is answered once its records are on the spool file"]
    if not args.no_write:
        with open(REPO / "benchmarks" / "RESULTS.md", "a", encoding="utf-8") as results:
            results.write("\n" + "\n".join(header + lines) + "\n")


if __name__ == "__main__":
    main()
