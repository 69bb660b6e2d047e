"""Ingestion throughput: calls/s through the real path (the recorder's records appended to a spool,
the spool written, then `ingest_spools` into DuckDB) vs a raw DuckDB Arrow insert of the same rows
into the same schema, in the same run. Ingestion (spool files into the store: what the ingester
process does) is timed apart from the recorder's spool writes (the recording process's work); both
one after the other in one process are reported too, and the pipeline as deployed: a recording
process writing its spool while an ingester process ingests, timed to the last row in the store.

    python benchmarks/ingest_throughput.py [--calls 20000] [--batch 500]

Each call is what the recorder writes for it: a `calls` row, a `call_bodies` row (~2 KB request and
response JSON) and its span. `--batch` ingests after every that many calls (as the background
flush does); the raw insert gets the same batches. Target (#21): ingestion >= 80% of raw."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def _records(n: int) -> list[list[tuple[str, dict]]]:
    """The records of `n` calls, as the recorder builds them: a real parse of real-shaped exchanges,
    conversations of 8 turns over one shared ~2 KB system prompt (each turn re-sends the history and
    reads the previous turn's prefix from the cache), 50 ms apart, with the prefix record capture
    spools beside each call."""
    from datetime import timedelta

    from workbench.capture.recorder import _CALL_BODY_FIELDS
    from workbench.insight import prefix
    from workbench.wire import Exchange, parse_exchange

    system = ("You are the support agent of an online shop; answer in two sentences. " * 30)[:2000]
    answer = " ".join(["lorem ipsum dolor sit amet"] * 12)
    start = datetime.now(timezone.utc)
    out = []
    previous = 0
    for index in range(n):
        turn = index % 8
        messages = [{"role": "system", "content": system}]
        for past in range(turn + 1):
            messages.append({"role": "user", "content": f"Question {past} of conversation {index // 8}: where is my order?"})
            if past < turn:
                messages.append({"role": "assistant", "content": answer})
        request = json.dumps({"model": "gpt-4o-mini", "messages": messages}).encode()
        prompt = len(request) // 4
        cached = previous if turn else 0
        previous = prompt
        response = json.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 60, "total_tokens": prompt + 60,
                      "prompt_tokens_details": {"cached_tokens": cached}}}).encode()
        call = parse_exchange(Exchange(url="https://api.openai.com/v1/chat/completions", request_body=request,
                                       status=200, response_headers={"content-type": "application/json"},
                                       response_body=response))
        call.call_id, call.run_id = uuid.uuid4().hex, None
        call.span_id, call.trace_id = uuid.uuid4().hex[:16], uuid.uuid4().hex
        call.started_at = call.first_byte_at = call.ended_at = start + timedelta(milliseconds=50 * index)
        call.cost_micros, call.price_source, call.currency = 12345, "gpt-4o-mini@2025-08-01", "USD"
        row = call.flat()
        body = {name: row.pop(name) for name in _CALL_BODY_FIELDS}
        body["tool_calls"] = None
        body["call_id"] = call.call_id
        row["tool_names"] = []
        now = call.started_at
        span = {"span_id": call.span_id, "trace_id": call.trace_id, "parent_span_id": None,
                "name": "chat gpt-4o-mini", "kind": "CLIENT", "run_id": None, "start_time": now.isoformat(),
                "end_time": now.isoformat(), "status_code": "UNSET", "status_message": None,
                "attributes": json.dumps({"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": prompt,
                                          "workbench.call_id": call.call_id})}
        found = prefix.captured(call.call_id, call.wire, call.model_requested, request, None, now.isoformat(), None)
        # in the recorder's order (a call's prefix line, then the call, then its body): a batch cut at
        # its byte budget ends between calls only in that order (`ingest._before_last_call`)
        out.append([("call_prefix", found), ("call", row), ("call_body", body), ("span", span)])
    return out


def real_path(records, batch: int, folder: Path) -> float:
    from workbench.store.db import open_store
    from workbench.store.ingest import ingest_spools
    from workbench.store.spool import Spool

    import workbench.store.ingest as ingest_module

    db, spool_dir = folder / "real.duckdb", folder / "spool"
    with open_store(db):
        pass  # created and migrated before the clock starts, as a long-lived store is
    spool = Spool(db, spool_dir, flush_interval_s=3600)
    writing = ingesting = cpu = 0.0
    deriving = [0.0]  # insight's share of ingestion: the verdicts and compactions of each batch
    derive = ingest_module._derived

    def timed(con, frames):
        started = time.perf_counter()
        try:
            return derive(con, frames)
        finally:
            deriving[0] += time.perf_counter() - started

    ingest_module._derived = timed
    for start in range(0, len(records), batch):
        started = time.perf_counter()
        for call in records[start:start + batch]:
            for kind, row in call:
                spool.append(kind, row)
        spool.flush(ingest=False)
        spooled, cpu_started = time.perf_counter(), time.process_time()
        ingest_spools(db, spool_dir, wait=True)
        writing, ingesting = writing + spooled - started, ingesting + time.perf_counter() - spooled
        cpu += time.process_time() - cpu_started
    ingest_module._derived = derive
    with open_store(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM calls").fetchall()[0][0] == len(records)
        judged = con.execute("SELECT count(*) FROM calls WHERE cache_verdict IS NOT NULL").fetchall()[0][0]
        assert judged == len(records), judged
    return writing, ingesting, deriving[0], cpu


INGESTER = r"""
import sys, time
from pathlib import Path
from workbench.store.ingest import ingest_spools

db, spool_dir, done = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
while True:
    finished = done.exists()  # read before the ingest: what was written by then is all there is
    ingest_spools(db, spool_dir, wait=True)
    if finished:
        break
    time.sleep(0.01)
"""


def pipeline(records, batch: int, folder: Path) -> float:
    """As deployed: this process records (appends, writes its spool every `batch` calls) while an
    ingester process ingests whatever is there, on the other core. Wall time from the first record
    to the last row in the store."""
    import subprocess

    from workbench.store.db import open_store
    from workbench.store.spool import Spool

    db, spool_dir, done = folder / "pipe.duckdb", folder / "pipe-spool", folder / "done"
    with open_store(db):
        pass
    spool = Spool(db, spool_dir, flush_interval_s=3600)
    ingester = subprocess.Popen([sys.executable, "-c", INGESTER, str(db), str(spool_dir), str(done)])
    time.sleep(1.0)  # its imports are done before the clock starts, as a running ingester's are
    started = time.perf_counter()
    for start in range(0, len(records), batch):
        for call in records[start:start + batch]:
            for kind, row in call:
                spool.append(kind, row)
        spool.flush(ingest=False)
    done.touch()
    ingester.wait(timeout=600)
    elapsed = time.perf_counter() - started
    with open_store(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM calls").fetchall()[0][0] == len(records)
    return elapsed


def raw_insert(records, batch: int, folder: Path) -> float:
    import duckdb
    import pyarrow as pa

    from workbench.store.schema import migrate

    db = folder / "raw.duckdb"
    con = duckdb.connect(str(db))
    migrate(con)
    con.close()
    tables = {"call": "calls", "call_body": "call_bodies", "span": "spans", "call_prefix": "call_prefixes"}
    started, cpu_started = time.perf_counter(), time.process_time()
    con = duckdb.connect(str(db))  # opened once per batch, as the real path must (no process holds it)
    con.close()
    for start in range(0, len(records), batch):
        con = duckdb.connect(str(db))
        con.execute("BEGIN TRANSACTION")
        for kind, table in tables.items():
            rows = [row for call in records[start:start + batch] for k, row in call if k == kind]
            arrow = pa.Table.from_pylist(rows)
            con.register("_raw", arrow)
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _raw")
            con.unregister("_raw")
        con.execute("COMMIT")
        con.close()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM calls").fetchall()[0][0] == len(records)
    con.close()
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--batch", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "RESULTS.md")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each path; the medians are compared")
    parser.add_argument("--no-pipeline", action="store_true", help="leave out the two-process run (the slowest)")
    args = parser.parse_args()
    from capture_overhead import _append

    records = _records(args.calls)
    lines = [f"- {args.calls} calls (a `calls` row, a `call_bodies` row of a 2-5 KB request and its answer, a span "
             "and a prefix record each; conversations of 8 turns, each reading the previous turn's prefix)"]
    import statistics

    for batch in args.batch:
        reals, raws, pipes = [], [], []
        for _ in range(args.repeat):  # interleaved, so a busy moment of the machine hits all
            with tempfile.TemporaryDirectory(prefix="wb-ingest-") as folder:
                reals.append(real_path(records, batch, Path(folder)))
                raws.append(raw_insert(records, batch, Path(folder)))
                pipes.append(float("nan") if args.no_pipeline else pipeline(records, batch, Path(folder)))
        real = statistics.median(write + ingest for write, ingest, _, _ in reals)
        ingest = statistics.median(ingest for _, ingest, _, _ in reals)
        derive_share = statistics.median(derive / ingest for _, ingest, derive, _ in reals)
        store_only = statistics.median(ingest - derive for _, ingest, derive, _ in reals)
        # CPU seconds (every thread of the process): steadier than wall time on a shared machine
        cpu_ratio = statistics.median(raw_cpu for _, raw_cpu in raws) / statistics.median(cpu for *_, cpu in reals)
        raw, pipe = statistics.median(elapsed for elapsed, _ in raws), statistics.median(pipes)
        ratio, ingest_ratio = raw / real, raw / ingest
        lines.append(
            f"- batches of {batch} (median of {args.repeat}): raw Arrow insert {args.calls / raw:,.0f} calls/s ({raw:.2f} s); "
            f"ingestion (spool files into the store) {args.calls / ingest:,.0f} calls/s ({ingest:.2f} s): "
            f"**{ingest_ratio:.0%} of raw** (target >= 80%: {'met' if ingest_ratio >= 0.8 else 'MISSED'}); with the "
            f"recorder's spool writes as well, one after the other in one process "
            f"{args.calls / real:,.0f} calls/s ({real:.2f} s): {ratio:.0%} of raw; as deployed (a recording process "
            f"writing while an ingester process ingests) {args.calls / pipe:,.0f} calls/s ({pipe:.2f} s, first record "
            f"to last row): {raw / pipe:.0%} of raw; insight's verdicts and compactions: {derive_share:.0%} of "
            f"ingestion (ingestion without them {args.calls / store_only:,.0f} calls/s: {raw / store_only:.0%} of raw); "
            f"in CPU time ingestion is {cpu_ratio:.0%} of raw; load average {os.getloadavg()[0]:.1f}")
        print(lines[-1], flush=True)
    if not args.no_write:
        _append(args.results, "Ingestion throughput", "python benchmarks/ingest_throughput.py " +
                " ".join(sys.argv[1:]), lines)


if __name__ == "__main__":
    main()
