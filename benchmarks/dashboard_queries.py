"""The dashboard's queries on a big store: 1,000,000 calls and 100,000 runs (or 10,000,000 and
1,000,000), written by DuckDB's own SQL over `range()` straight into the store's schema (no row
passes through Python). Times every page's queries (`workbench.store.queries.PAGES`) with no filter
and with filters set, the median of several runs, on an open connection and through the full read
path (ingest check, open read-only, query, close). Target: under 300 ms per page.

    python benchmarks/dashboard_queries.py [--calls N] [--runs N] [--db PATH] [--keep] [--no-write]
        [--with-bodies] [--spans] [--generate-only]

`--with-bodies`/`--spans` add what a real store holds beside the calls (a ~2.5 KB bodies row per call, a
span per call and per run); `--generate-only --db PATH` builds a store (e.g. 10,000,000 calls) for
`dashboard_rollup.py`, `dashboard_browser.py` or later runs.

Appends its results to benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import date, datetime, timezone
from pathlib import Path

import duckdb
import polars as pl

from workbench.models import ModelSpec
from workbench.store import queries as q
from workbench.store import rollup
from workbench.store.db import open_store

TARGET_MS = 300
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
DAYS = 90
MODELS = [  # id, provider, prices (input, output, read, write), scale (2: cents); the last is never priced
    ("gpt-a", "openai", (250, 1000, 25, None), 2),
    ("claude-b", "anthropic", (300, 1500, 30, 375), 2),
    ("small-c", "openai", (15, 60, None, None), 3),
    ("mystery-d", "openrouter", None, 2),
]
TENANTS = 50  # run tag `tenant`: tenant-0 .. tenant-49
RUN_NAMES = ["support-bot", "summarizer", "triage", "nightly-eval", "research-agent", "classifier"]
VERDICTS = ["cold", "expired", "prefix_changed", "below_minimum", "not_requested", "unexplained"]
REGIONS = ["system block 0", "tool list", "message 0 (user)", "message 2 (user)"]
PADDING = "lorem ipsum dolor sit amet, " * 40  # ~1 KB of text a body repeats


def _list(values: list[str]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _cost(k: str) -> str:
    """A call's exact cost in micro-cents at model `k`'s prices, rounded up as pricing does (null: unpriced)."""
    cases = []
    for index, (_, _, prices, scale) in enumerate(MODELS):
        if prices is None:
            continue
        inp, out, read, write = prices
        read20 = read * 20 if read is not None else inp * 2
        write20 = write * 20 if write is not None else inp * 25
        unit = 20 * 10 ** (scale - 2)  # a price at scale 2 is cents
        cases.append(f"WHEN {k} = {index} THEN (input_tokens * {inp * 20} + output_tokens * {out * 20} "
                     f"+ cache_read_tokens * {read20} + cache_write_tokens * {write20} + {unit - 1}) // {unit}")
    return f"CASE {' '.join(cases)} END"


def _model_pick(draw: str) -> str:
    """A model index from a draw in 0..99: 45% the first, 35% the second, 18% the third, 2% the unpriced one."""
    return f"CASE WHEN {draw} < 45 THEN 0 WHEN {draw} < 80 THEN 1 WHEN {draw} < 98 THEN 2 ELSE 3 END"


def generate(db: Path, n_calls: int, n_runs: int, with_bodies: bool = False, with_spans: bool = False
             ) -> dict[str, float]:
    """Build the store with SQL over `range()`, in the store's own schema (`open_store` migrates it),
    then fill the rollups with the function the migrations fill them with (`rollup.rebuild`). Runs
    start in time order over `DAYS` days (one in ten nested in another); a run's calls (`n_calls /
    n_runs`, 5% of all calls outside any run) follow its start three seconds apart, on the run's
    prompt and live-or-replayed, nine in ten on the run's model: calls arrive in about the order
    ingest appends them, so a date filter skips row groups as it would on a real store."""
    started = time.perf_counter()
    per_run = max(1, n_calls // n_runs)
    run_of = f"least(i // {per_run}, {n_runs - 1})"
    model_ids = _list([m[0] for m in MODELS])
    providers = _list([m[1] for m in MODELS])
    with open_store(db) as con:
        con.execute("CREATE TEMP MACRO rnd(i, seed, m) AS (hash(i, seed) % m)::BIGINT")
        con.execute(f"CREATE TEMP MACRO run_start(r) AS TIMESTAMPTZ '{START.isoformat()}' "
                    f"+ to_seconds((r * {DAYS * 86400} // {n_runs}) + rnd(r, 4, 600))")
        con.executemany("INSERT INTO models (price_source, id, provider, spec) VALUES (?, ?, ?, ?)", [
            [f"{m}@2024-01-01", m, provider, ModelSpec(
                id=m, provider=provider, input=p[0], output=p[1], cache_read=p[2], cache_write_5m=p[3], scale=scale,
                context_window=200_000, max_output=8192, source="bench", as_of=date(2024, 1, 1)).model_dump_json()]
            for m, provider, p, scale in MODELS if p is not None])
        con.execute(f"""
            INSERT INTO calls BY NAME
            WITH base AS (
                SELECT i, {run_of} AS r, i % {per_run} AS j, rnd(i, 11, 100) < 5 AS outside,
                       CASE WHEN rnd(i, 23, 10) = 0 THEN {_model_pick('rnd(i, 12, 100)')}
                            ELSE {_model_pick(f'rnd({run_of}, 12, 100)')} END AS k,
                       rnd(i, 20, 1000) != 0 AS settled
                FROM range({n_calls}) t(i)),
            usage AS (
                SELECT *, CASE WHEN settled THEN rnd(i, 14, 4000) + 10 ELSE 0 END AS input_tokens,
                       CASE WHEN settled THEN rnd(i, 15, 800) + 5 ELSE 0 END AS output_tokens,
                       CASE WHEN settled AND rnd(i, 16, 100) < 45 THEN rnd(i, 17, 20000) ELSE 0 END AS cache_read_tokens,
                       CASE WHEN settled AND rnd(i, 18, 100) < 15 THEN rnd(i, 19, 5000) ELSE 0 END AS cache_write_tokens,
                       run_start(r) + to_seconds(j * 3) + to_milliseconds(rnd(i, 13, 3000)) AS started_at
                FROM base),
            priced AS (
                SELECT *, CASE WHEN settled THEN {_cost('k')} END AS cost_micros,
                       CASE WHEN NOT settled THEN NULL WHEN cache_read_tokens > 0 THEN 'hit'
                            ELSE {_list(VERDICTS)}[rnd(i, 40, {len(VERDICTS)}) + 1] END AS cache_verdict
                FROM usage)
            SELECT 'call-' || i AS call_id, CASE WHEN outside THEN NULL ELSE 'run-' || r END AS run_id,
                   {model_ids}[k + 1] AS model_served, {model_ids}[k + 1] AS model_requested,
                   {providers}[k + 1] AS provider,
                   CASE WHEN k = 1 THEN 'anthropic.messages' ELSE 'openai.chat' END AS wire, 200 AS http_status,
                   started_at, started_at + to_milliseconds(rnd(i, 22, 5000) // 4) AS first_byte_at,
                   started_at + to_milliseconds(rnd(i, 22, 5000)) AS ended_at,
                   input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, settled,
                   CASE WHEN outside THEN rnd(i, 21, 100) < 20 ELSE rnd(r, 21, 100) < 20 END AS replayed,
                   'prompt-' || rnd(r, 5, 8) AS prompt_id, (rnd(r, 6, 3) + 1)::VARCHAR AS prompt_version,
                   cost_micros, CASE WHEN settled AND k < 3 THEN {model_ids}[k + 1] || '@2024-01-01' END AS price_source,
                   CASE WHEN settled AND k < 3 THEN 'USD' END AS currency, cache_verdict,
                   CASE WHEN cache_verdict = 'prefix_changed' THEN {_list(REGIONS)}[rnd(i, 41, {len(REGIONS)}) + 1]
                        END AS cache_region,
                   CASE WHEN cache_verdict != 'hit' THEN cost_micros // 3 END AS cache_miss_micros,
                   CASE WHEN cache_verdict = 'hit' THEN 'call-' || ((i * 31) % {n_calls}) END AS cache_entry_call_id,
                   CASE WHEN cache_write_tokens > 0 THEN cache_write_tokens * 375 END AS cache_write_micros,
                   CASE WHEN cache_write_tokens > 0 THEN started_at + INTERVAL 5 MINUTE END AS cache_expires_at
            FROM priced ORDER BY i""")
        # a bill counts the run's live calls; its replayed ones apart, with what they would have cost
        con.execute(f"""
            INSERT INTO runs BY NAME
            WITH bills AS (
                SELECT run_id,
                       sum(input_tokens) FILTER (WHERE settled AND NOT replayed) AS billed_input_tokens,
                       sum(cache_read_tokens) FILTER (WHERE settled AND NOT replayed) AS billed_cache_read_tokens,
                       sum(cache_write_tokens) FILTER (WHERE settled AND NOT replayed) AS billed_cache_write_tokens,
                       sum(output_tokens) FILTER (WHERE settled AND NOT replayed) AS billed_output_tokens,
                       sum(cost_micros) FILTER (WHERE settled AND NOT replayed) AS billed_cost_micros,
                       count(*) FILTER (WHERE settled AND NOT replayed AND cost_micros IS NULL) AS billed_unpriced_calls,
                       count(*) FILTER (WHERE settled AND NOT replayed) AS billed_calls,
                       count(*) FILTER (WHERE NOT settled) AS billed_unsettled,
                       count(*) FILTER (WHERE settled AND replayed) AS billed_replayed_calls,
                       sum(cost_micros) FILTER (WHERE settled AND replayed) AS billed_replayed_cost_micros,
                       count(*) FILTER (WHERE settled AND replayed AND cost_micros IS NULL)
                           AS billed_replayed_unpriced_calls
                FROM calls WHERE run_id IS NOT NULL GROUP BY run_id),
            base AS (
                SELECT r, 'run-' || r AS run_id, run_start(r) AS started_at, rnd(r, 3, 100) AS s,
                       CASE WHEN rnd(r, 1, 10) = 0 AND (r // 10) * 10 + 1 != r THEN 'run-' || ((r // 10) * 10 + 1)
                            END AS parent_run_id,
                       {_list(RUN_NAMES)}[rnd(r, 2, {len(RUN_NAMES)}) + 1] AS name
                FROM range({n_runs}) t(r))
            SELECT b.run_id, b.parent_run_id, b.name, b.started_at, b.started_at + INTERVAL 30 SECOND AS ended_at,
                   CASE WHEN b.s < 8 THEN 'failed' WHEN b.s = 8 THEN 'running' ELSE 'ok' END AS status,
                   CASE WHEN b.s < 8 THEN ['WB_PROVIDER_ERROR', 'WB_AGENT_MAX_TURNS', 'WB_AGENT_DEADLINE'][rnd(r, 7, 3) + 1]
                        END AS error_code,
                   CASE WHEN b.name = 'nightly-eval' THEN 'eval_case' ELSE 'app' END AS kind,
                   'prompt-' || rnd(r, 5, 8) AS prompt_id, (rnd(r, 6, 3) + 1)::VARCHAR AS prompt_version,
                   json_object('env', ['prod', 'dev', 'staging'][rnd(r, 8, 3) + 1],
                               'tenant', 'tenant-' || rnd(r, 9, {TENANTS}))::VARCHAR AS tags,
                   bills.* EXCLUDE (run_id)
            FROM base b LEFT JOIN bills USING (run_id) ORDER BY r""")
        con.execute("""INSERT INTO run_tags SELECT run_id, unnest(['env', 'tenant']) AS key,
                       unnest([tags->>'env', tags->>'tenant']) AS value FROM runs""")
        con.execute("""
            INSERT INTO call_prefixes BY NAME
            SELECT call_id, provider || '|' || model_requested || '||' AS lineage, started_at AS clock_at,
                   [input_tokens, input_tokens * 3, input_tokens * 5, input_tokens * 7] AS blocks, 'suau' AS kinds,
                   CASE WHEN cache_verdict = 'prefix_changed'
                        THEN 'Now: 2024-03-0[-1-]{+2+} 10:00 UTC. You are the support agent' END AS diff
            FROM calls""")
        con.execute("INSERT INTO cache_reads (call_id) SELECT DISTINCT cache_entry_call_id FROM calls "
                    "WHERE cache_verdict = 'hit'")
        con.execute(f"""
            INSERT INTO compactions BY NAME
            SELECT 'cmp-' || i AS compaction_id, 'run-' || ((i * 104729) % {n_runs}) AS run_id,
                   run_start((i * 104729) % {n_runs}) + to_seconds(rnd(i, 31, {per_run * 3})) AS occurred_at,
                   (rnd(i, 32, 30) + 1)::INTEGER AS turn,
                   CASE WHEN rnd(i, 33, 100) < 4 THEN 'error' ELSE 'ok' END AS outcome,
                   rnd(i, 34, 100000) + 50000 AS tokens_before, rnd(i, 35, 20000) + 5000 AS tokens_after,
                   128000 AS limit_tokens, (rnd(i, 36, 20) + 2)::INTEGER AS summarised_turns,
                   (rnd(i, 37, 5) + 2)::INTEGER AS kept_turns, 'claude-b' AS model,
                   rnd(i, 38, 5000000) + 100000 AS cost_micros,
                   -- a third inferred from the traffic; the reported ones mostly seen in it too
                   CASE WHEN rnd(i, 39, 3) = 0 THEN 'inferred' ELSE 'reported' END AS source,
                   rnd(i, 40, 10) < 8 AS detected, rnd(i, 41, 20000) AS recache_write_tokens,
                   rnd(i, 42, 2000000) AS recache_cost_micros
            FROM range({n_runs // 2}) t(i)""")
        if with_bodies:
            con.execute(f"""
                INSERT INTO call_bodies BY NAME
                SELECT call_id, '{{"model": "' || model_requested || '", "messages": [{{"role": "user", "content": "'
                           || call_id || ' {PADDING}"}}]}}' AS request_json,
                       '{{"id": "resp-' || call_id || '", "choices": [{{"message": {{"content": "{PADDING[:600]}"}}}}]}}'
                           AS response_json, '{PADDING[:600]}' AS output_text
                FROM calls""")
        if with_spans:
            con.execute("""
                INSERT INTO spans BY NAME
                SELECT 'span-' || run_id AS span_id, 'trace-' || run_id AS trace_id, name, 'internal' AS kind, run_id,
                       started_at AS start_time, ended_at AS end_time, 'OK' AS status_code,
                       '{"workbench.run.kind": "app"}' AS attributes FROM runs""")
            con.execute("""
                INSERT INTO spans BY NAME
                SELECT 'span-' || call_id AS span_id, 'trace-' || run_id AS trace_id, 'span-' || run_id AS parent_span_id,
                       'chat ' || model_requested AS name, 'client' AS kind, run_id, started_at AS start_time,
                       ended_at AS end_time, 'OK' AS status_code,
                       '{"gen_ai.request.model": "' || model_requested || '", "gen_ai.usage.input_tokens": '
                           || input_tokens || '}' AS attributes FROM calls""")
        rollup.rebuild(con)  # the calls went in around the ingest: their rollups, as the migrations fill them
        con.execute("CHECKPOINT")
    return {"generate_s": time.perf_counter() - started, "insert_s": 0.0}


SCENARIOS = {
    "no filter": q.Filters(),
    "30 days + provider": q.Filters(date_from=date(2024, 2, 1), date_to=date(2024, 3, 1), providers=("anthropic",)),
    "run name + tag": q.Filters(run_names=("support-bot",), tags=("env=prod",)),
    "model + replayed + prompt": q.Filters(models=("gpt-a",), source="replayed", prompt_ids=("prompt-3",)),
}


def time_pages(db: Path, repeats: int) -> list[dict]:
    results = []
    with open_store(db, read_only=True) as con:
        run_id = q.run_choices(con, q.Filters(), limit=1)["run_id"][0]
    pages = {"(sidebar options)": lambda con, f: q.filter_options(con), **q.PAGES}
    for scenario, filters in SCENARIOS.items():
        for page, fn in pages.items():
            if page.startswith("(") and scenario != "no filter":
                continue
            kwargs = {"run_id": run_id} if page == "run_explorer" else {}
            warm, cold, cpu = [], [], []
            with open_store(db, read_only=True) as con:
                fn(con, filters, **kwargs)  # first touch: DuckDB loads the columns it needs
                for _ in range(repeats):
                    started, started_cpu = time.perf_counter(), time.process_time()
                    fn(con, filters, **kwargs)
                    warm.append((time.perf_counter() - started) * 1000)
                    cpu.append((time.process_time() - started_cpu) * 1000)
            for _ in range(max(1, repeats // 2)):
                started = time.perf_counter()
                q.read(db, db.parent / "no-spool", lambda con: fn(con, filters, **kwargs))
                cold.append((time.perf_counter() - started) * 1000)
            results.append({"scenario": scenario, "page": page, "queries_ms": statistics.median(warm),
                            "read_path_ms": statistics.median(cold), "cpu_ms": statistics.median(cpu)})
            print(f"{scenario:28} {page:18} {results[-1]['queries_ms']:7.1f} ms  "
                  f"(open+query+close {results[-1]['read_path_ms']:7.1f} ms, "
                  f"cpu {results[-1]['cpu_ms']:7.1f} ms)", flush=True)
    return results


def write_results(path: Path, n_calls: int, n_runs: int, timings: dict, results: list[dict], db_mb: float) -> None:
    worst = max(r["read_path_ms"] for r in results if not r["page"].startswith("("))
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    lines = [
        "", f"## Dashboard queries ({datetime.now(timezone.utc):%Y-%m-%d})", "",
        f"`python benchmarks/dashboard_queries.py`: {n_calls:,} calls, {n_runs:,} runs, {n_runs // 2:,} compactions "
        f"({db_mb:.0f} MB store), " + (f"generated by SQL in {timings['generate_s']:.1f} s"
                                        if timings["generate_s"] else "an existing store")
        + f". {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"DuckDB {duckdb.__version__}, polars {pl.__version__}.", "",
        "Median per page: `queries` is every query the page runs, on an open connection; `read path` adds what a "
        "dashboard rerun pays: the spool check, opening read-only, closing (cache misses only; hits cost nothing).",
        f"Target: under {TARGET_MS} ms per page. Worst read path: {worst:.0f} ms "
        f"({'met' if worst < TARGET_MS else 'MISSED'}); load average during the run: {load}. CPU time is the "
        "load-independent figure: on an idle machine the wall time of a page is about its CPU time divided by "
        "the cores DuckDB uses.", "",
        "| filters | " + " | ".join(q.PAGES) + " |",
        "|---|" + "---|" * len(q.PAGES),
    ]
    options = next(r for r in results if r["page"] == "(sidebar options)")
    for scenario in SCENARIOS:
        row = {r["page"]: r for r in results if r["scenario"] == scenario}
        lines.append(f"| {scenario} | " + " | ".join(
            f"{row[p]['queries_ms']:.0f} / {row[p]['read_path_ms']:.0f} / {row[p]['cpu_ms']:.0f}" for p in q.PAGES) + " |")
    lines.append("")
    lines.append(f"(cells, ms: queries / read path / CPU of the queries, all threads.) The sidebar's filter options, read once per {5} s per store: "
                 f"{options['queries_ms']:.0f} / {options['read_path_ms']:.0f} ms.")
    # re-read right before writing and only append: another benchmark may have written meanwhile
    header = "# Benchmark results\n\nEach section is appended by the script it names; newest last.\n"
    if not path.exists():
        path.write_text(header, encoding="utf-8")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--db", type=Path, default=None, help="reuse or create the store here")
    parser.add_argument("--keep", action="store_true", help="keep the generated store")
    parser.add_argument("--with-bodies", action="store_true", help="a ~2.5 KB call_bodies row per call")
    parser.add_argument("--spans", action="store_true", help="a span per call and per run")
    parser.add_argument("--generate-only", action="store_true", help="build the store (--db) and stop")
    parser.add_argument("--no-write", action="store_true", help="do not append to benchmarks/RESULTS.md")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="wb-bench-"))
    db = args.db or folder / "bench.duckdb"
    timings = {"generate_s": 0.0, "insert_s": 0.0}
    if not db.exists():
        timings = generate(db, args.calls, args.runs, args.with_bodies, args.spans)
        print(f"generated in {timings['generate_s']:.1f}s", flush=True)
    if args.generate_only:
        return
    results = time_pages(db, args.repeats)
    db_mb = db.stat().st_size / 1e6
    if not args.no_write:
        write_results(Path(__file__).resolve().parent / "RESULTS.md", args.calls, args.runs, timings, results, db_mb)
    print(json.dumps({"worst_read_path_ms": max(r["read_path_ms"] for r in results)}))
    if not args.keep and args.db is None:
        db.unlink(missing_ok=True)
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
