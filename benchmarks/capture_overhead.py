"""Capture overhead: a chat call with a ~2 KB request body against a local fake HTTP server that
answers in about 2 ms (another process, so it does not share our GIL), recorded through
`workbench.http_client()` vs the same call on a plain `httpx2.Client`; interleaved, median of many.
Also the time to first byte of a stream, with and without recording.

    python benchmarks/capture_overhead.py [--calls 500] [--results benchmarks/RESULTS.md]

Target: median ratio <= 1.10, time to first byte unchanged."""

from __future__ import annotations

import argparse
import contextvars
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SERVER = r"""
import sys, time
from workbench.demo import fake_server
from workbench.demo.fake_server import FakeServer
from workbench.demo.fake_provider import FakeProvider, Reply

# answer in one round trip: without TCP_NODELAY the header and body writes meet the client's
# delayed ACK and every call takes ~40 ms, whoever the client is
fake_server._Handler.disable_nagle_algorithm = True

ANSWER = " ".join(["lorem ipsum dolor sit amet"] * 70)  # ~1.9 KB of answer text: a ~2.3 KB JSON body
server = FakeServer(FakeProvider(responder=lambda request: Reply(text=ANSWER, delay_s=0.002)))
print(server.url, flush=True)
sys.stdin.read()  # until the parent closes our stdin
server.close()
"""


def _body(stream: bool = False) -> dict:
    text = ("Summarise the following notes. " + "The quick brown fox jumps over the lazy dog. " * 44)[:2000]
    body = {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": text}]}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def _time_call(client, url: str, payload: bytes) -> float:
    started = time.perf_counter()
    response = client.post(url, content=payload, headers={"content-type": "application/json",
                                                          "authorization": "Bearer sk-bench"})
    response.read()
    elapsed = time.perf_counter() - started
    assert response.status_code == 200
    return elapsed


def _time_first_byte(client, url: str, payload: bytes) -> float:
    started = time.perf_counter()
    first = None
    with client.stream("POST", url, content=payload, headers={"content-type": "application/json"}) as response:
        for _chunk in response.iter_raw():  # read to the end, as an application would
            if first is None:
                first = time.perf_counter() - started
    return first


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "RESULTS.md")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--flush-interval", type=float, default=0.5, help="the recorder's flush_interval_s")
    args = parser.parse_args()

    import httpx2

    import workbench

    server = subprocess.Popen([sys.executable, "-c", SERVER], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    base = server.stdout.readline().strip()
    url = base + "/v1/chat/completions"
    store = Path(tempfile.mkdtemp(prefix="wb-bench-")) / "wb.duckdb"
    workbench.configure(db=store, flush_interval_s=args.flush_interval)  # default: the background ingestion runs as in an app
    plain, recorded = httpx2.Client(timeout=30), workbench.http_client(timeout=30)
    payload = json.dumps(_body()).encode()
    stream_payload = json.dumps(_body(stream=True)).encode()
    try:
        for _ in range(50):  # warm up both clients, the server and the store
            _time_call(plain, url, payload)
            _time_call(recorded, url, payload)
        # a call inside a run is parsed and priced on the caller's thread (the run's bill is exact
        # when the call ends): measured too, in a context where a run stays open
        in_run, scope = contextvars.copy_context(), workbench.run("bench")
        in_run.run(scope.__enter__)
        clients = {"plain": (plain, None), "recorded": (recorded, None), "in_run": (recorded, in_run)}
        times: dict[str, list[float]] = {name: [] for name in clients}
        for i in range(args.calls):
            names = list(clients)[i % 3:] + list(clients)[:i % 3]
            for name in names:
                client, context = clients[name]
                args_ = (client, url, payload)
                times[name].append(context.run(_time_call, *args_) if context else _time_call(*args_))
        in_run.run(scope.__exit__, None, None, None)
        first: dict[str, list[float]] = {"plain": [], "recorded": []}
        for i in range(max(args.calls // 5, 50)):
            order = (("plain", plain), ("recorded", recorded)) if i % 2 else (("recorded", recorded), ("plain", plain))
            for name, client in order:
                first[name].append(_time_first_byte(client, url, stream_payload))
        workbench.flush()
    finally:
        server.stdin.close()
        server.wait(timeout=10)

    import duckdb

    con = duckdb.connect(str(store), read_only=True)
    recorded_calls = con.execute("SELECT count(*) FROM calls").fetchall()[0][0]
    con.close()
    med = {name: statistics.median(values) * 1000 for name, values in times.items()}
    ttfb = {name: statistics.median(values) * 1000 for name, values in first.items()}
    ratio = med["recorded"] / med["plain"]
    run_ratio = med["in_run"] / med["plain"]
    ttfb_ratio = ttfb["recorded"] / ttfb["plain"]
    lines = [
        f"- calls: {args.calls} each, interleaved; request body {len(payload)} B, response ~2.3 KB, "
        f"server delay 2 ms; {recorded_calls} calls recorded into the store",
        f"- median latency: plain httpx2 {med['plain']:.3f} ms, recorded {med['recorded']:.3f} ms, "
        f"**ratio {ratio:.3f}** (target <= 1.10: {'met' if ratio <= 1.10 else 'MISSED'})",
        f"- p90 latency: plain {statistics.quantiles(times['plain'], n=10)[-1] * 1000:.3f} ms, "
        f"recorded {statistics.quantiles(times['recorded'], n=10)[-1] * 1000:.3f} ms",
        f"- the same call inside a run (parsed and priced on the caller's thread, for the run's bill): median "
        f"{med['in_run']:.3f} ms, ratio {run_ratio:.3f}",
        f"- stream time to first byte (median of {len(first['plain'])}): plain {ttfb['plain']:.3f} ms, "
        f"recorded {ttfb['recorded']:.3f} ms, ratio {ttfb_ratio:.3f}",
    ]
    print("\n".join(lines))
    if not args.no_write:
        _append(args.results, "Capture overhead", "python benchmarks/capture_overhead.py " +
                " ".join(sys.argv[1:]), lines)


def _append(results: Path, title: str, command: str, lines: list[str]) -> None:
    import os

    if not results.exists():
        results.write_text("# Benchmark results\n\nAppended by the scripts in `benchmarks/`; newest last.\n")
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with results.open("a") as handle:
        handle.write(f"\n## {title} — {stamp}\n\n- machine: {machine}\n- command: `{command}`\n")
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
