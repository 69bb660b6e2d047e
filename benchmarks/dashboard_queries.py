"""The dashboard's queries on a big store: 1,000,000 calls and 100,000 runs, generated with polars
expressions (no Python loop per row) and inserted through Arrow. Times every page's queries
(`workbench.store.queries.PAGES`) with no filter and with filters set, the median of several runs,
on an open connection and through the full read path (ingest check, open read-only, query, close).
Target: under 300 ms per page.

    python benchmarks/dashboard_queries.py [--calls N] [--runs N] [--db PATH] [--keep] [--no-write]
        [--with-bodies] [--spans] [--generate-only]

`--with-bodies`/`--spans` add what a real store holds beside the calls (a ~2.5 KB bodies row per call, a
span per call and per run); `--generate-only --db PATH` builds a store (e.g. 10,000,000 calls, inserted
in slices of 1M rows) for `dashboard_browser.py` or later runs.

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
SLICE = 1_000_000
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


def _rand(column: str, seed: int, modulo: int) -> pl.Expr:
    return (pl.col(column).hash(seed) % modulo).cast(pl.Int64)


def _register(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> None:
    con.register("_bench", frame.to_arrow())
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _bench")
    finally:
        con.unregister("_bench")


VERDICTS = ["cold", "expired", "prefix_changed", "below_minimum", "not_requested", "unexplained"]
REGIONS = ["system block 0", "tool list", "message 0 (user)", "message 2 (user)"]


def with_verdicts(calls: pl.DataFrame) -> pl.DataFrame:
    """The columns insight writes at ingest: a read is a hit (of an earlier call's write), a miss one
    of the other verdicts, with what it lost; a write its cost and its end of life."""
    miss = pl.lit(VERDICTS).list.get(_rand("i", 40, len(VERDICTS)))
    return calls.with_columns(
        pl.when(~pl.col("settled")).then(None).when(pl.col("cache_read_tokens") > 0).then(pl.lit("hit"))
        .otherwise(miss).alias("cache_verdict"),
    ).with_columns(
        pl.when(pl.col("cache_verdict") == "prefix_changed").then(pl.lit(REGIONS).list.get(_rand("i", 41, len(REGIONS))))
        .alias("cache_region"),
        pl.when(pl.col("cache_verdict").is_in(VERDICTS) & pl.col("cost_micros").is_not_null())
        .then(pl.col("cost_micros") // 3).alias("cache_miss_micros"),
        pl.when(pl.col("cache_verdict") == "hit").then(pl.format("call-{}", (pl.col("i") * 31) % pl.len()))
        .alias("cache_entry_call_id"),
        pl.when(pl.col("cache_write_tokens") > 0).then(pl.col("cache_write_tokens") * 375).alias("cache_write_micros"),
        pl.when(pl.col("cache_write_tokens") > 0).then(pl.col("started_at") + pl.duration(minutes=5))
        .alias("cache_expires_at"),
    )


PADDING = "lorem ipsum dolor sit amet, " * 40  # ~1 KB of text a body repeats


def bodies_and_spans(calls: pl.DataFrame, runs: pl.DataFrame, with_bodies: bool, with_spans: bool
                     ) -> dict[str, pl.DataFrame]:
    """What a real store holds beside the calls: each call's redacted bodies (~2.5 KB) and a span per
    call and per run, so the list pages are measured next to the big columns they must not read."""
    out = {}
    if with_bodies:
        out["call_bodies"] = calls.select(
            "call_id",
            pl.format('{{"model": "{}", "messages": [{{"role": "user", "content": "{} {}"}}]}}',
                      pl.col("model_requested"), pl.col("call_id"), pl.lit(PADDING)).alias("request_json"),
            pl.format('{{"id": "resp-{}", "choices": [{{"message": {{"content": "{}"}}}}]}}',
                      pl.col("call_id"), pl.lit(PADDING[:600])).alias("response_json"),
            pl.lit(PADDING[:600]).alias("output_text"),
        )
    if with_spans:
        out["spans"] = pl.concat([
            runs.select(pl.format("span-{}", pl.col("run_id")).alias("span_id"),
                        pl.format("trace-{}", pl.col("run_id")).alias("trace_id"),
                        pl.lit(None, dtype=pl.Utf8).alias("parent_span_id"), pl.col("name"),
                        pl.lit("internal").alias("kind"), "run_id", pl.col("started_at").alias("start_time"),
                        pl.col("ended_at").alias("end_time"), pl.lit("OK").alias("status_code"),
                        pl.lit(None, dtype=pl.Utf8).alias("status_message"),
                        pl.lit('{"workbench.run.kind": "app"}').alias("attributes")),
            calls.select(pl.format("span-{}", pl.col("call_id")).alias("span_id"),
                         pl.format("trace-{}", pl.col("run_id")).alias("trace_id"),
                         pl.format("span-{}", pl.col("run_id")).alias("parent_span_id"),
                         pl.format("chat {}", pl.col("model_requested")).alias("name"),
                         pl.lit("client").alias("kind"), "run_id", pl.col("started_at").alias("start_time"),
                         pl.col("ended_at").alias("end_time"), pl.lit("OK").alias("status_code"),
                         pl.lit(None, dtype=pl.Utf8).alias("status_message"),
                         pl.format('{{"gen_ai.request.model": "{}", "gen_ai.usage.input_tokens": {}}}',
                                   pl.col("model_requested"), pl.col("input_tokens")).alias("attributes")),
        ])
    return out


def generate(db: Path, n_calls: int, n_runs: int, with_bodies: bool = False, with_spans: bool = False
             ) -> dict[str, float]:
    timings = {}
    started = time.perf_counter()
    runs = pl.DataFrame({"i": pl.int_range(n_runs, eager=True)}).with_columns(
        pl.format("run-{}", pl.col("i")).alias("run_id"),
        # one run in ten is nested inside an earlier top-level run
        pl.when(_rand("i", 1, 10) == 0).then(pl.format("run-{}", (pl.col("i") // 10) * 10 + 1)).alias("parent_run_id"),
        pl.lit(RUN_NAMES).list.get(_rand("i", 2, len(RUN_NAMES))).alias("name"),
        pl.when(_rand("i", 3, 100) < 8).then(pl.lit("failed"))
        .when(_rand("i", 3, 100) == 8).then(pl.lit("running")).otherwise(pl.lit("ok")).alias("status"),
        (pl.lit(START) + pl.duration(seconds=_rand("i", 4, DAYS * 86400))).alias("started_at"),
        pl.format("prompt-{}", _rand("i", 5, 8)).alias("prompt_id"),
        pl.format("{}", _rand("i", 6, 3) + 1).alias("prompt_version"),
    ).with_columns(
        pl.when(pl.col("parent_run_id") == pl.col("run_id")).then(None).otherwise(pl.col("parent_run_id"))
        .alias("parent_run_id"),
        pl.when(pl.col("status") == "failed").then(
            pl.lit(["WB_PROVIDER_ERROR", "WB_AGENT_MAX_TURNS", "WB_AGENT_DEADLINE"]).list.get(_rand("i", 7, 3))
        ).alias("error_code"),
        (pl.col("started_at") + pl.duration(seconds=30)).alias("ended_at"),
        pl.when(pl.col("name") == "nightly-eval").then(pl.lit("eval_case")).otherwise(pl.lit("app")).alias("kind"),
        pl.format('{{"env": "{}", "tenant": "tenant-{}"}}', pl.lit(["prod", "dev", "staging"]).list.get(_rand("i", 8, 3)),
                  _rand("i", 9, TENANTS)).alias("tags"),
    )
    calls = pl.DataFrame({"i": pl.int_range(n_calls, eager=True)}).with_columns(
        pl.format("call-{}", pl.col("i")).alias("call_id"),
        pl.when(_rand("i", 11, 100) < 5).then(None)
        .otherwise(pl.format("run-{}", (pl.col("i") * 7919) % n_runs)).alias("run_id"),
        _rand("i", 12, 100).alias("_m"),
        (pl.lit(START) + pl.duration(seconds=_rand("i", 13, DAYS * 86400))).alias("started_at"),
        (_rand("i", 14, 4000) + 10).alias("input_tokens"),
        (_rand("i", 15, 800) + 5).alias("output_tokens"),
        pl.when(_rand("i", 16, 100) < 45).then(_rand("i", 17, 20000)).otherwise(0).alias("cache_read_tokens"),
        pl.when(_rand("i", 18, 100) < 15).then(_rand("i", 19, 5000)).otherwise(0).alias("cache_write_tokens"),
        (_rand("i", 20, 1000) != 0).alias("settled"),
        (_rand("i", 21, 100) < 20).alias("replayed"),
        pl.format("prompt-{}", _rand("i", 5, 8)).alias("prompt_id"),
        pl.format("{}", _rand("i", 6, 3) + 1).alias("prompt_version"),
    ).with_columns(
        pl.when(pl.col("_m") < 45).then(0).when(pl.col("_m") < 80).then(1).when(pl.col("_m") < 98).then(2)
        .otherwise(3).alias("_k"),
    ).with_columns(
        pl.col("_k").replace_strict(list(range(len(MODELS))), [m[0] for m in MODELS]).alias("model_served"),
        pl.col("_k").replace_strict(list(range(len(MODELS))), [m[1] for m in MODELS]).alias("provider"),
    ).with_columns(
        pl.col("model_served").alias("model_requested"),
        pl.when(pl.col("provider") == "anthropic").then(pl.lit("anthropic.messages"))
        .otherwise(pl.lit("openai.chat")).alias("wire"),
        pl.lit(200).alias("http_status"),
        (pl.col("started_at") + pl.duration(milliseconds=_rand("i", 22, 5000))).alias("ended_at"),
        (pl.col("started_at") + pl.duration(milliseconds=_rand("i", 22, 5000) // 4)).alias("first_byte_at"),
    )
    costs = []
    for index, (model_id, _, prices, scale) in enumerate(MODELS):
        if prices is None:
            costs.append(pl.lit(None, dtype=pl.Int64))
            continue
        inp, out, read, write = prices
        read20 = read * 20 if read is not None else inp * 2
        write20 = write * 20 if write is not None else inp * 25
        costs.append(-(-(pl.col("input_tokens") * inp * 20 + pl.col("output_tokens") * out * 20
                         + pl.col("cache_read_tokens") * read20 + pl.col("cache_write_tokens") * write20)
                       // (20 * 10 ** (scale - 2))))  # micro-cents: a price at scale 2 is cents
    cost = pl.when(pl.col("_k") == 0).then(costs[0])
    for index in range(1, len(MODELS)):
        cost = cost.when(pl.col("_k") == index).then(costs[index])
    source = pl.when(pl.col("_k") < 3).then(pl.col("model_served") + "@2024-01-01")
    calls = calls.with_columns(
        pl.when(pl.col("settled")).then(cost).alias("cost_micros"),
        pl.when(pl.col("settled") & (pl.col("_k") < 3)).then(source).alias("price_source"),
        pl.when(pl.col("settled") & (pl.col("_k") < 3)).then(pl.lit("USD")).alias("currency"),
    ).with_columns(
        *(pl.when(pl.col("settled")).then(pl.col(c)).otherwise(0).alias(c)
          for c in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")),
    )
    # in the order a store receives them: by time (ingest appends; zone maps then skip by date)
    calls = with_verdicts(calls).drop("i", "_m", "_k").sort("started_at", maintain_order=True)
    prefixes = calls.select(
        "call_id", pl.format("{}|{}||", pl.col("provider"), pl.col("model_requested")).alias("lineage"),
        pl.col("started_at").alias("clock_at"),
        pl.concat_list(*(pl.col("input_tokens") * k for k in (1, 3, 5, 7))).alias("blocks"),
        pl.lit("suau").alias("kinds"),
        pl.when(pl.col("cache_verdict") == "prefix_changed").then(
            pl.lit("Now: 2024-03-0[-1-]{+2+} 10:00 UTC. You are the support agent")).alias("diff"),
    )
    paid = pl.col("settled") & ~pl.col("replayed")  # a bill counts live calls; replayed ones apart
    again = pl.col("settled") & pl.col("replayed")
    bills = calls.filter(pl.col("run_id").is_not_null()).group_by("run_id").agg(
        pl.col("input_tokens").filter(paid).sum().alias("billed_input_tokens"),
        pl.col("cache_read_tokens").filter(paid).sum().alias("billed_cache_read_tokens"),
        pl.col("cache_write_tokens").filter(paid).sum().alias("billed_cache_write_tokens"),
        pl.col("output_tokens").filter(paid).sum().alias("billed_output_tokens"),
        pl.col("cost_micros").filter(paid).sum().alias("billed_cost_micros"),
        (paid & pl.col("cost_micros").is_null()).sum().cast(pl.Int32).alias("billed_unpriced_calls"),
        paid.sum().cast(pl.Int32).alias("billed_calls"),
        (~pl.col("settled")).sum().cast(pl.Int32).alias("billed_unsettled"),
        again.sum().cast(pl.Int32).alias("billed_replayed_calls"),
        pl.col("cost_micros").filter(again).sum().alias("billed_replayed_cost_micros"),
        (again & pl.col("cost_micros").is_null()).sum().cast(pl.Int32).alias("billed_replayed_unpriced_calls"),
    )
    runs = runs.join(bills, on="run_id", how="left").drop("i")
    tags = pl.concat([runs.select("run_id", pl.lit(key).alias("key"),
                                  pl.col("tags").str.json_path_match(f"$.{key}").alias("value"))
                      for key in ("env", "tenant")])
    compactions = pl.DataFrame({"i": pl.int_range(n_runs // 2, eager=True)}).with_columns(
        pl.format("cmp-{}", pl.col("i")).alias("compaction_id"),
        pl.format("run-{}", (pl.col("i") * 104729) % n_runs).alias("run_id"),
        (pl.lit(START) + pl.duration(seconds=_rand("i", 31, DAYS * 86400))).alias("occurred_at"),
        (_rand("i", 32, 30) + 1).cast(pl.Int32).alias("turn"),
        pl.when(_rand("i", 33, 100) < 4).then(pl.lit("error")).otherwise(pl.lit("ok")).alias("outcome"),
        (_rand("i", 34, 100_000) + 50_000).alias("tokens_before"),
        (_rand("i", 35, 20_000) + 5_000).alias("tokens_after"),
        pl.lit(128_000).cast(pl.Int64).alias("limit_tokens"),
        (_rand("i", 36, 20) + 2).cast(pl.Int32).alias("summarised_turns"),
        (_rand("i", 37, 5) + 2).cast(pl.Int32).alias("kept_turns"),
        pl.lit("claude-b").alias("model"),
        (_rand("i", 38, 5_000_000) + 100_000).alias("cost_micros"),
        # a third inferred from the traffic; the reported ones mostly seen in it too
        pl.when(_rand("i", 39, 3) == 0).then(pl.lit("inferred")).otherwise(pl.lit("reported")).alias("source"),
        (_rand("i", 40, 10) < 8).alias("detected"),
        (_rand("i", 41, 20_000)).alias("recache_write_tokens"),
        (_rand("i", 42, 2_000_000)).alias("recache_cost_micros"),
    ).drop("i")
    model_rows = pl.DataFrame([
        {"price_source": f"{m}@2024-01-01", "id": m, "provider": provider, "spec": ModelSpec(
            id=m, provider=provider, input=p[0], output=p[1], cache_read=p[2], cache_write_5m=p[3], scale=scale,
            context_window=200_000, max_output=8192, source="bench", as_of=date(2024, 1, 1)).model_dump_json()}
        for m, provider, p, scale in MODELS if p is not None
    ])
    extra = bodies_and_spans(calls, runs, with_bodies, with_spans)
    timings["generate_s"] = time.perf_counter() - started
    started = time.perf_counter()
    with open_store(db) as con:
        _register(con, "models", model_rows)
        _register(con, "runs", runs)
        _register(con, "run_tags", tags)
        for offset in range(0, n_calls, SLICE):  # slices keep the insert's memory bounded at 10M calls
            _register(con, "calls", calls.slice(offset, SLICE))
            _register(con, "call_prefixes", prefixes.slice(offset, SLICE))
        _register(con, "compactions", compactions)
        _register(con, "cache_reads", calls.filter(pl.col("cache_verdict") == "hit").select(
            pl.col("cache_entry_call_id").alias("call_id")).unique())
        for table, frame in extra.items():
            for offset in range(0, frame.height, SLICE):
                _register(con, table, frame.slice(offset, SLICE))
        con.execute(rollup.REBUILD)  # the calls went in around the ingest: their rollup, as a migration makes it
        con.execute("CHECKPOINT")
    timings["insert_s"] = time.perf_counter() - started
    return timings


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
        f"({db_mb:.0f} MB store), " + (f"generated in {timings['generate_s']:.1f} s and inserted through Arrow in "
                                        f"{timings['insert_s']:.1f} s" if timings["insert_s"] else "an existing store")
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
        print(f"generated in {timings['generate_s']:.1f}s, inserted in {timings['insert_s']:.1f}s", flush=True)
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
