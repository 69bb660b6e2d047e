"""Replay: Workbench's indexed transport against vcrpy, on the same cassettes, in the same run.

    python benchmarks/replay_vs_vcrpy.py                  # 100, 1,000 and 5,000 interactions
    python benchmarks/replay_vs_vcrpy.py --sizes 100 1000 --vcrpy-sample 50 --append

Cassettes of N distinct OpenAI chat-completions interactions (distinct message text, ~1 KB request
bodies) are generated the way Workbench writes them (JSON, request hashes stored beside them).
For each size:

* load: Workbench `Cassette(path, mode="replay")` (read, scrub, index), and vcrpy entering
  `use_cassette` (read and deserialize), median of several loads;
* replay: every request sent once, in file order, through an httpx2 client: Workbench's
  `ReplayTransport` (plain httpx2 client, no capture), Workbench's full client
  `workbench.http_client(cassette=...)` (capture on: parsed and spooled to a temporary store), and
  vcrpy (default matchers + body: method, scheme, host, port, path, query, body; record_mode none)
  patching httpx2.

vcrpy scans the cassette for every request: request i costs about i matcher evaluations (`in` and
`play_response` stop at the first unplayed match), so its replay time grows quadratically. Where
`--vcrpy-full-max` is exceeded, vcrpy replays a SAMPLE of requests spread evenly over the file
(fresh cassette, same positions as in a full run) and the full time is EXTRAPOLATED as mean sample
cost x N; the table says so. At 1,000 both are measured, which checks the extrapolation.

Also: time from `client.chat.completions.create(...)` with a changed prompt to the SDK raising
`WB_REPLAY_MISS`, through the real openai SDK with its default retries (max_retries=2).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

WORK = Path(tempfile.mkdtemp(prefix="wb-replay-bench-"))
os.environ["WORKBENCH_DB"] = str(WORK / "store" / "wb.duckdb")  # capture's store, before workbench loads

import httpx2  # noqa: E402
import vcr  # noqa: E402

import workbench  # noqa: E402
from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse, write_cassette  # noqa: E402
from workbench.replay.clients import ReplayTransport  # noqa: E402
from workbench.replay.matcher import CassetteIndex  # noqa: E402
from workbench.replay.session import Cassette  # noqa: E402

URL = "https://api.openai.com/v1/chat/completions"
SYSTEM = ("You are a careful support assistant for an online bookshop. Answer in two sentences at most, "
          "cite the order number when there is one, never invent a tracking code, and escalate refunds over "
          "one hundred euros to a human. ") * 3
VCRPY_MATCH_ON = ["method", "scheme", "host", "port", "path", "query", "body"]


def request_body(i: int, variant: str = "") -> bytes:
    body = {"model": "gpt-4o-mini", "temperature": 0, "max_tokens": 200, "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Question {i}{variant}: where is order #{100000 + i} and when will it arrive?"},
    ]}
    return json.dumps(body).encode()


def response_body(i: int) -> bytes:
    return json.dumps({
        "id": f"chatcmpl-{i:08d}", "object": "chat.completion", "created": 1_700_000_000 + i, "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": f"Order #{100000 + i} left the warehouse yesterday and should arrive within 3 days."}}],
        "usage": {"prompt_tokens": 180 + i % 7, "completion_tokens": 21, "total_tokens": 201 + i % 7},
    }).encode()


def make_cassette(n: int) -> Path:
    path = WORK / f"chat_{n}.json"
    interactions = [Interaction(
        request=RecordedRequest(method="POST", uri=URL, body=request_body(i), headers={
            "content-type": ["application/json"], "accept": ["application/json"], "user-agent": ["OpenAI/Python 3.57.0"]}),
        response=RecordedResponse(status=200, body=response_body(i), headers={
            "content-type": ["application/json"], "x-request-id": [f"req_{i:08d}"]}),
    ) for i in range(n)]
    write_cassette(path, interactions, {"request_hashes": CassetteIndex(interactions).hashes})
    return path


class NoNetwork(httpx2.BaseTransport):
    def handle_request(self, request):
        raise AssertionError(f"replay reached the network: {request.url}")


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def send_all(client, n: int, indices=None) -> None:
    for i in (range(n) if indices is None else indices):
        response = client.post(URL, content=request_body(i), headers={"content-type": "application/json"})
        assert response.status_code == 200 and response.json()["id"] == f"chatcmpl-{i:08d}", response.text[:300]


def workbench_load(path: Path, repeat: int) -> float:
    return median_time(lambda: Cassette(path, mode="replay"), repeat)


def workbench_replay(path: Path, n: int) -> float:
    client = httpx2.Client(transport=ReplayTransport(Cassette(path, mode="replay"), inner=NoNetwork()))
    start = time.perf_counter()
    send_all(client, n)
    return time.perf_counter() - start


def workbench_replay_captured(path: Path, n: int) -> float:
    client = workbench.http_client(cassette=Cassette(path, mode="replay"), transport=NoNetwork())
    start = time.perf_counter()
    send_all(client, n)
    elapsed = time.perf_counter() - start
    return elapsed


def _vcr() -> vcr.VCR:
    return vcr.VCR(serializer="json", match_on=VCRPY_MATCH_ON, record_mode="none")


def vcrpy_load(path: Path, repeat: int) -> float:
    def load():
        manager = _vcr().use_cassette(str(path))
        cassette = manager.__enter__()
        assert len(cassette) > 0
        manager.__exit__(None, None, None)
    return median_time(load, repeat)


def vcrpy_replay(path: Path, n: int, indices=None) -> float:
    with _vcr().use_cassette(str(path)) as cassette:
        assert len(cassette) == n
        with httpx2.Client() as client:
            start = time.perf_counter()
            send_all(client, n, indices)
            return time.perf_counter() - start


def time_to_miss(path: Path, repeat: int = 5) -> tuple[float, float]:
    """(median seconds from create() to the SDK's error, with the cassette already loaded;
    the same including building the client and loading the cassette)."""
    import openai

    call_times, total_times = [], []
    for attempt in range(repeat):
        start = time.perf_counter()
        client = openai.OpenAI(base_url="https://api.openai.com/v1", api_key="sk-bench",  # default max_retries=2
                               http_client=workbench.http_client(cassette=path, mode="replay", transport=NoNetwork()))
        body = json.loads(request_body(7, variant=f" (reworded {attempt})"))
        called = time.perf_counter()
        try:
            client.chat.completions.create(**body)
        except openai.BadRequestError as error:
            assert "WB_REPLAY_MISS" in str(error)
        else:
            raise AssertionError("expected WB_REPLAY_MISS")
        end = time.perf_counter()
        call_times.append(end - called)
        total_times.append(end - start)
    return statistics.median(call_times), statistics.median(total_times)


def fmt_s(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 600:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--vcrpy-full-max", type=int, default=1000, help="largest size vcrpy replays in full")
    parser.add_argument("--vcrpy-sample", type=int, default=50, help="requests timed above that size")
    parser.add_argument("--append", action="store_true", help="append the section to benchmarks/RESULTS.md")
    args = parser.parse_args()

    rows, notes = [], []
    for n in args.sizes:
        path = make_cassette(n)
        size_mb = path.stat().st_size / 1e6
        loads = 3 if n >= 5000 else 7
        wb_load = workbench_load(path, loads)
        wb_replay = workbench_replay(path, n)
        wb_captured = workbench_replay_captured(path, n)
        vcr_load = vcrpy_load(path, loads)
        if n <= args.vcrpy_full_max:
            vcr_replay, how = vcrpy_replay(path, n), "measured"
            if n == args.vcrpy_full_max and n > args.vcrpy_sample:  # check the extrapolation at this size
                indices = [round(k * (n - 1) / (args.vcrpy_sample - 1)) for k in range(args.vcrpy_sample)]
                sampled = vcrpy_replay(path, n, indices) / len(indices) * n
                notes.append(f"extrapolation check at {n:,}: {args.vcrpy_sample} evenly spaced requests x {n:,} "
                             f"= {fmt_s(sampled)} against {fmt_s(vcr_replay)} measured in full")
        else:
            indices = [round(k * (n - 1) / (args.vcrpy_sample - 1)) for k in range(args.vcrpy_sample)]
            vcr_replay, how = vcrpy_replay(path, n, indices) / len(indices) * n, \
                f"EXTRAPOLATED from {len(indices)} evenly spaced requests"
        miss_call, miss_total = time_to_miss(path)
        row = {"n": n, "size_mb": size_mb, "wb_load": wb_load, "wb_replay": wb_replay, "wb_captured": wb_captured,
               "vcr_load": vcr_load, "vcr_replay": vcr_replay, "vcr_how": how, "miss_call": miss_call,
               "miss_total": miss_total}
        rows.append(row)
        print(json.dumps(row), flush=True)

    lines = [
        "| interactions | file | load: Workbench | load: vcrpy | replay all: Workbench transport | per request | "
        "replay all: Workbench + capture | per request | replay all: vcrpy | per request | Workbench / vcrpy | "
        "WB_REPLAY_MISS via openai SDK (call / incl. load) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["n"]
        vcr_cell = fmt_s(r["vcr_replay"]) + (" (measured)" if r["vcr_how"] == "measured" else " (**extrapolated**)")
        lines.append(
            f"| {n:,} | {r['size_mb']:.1f} MB | {fmt_s(r['wb_load'])} | {fmt_s(r['vcr_load'])} | {fmt_s(r['wb_replay'])} | "
            f"{fmt_us(r['wb_replay'] / n)} | {fmt_s(r['wb_captured'])} | {fmt_us(r['wb_captured'] / n)} | {vcr_cell} | "
            f"{fmt_us(r['vcr_replay'] / n)} | {r['wb_replay'] / r['vcr_replay'] * 100:.3f} % | "
            f"{fmt_s(r['miss_call'])} / {fmt_s(r['miss_total'])} |")
    for r in rows:
        if r["vcr_how"] != "measured":
            notes.append(f"vcrpy at {r['n']:,}: {r['vcr_how']} (mean per-request time x {r['n']:,}), not a full run")
    section = "\n".join([
        f"## Replay vs vcrpy ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Machine: {os.cpu_count()} CPUs (nproc), Python {platform.python_version()}, {platform.system()} "
        f"{platform.machine()}; vcrpy {vcr.__version__}, httpx2 {httpx2.__version__}.",
        "Command: `" + " ".join(["python benchmarks/replay_vs_vcrpy.py", *sys.argv[1:]]) + "`",
        "",
        "Cassettes of N distinct chat-completions interactions (~1 KB request bodies), JSON, written by Workbench. "
        "Load = median of several loads (Workbench: read + scrub + index; vcrpy: `use_cassette` enter). Replay = every "
        "request once, in file order, httpx2 client. vcrpy matches on method, scheme, host, port, path, query, body. "
        "Time to WB_REPLAY_MISS: a reworded prompt through `openai.OpenAI` with default retries (2), median of 5.",
        "",
        *lines,
        "",
        *[f"- {note}" for note in notes],
        "",
    ])
    print()
    print(section)
    if args.append:
        results = Path(__file__).with_name("RESULTS.md")
        with results.open("a", encoding="utf-8") as handle:
            handle.write(("\n" if results.exists() and results.stat().st_size else "") + section)
        print(f"appended to {results}")


if __name__ == "__main__":
    main()
