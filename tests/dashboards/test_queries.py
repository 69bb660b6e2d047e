"""Each page's headline figures, read through `workbench.store.queries`, against values computed
here from the fixture's rows and price sheets by plain Python — no SQL."""

from __future__ import annotations

import json
import socket
import os
from datetime import date
from fractions import Fraction
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import dashboard_store as fx
from workbench.store import queries as q
from workbench.store.db import open_store
from workbench.store.ingest import write_rows
from workbench.store.queries import spend
from workbench.store.queries._base import _q

CALLS = fx.call_rows()
BY_ID = {c["call_id"]: c for c in CALLS}


def read(db: Path, fn):
    return q.read(db, None, fn)


def cost(*ids: str) -> int:
    return sum(BY_ID[i]["cost_micros"] or 0 for i in ids)


LIVE = [c for c in CALLS if not c["replayed"]]  # c09 was replayed: it cost nothing
PAID = sum(c["cost_micros"] or 0 for c in LIVE)


def test_overview_headlines(dashboard_db):
    data = read(dashboard_db, lambda con: q.overview_page(con, q.Filters()))
    calls = data["calls"].row(0, named=True)
    assert calls["calls"] == 11 and calls["settled"] == 10 and calls["unsettled"] == 1
    assert calls["unpriced_calls"] == 1 and calls["unpriced_tokens"] == 330_000  # c10, the `mystery` model
    # spend is what was paid; the replayed call is shown apart, at what it would have cost
    assert data["currency"].rows() == [("USD", PAID, 8, cost("c09"), 1)]
    assert calls["cost_micros"] == PAID and calls["replayed_cost_micros"] == cost("c09") > 0
    runs = data["runs"].row(0, named=True)
    assert (runs["runs"], runs["failed"], runs["ok"], runs["running"], runs["nested_runs"]) == (5, 2, 2, 1, 1)
    by_model = {row["model"]: row for row in data["by_model"].iter_rows(named=True)}
    assert by_model["alpha"]["cost_micros"] == cost("c01", "c02", "c03", "c07", "c08", "c11")
    assert by_model["alpha"]["replayed_cost_micros"] == cost("c09") and by_model["alpha"]["replayed_calls"] == 1
    assert by_model["mystery"]["cost_micros"] is None and by_model["mystery"]["unpriced_calls"] == 1
    by_day = data["by_day"]
    assert by_day["cost_micros"].sum() == PAID
    day1 = by_day.filter(by_day["day"] == date(2024, 5, 1))["cost_micros"].sum()
    assert day1 == cost("c01", "c02", "c03", "c04")
    # in a stable order (day, model, prompt, version, currency): rows tying on day and model came
    # back in any order, so two reads of one store could differ
    keys = ["day", "model", "prompt_id", "prompt_version", "currency"]
    assert by_day.equals(by_day.sort(keys, nulls_last=True)) and by_day.select(keys).is_duplicated().sum() == 0
    top = data["top_names"].row(0, named=True)
    assert top["name"] == "chat-app" and top["cost_micros"] == cost("c01", "c02", "c03", "c04", "c05")
    assert data["top_runs"]["run_id"].to_list()[:2] == ["R1", "R3"]


def _savings(calls: list[dict]) -> tuple[int, int]:
    """Read savings and write premium of the live calls (replayed ones were never paid), in
    micro-minor units, from the price sheets, by hand."""
    read_total, write_total = Fraction(0), Fraction(0)
    for call in calls:
        if not call["settled"] or call["price_source"] is None or call["replayed"]:
            continue
        spec = fx.SPECS[call["model_served"]]
        over = call["input_tokens"] + call["cache_read_tokens"] + call["cache_write_tokens"]
        tier = next((t for t in reversed(spec.long_context) if over > t.above_input_tokens), spec)
        unit = Fraction(100, 10**spec.scale)  # micro-cents per token at a price per million
        price_in = tier.input * unit
        price_read = (tier.cache_read if tier.cache_read is not None else Fraction(tier.input, 10)) * unit
        price_w5 = (tier.cache_write_5m if tier.cache_write_5m is not None else Fraction(tier.input * 5, 4)) * unit
        price_w1 = tier.cache_write_1h * unit if tier.cache_write_1h is not None else price_w5
        one_hour = call["cache_write_1h_tokens"]
        read_total += call["cache_read_tokens"] * (price_in - price_read)
        write_total += (call["cache_write_tokens"] - one_hour) * (price_w5 - price_in) + one_hour * (price_w1 - price_in)
    return int(read_total), int(write_total)  # toward zero, to the micro-minor unit


def test_cache_headlines_and_savings(dashboard_db):
    data = read(dashboard_db, lambda con: q.cache_page(con, q.Filters()))
    totals = data["totals"].row(0, named=True)
    settled = [c for c in CALLS if c["settled"]]
    assert totals["calls"] == len(settled) == 10
    assert totals["hit_calls"] == sum(1 for c in settled if c["cache_read_tokens"] > 0) == 4
    assert totals["cache_read_tokens"] == sum(c["cache_read_tokens"] for c in settled)
    assert totals["input_tokens"] + totals["cache_read_tokens"] + totals["cache_write_tokens"] == sum(
        c["input_tokens"] + c["cache_read_tokens"] + c["cache_write_tokens"] for c in settled)
    expected_read, expected_write = _savings(CALLS)
    assert (totals["read_savings_micros"], totals["write_premium_micros"]) == (expected_read, expected_write)
    assert totals["net_savings_micros"] == expected_read - expected_write
    assert totals["unpriced_calls"] == 1
    groups = {(r["prompt_id"], r["prompt_version"], r["model"]): r for r in data["by_prompt_model"].iter_rows(named=True)}
    beta = [c for c in CALLS if c["model_served"] == "beta"]  # scale 1, default read/write prices, long context
    assert (groups[("greet", "2", "beta")]["read_savings_micros"],
            groups[("greet", "2", "beta")]["write_premium_micros"]) == _savings(beta)
    assert data["unstable"]["run_id"].to_list() == ["R3"]



@pytest.fixture(scope="module")
def two_currency_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fx.build(tmp_path_factory.mktemp("currencies") / "workbench.duckdb", evals=False,
                    calls=fx.TWO_CURRENCIES, compactions=[])


@pytest.mark.parametrize("raw", [False, True])
def test_cache_savings_never_add_two_currencies(two_currency_db, raw):
    """A prompt priced in dollars and in euros is a row per currency, and so are the totals; calls
    with no price (and no currency) count on the row of the main currency, as the ledger does."""
    calls = fx.call_rows(fx.TWO_CURRENCIES)
    dollars = [c for c in calls if c["model_served"] in ("alpha", "mystery")]
    euros = [c for c in calls if c["model_served"] == "gamma"]
    expected = {"USD": (dollars, *_savings(dollars)), "EUR": (euros, *_savings(euros))}
    groups, totals = read(two_currency_db, lambda con: (
        q.cache_savings(con, q.Filters(), ("prompt_id",), raw=raw), q.cache_totals(q.cache_savings(con, q.Filters(), raw=raw))))
    assert totals["currency"].to_list() == ["USD", "EUR"]  # the main currency first: it has the most calls
    assert sorted(groups["currency"]) == ["EUR", "USD"] and groups["prompt_id"].to_list() == ["greet", "greet"]
    for frame in (groups, totals):
        for row in frame.iter_rows(named=True):
            mine, read_savings, write_premium = expected[row["currency"]]
            assert (row["calls"], row["read_savings_micros"], row["write_premium_micros"]) == (
                len(mine), read_savings, write_premium)
            assert row["net_savings_micros"] == read_savings - write_premium
            assert row["replayed_calls"] == sum(c["replayed"] for c in mine)
            assert row["unpriced_calls"] == sum(c["price_source"] is None for c in mine)
    assert expected["EUR"][1] > 0 and expected["USD"][1] > 0


def _bill_row(run_id, parent, name, status, code, prompt, main, others, n):
    """A run whose bill is in `main` (None: written before currencies were named) and `others`."""
    other_calls = sum(part["calls"] for part in others.values())
    return {"run_id": run_id, "parent_run_id": parent, "name": name, "status": status, "error_code": code,
            "error_type": "RuntimeError", "prompt_id": prompt, "prompt_version": "1",
            "started_at": fx._at(n).isoformat(), "billed_currency": main,
            "billed_other_currencies": json.dumps(others) if others else None,
            "billed_input_tokens": 100 * n, "billed_cache_read_tokens": 7 * n, "billed_cache_write_tokens": 3 * n,
            "billed_output_tokens": 11 * n, "billed_unsettled": n % 2, "billed_calls": 4 + n + other_calls,
            "billed_cost_micros": 1_000_003 * n, "billed_unpriced_calls": n % 3,
            "billed_replayed_calls": n % 4 + sum(part["replayed_calls"] for part in others.values()),
            "billed_replayed_cost_micros": 501 * n, "billed_replayed_unpriced_calls": n % 2}


def _part(cost, calls, replayed_cost=0, replayed=0):
    return {"cost_micros": cost, "calls": calls, "replayed_cost_micros": replayed_cost, "replayed_calls": replayed}


def test_summed_bills_are_their_rows_summed(tmp_path):
    """Failures' totals and groups and the Overview's run names, summed from the runs' columns
    (`spend.bill_sums`), are exactly the bills' rows (`spend.bills`, a row per run and currency)
    summed: runs in one, two and three currencies, nested, failed or not, named before currencies were."""
    db = fx.build(tmp_path / "wb.duckdb", evals=False, calls=[], runs=[], compactions=[])
    runs = [_bill_row("A", None, "chat", "failed", "E1", "p", "USD", {"EUR": _part(7_000_001, 2, 30, 1)}, 1),
            _bill_row("A1", "A", "agent", "failed", "E2", "p", "USD", {"EUR": _part(5, 1)}, 2),
            _bill_row("B", None, "chat", "failed", None, "q", "EUR", {"USD": _part(9, 1), "GBP": _part(4, 3, 2, 2)}, 3),
            _bill_row("C", None, "batch", "ok", None, "q", None, {}, 4),
            _bill_row("D", None, "batch", "failed", "E1", "p", "USD", {}, 5),
            _bill_row("E", None, "chat", "ok", None, "p", "GBP", {"USD": _part(12, 2)}, 6)]
    with open_store(db) as con:
        write_rows(con, "run", runs)

    def work(con):
        f = q.Filters()
        rows = _q(con, f, f", bills AS ({spend.bills('fr')}) SELECT * FROM bills WHERE parent_run_id IS NULL")
        return rows, q.failure_totals(con, f), q.failures_by(con, f, "error_code"), q.failures_by(con, f, "prompt"), \
            q.top_run_names(con, f)

    rows, totals, by_error, by_prompt, names = read(db, work)
    assert set(rows["currency"]) == {"USD", "EUR", "GBP"} and rows.height == 9
    measures = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "unsettled", "calls",
                "cost_micros", "unpriced_calls", "replayed_calls", "replayed_cost_micros", "replayed_unpriced_calls")

    def summed(frame: pl.DataFrame, keys: list[str], names=measures) -> pl.DataFrame:
        """`bills`' rows summed, a cost unknown where every call of its kind went unpriced."""
        out = frame.group_by(keys).agg(pl.col("main").sum().cast(pl.Int64).alias("runs"),
                                       *[pl.col(n).sum().cast(pl.Int64) for n in names]).sort(keys, nulls_last=True)
        if "unpriced_calls" not in names:
            return out
        return q.unknown_when_unpriced(out.with_columns(
            (pl.col("calls") - pl.col("unpriced_calls")).alias("priced_calls"),
            (pl.col("replayed_calls") - pl.col("replayed_unpriced_calls")).alias("replayed_priced_calls")))

    failed = rows.filter(pl.col("status") == "failed").with_columns(
        pl.coalesce("error_code", "error_type").alias("error_code"))
    for frame, keys in ((by_error, ["error_code", "currency"]), (by_prompt, ["prompt_id", "prompt_version", "currency"])):
        expected = summed(failed, keys)
        assert_frame_equal(frame.select(expected.columns).sort(keys, nulls_last=True), expected)
    expected = summed(failed, ["currency"]).rename({"runs": "failed_runs"}).join(
        summed(rows, ["currency"], ("cost_micros",)).rename({"cost_micros": "total_cost_micros"}), on="currency")
    assert_frame_equal(totals.select(expected.columns).sort("currency"), expected)
    money = ("calls", "cost_micros", "unpriced_calls", "replayed_calls", "replayed_cost_micros", "replayed_unpriced_calls")
    expected = summed(rows, ["name", "currency"], money).join(
        rows.filter(pl.col("main") & (pl.col("status") == "failed")).group_by("name", "currency")
        .agg(pl.len().cast(pl.Int64).alias("failed")), on=["name", "currency"], how="left").with_columns(
        pl.col("failed").fill_null(0))
    assert_frame_equal(names.select(expected.columns).sort("name", "currency"), expected.sort("name", "currency"))


def test_failure_headlines(dashboard_db):
    data = read(dashboard_db, lambda con: q.failures_page(con, q.Filters()))
    totals = data["totals"].row(0, named=True)
    failed_top_calls = [c for c in CALLS if c["run_id"] in {"R2", "R2a", "R3"}]  # R2a runs inside R2
    answered = [c for c in failed_top_calls if c["settled"]]
    assert totals["failed_runs"] == 2
    assert totals["cost_micros"] == sum(c["cost_micros"] for c in answered) == cost("c04", "c05", "c07", "c08")
    assert totals["calls"] == len(answered) == 4 and totals["unsettled"] == 1
    assert totals["output_tokens"] == sum(c["output_tokens"] for c in answered)
    assert totals["total_cost_micros"] == PAID
    by_code = {r["error_code"]: r["cost_micros"] for r in data["by_error"].iter_rows(named=True)}
    assert by_code == {"WB_PROVIDER_ERROR": cost("c04", "c05"), "WB_AGENT_DEADLINE": cost("c07", "c08")}
    by_prompt = {(r["prompt_id"], r["prompt_version"]): r["runs"] for r in data["by_prompt"].iter_rows(named=True)}
    assert by_prompt == {("greet", "2"): 1, ("summarize", "2"): 1}
    runs = {r["run_id"]: r["top_level"] for r in data["runs"].iter_rows(named=True)}
    assert runs == {"R2": True, "R2a": False, "R3": True}


def test_compaction_headlines(dashboard_db):
    data = read(dashboard_db, lambda con: q.compaction_page(con, q.Filters()))
    totals = data["totals"].row(0, named=True)
    assert totals["events"] == len(fx.COMPACTIONS) and totals["failed"] == 1 and totals["runs"] == 3
    assert totals["tokens_before"] == sum(x[4] for x in fx.COMPACTIONS)
    assert totals["tokens_after"] == sum(x[5] for x in fx.COMPACTIONS)
    assert totals["costs"] == [{"currency": "USD", "cost_micros": sum(x[8] for x in fx.COMPACTIONS)}]
    assert data["failed"]["compaction_id"].to_list() == ["x4"]
    assert data["top_runs"].row(0, named=True)["run_id"] == "R1"


def test_compactions_per_day_keep_each_currency_apart(tmp_path):
    """The chart's days carry the summaries' money per currency, as the headline does: one day's
    compactions priced in euros and in dollars were one sum before (225,000,000 with no currency)."""
    db = fx.build_two_currency_compactions(tmp_path / "workbench.duckdb")
    data = read(db, lambda con: q.compaction_page(con, q.Filters()))
    by_day = data["by_day"].to_dicts()
    assert by_day == [{"day": date(2024, 5, 1), "outcome": "ok", "events": 4, "tokens_before": 36000,
                       "tokens_after": 8000, "costs": [{"currency": "EUR", "cost_micros": 70_000_000},
                                                       {"currency": "USD", "cost_micros": 155_000_000}]}]
    assert by_day[0]["costs"] == data["totals"]["costs"][0].to_list()


@pytest.mark.parametrize(
    ("filters", "call_ids", "top_runs"),
    [
        (q.Filters(date_from=date(2024, 5, 2), date_to=date(2024, 5, 2)), {"c05", "c06", "c07", "c08"}, {"R3"}),
        (q.Filters(providers=("anthropic",)), {"c04", "c05", "c06"}, {"R2"}),
        (q.Filters(models=("alpha",), source="replayed"), {"c09"}, {"R4"}),
        (q.Filters(run_names=("chat-app",)), {"c01", "c02", "c03", "c04", "c05", "c06"}, {"R1", "R2", "R5"}),
        (q.Filters(tags=("env=dev",)), {"c07", "c08", "c09", "c10"}, {"R3", "R4"}),
        (q.Filters(tags=("env=prod", "team=a")), {"c01", "c02", "c03"}, {"R1"}),
        (q.Filters(prompt_ids=("greet",), prompt_versions=("2",)), {"c04", "c05", "c06"}, {"R2"}),
        (q.Filters(source="live"), {c["call_id"] for c in CALLS} - {"c09"}, {"R1", "R2", "R3", "R4"}),
    ],
)
def test_filters(dashboard_db, filters, call_ids, top_runs):
    totals, runs = read(dashboard_db, lambda con: (q.call_totals(con, filters), q.run_choices(con, filters)))
    assert totals["calls"][0] == len(call_ids)
    assert set(runs["run_id"]) == top_runs
    spend = read(dashboard_db, lambda con: q.spend_by_currency(con, filters))
    assert spend["cost_micros"].sum() == cost(*(i for i in call_ids if not BY_ID[i]["replayed"]))
    assert spend["replayed_cost_micros"].sum() == cost(*(i for i in call_ids if BY_ID[i]["replayed"]))


def test_compaction_filters_go_through_runs(dashboard_db):
    f = q.Filters(run_names=("chat-app",))  # R1 and, inside R2, the agent run R2a
    ids = read(dashboard_db, lambda con: q.compaction_events(con, f))["compaction_id"].to_list()
    assert sorted(ids) == ["x1", "x2", "x3"]


def test_evals(dashboard_db):
    history = read(dashboard_db, lambda con: q.eval_history(con, q.Filters()))
    assert history["eval_run_id"].to_list() == ["E1", "E2"]
    assert history["cost_per_case_micros"].to_list() == [1_000_000, 1_500_000]
    assert history["passed"].to_list() == [3, 1]
    cases = read(dashboard_db, lambda con: q.eval_cases(con, "E2"))
    assert cases["case_id"].to_list()[0] == "grace"  # the largest drop first
    only_v1 = read(dashboard_db, lambda con: q.eval_history(con, q.Filters(prompt_versions=("1",))))
    assert only_v1["eval_run_id"].to_list() == ["E1"]


def test_eval_matrix(dashboard_db):
    """The cells of a `workbench eval compare`, each figure from the fixture's samples by hand."""
    [matrix] = read(dashboard_db, lambda con: q.eval_matrices(con, q.Filters())).to_dicts()
    assert (matrix["matrix_id"], matrix["cells"], matrix["versions"], matrix["models"]) == (
        "MX", 3, ["1", "2"], ["alpha", "beta"])
    cells = read(dashboard_db, lambda con: q.eval_matrix(con, "MX")).to_dicts()
    assert [(cell["prompt_version"], cell["model"], cell["reference"]) for cell in cells] == [
        ("1", "alpha", True), ("2", "alpha", False), ("1", "beta", False)]
    for cell, (_, _, _, cost, latencies, cases) in zip(cells, fx.MATRIX_CELLS, strict=True):
        assert cell["samples"] == 4 and cell["cost_per_case_micros"] == cost  # one sample's cost
        if latencies is None:  # replayed: no latency figure
            assert (cell["live_samples"], cell["latency_median_ms"], cell["latency_p95_ms"]) == (0, None, None)
        else:
            ordered = sorted(latencies)
            assert cell["live_samples"] == 4 and cell["latency_median_ms"] == (ordered[1] + ordered[2]) / 2
            assert cell["latency_p95_ms"] == ordered[3]  # nearest rank: ceil(0.95 x 4) = the 4th
    assert [(cell["worse"], cell["better"]) for cell in cells] == [(0, 0), (1, 0), (0, 0)]  # M3's drop is noise
    assert [cell["worse_cases"] for cell in cells] == [None, ["grace"], None]
    side_by_side = read(dashboard_db, lambda con: q.eval_matrix_case(con, "MX", "grace"))
    assert side_by_side.filter(side_by_side["epoch"] == 1)["output"].to_list() == ["Hi Grace", "Bye Grace", "Hi Grace"]
    assert read(dashboard_db, lambda con: q.eval_matrix_case_ids(con, "MX"))["case_id"].to_list() == ["grace", "ada"]
    # the cells of a matrix are not gate runs
    assert "MX" not in read(dashboard_db, lambda con: q.eval_history(con, q.Filters()))["eval_run_id"].to_list()


def test_evals_page_without_eval_tables():
    con = duckdb.connect()
    assert q.evals_page(con, q.Filters()) == {}


def test_run_explorer(dashboard_db):
    data = read(dashboard_db, lambda con: q.explorer_page(con, q.Filters(), run_id="R2"))
    assert data["tree"]["run_id"].to_list() == ["R2", "R2a"]
    assert data["calls"]["call_id"].to_list() == ["c04", "c05", "c06"]
    spans = read(dashboard_db, lambda con: q.run_spans(con, "R1"))
    assert spans.height == 4
    missing = read(dashboard_db, lambda con: q.run_tree(con, "nope"))
    assert missing.is_empty()


def test_run_explorer_without_a_run_reads_the_latest_listed(dashboard_db):
    data = read(dashboard_db, lambda con: q.explorer_page(con, q.Filters()))
    latest = data["choices"]["run_id"][0]
    assert [r["run_id"] for r in data["tree"].iter_rows(named=True) if r["depth"] == 0] == [latest]
    assert {"calls", "spans", "resume", "turns"} <= set(data)
    assert "tree" not in read(dashboard_db, lambda con: q.explorer_page(con, q.Filters(run_names=("no-such",))))


def test_run_spans_are_those_of_its_trace_and_of_the_runs_inside_it(tmp_path):
    from workbench.store.db import open_store
    from workbench.store.ingest import write_rows

    db = tmp_path / "spans.duckdb"
    at = "2024-01-01T00:00:00+00:00"
    with open_store(db) as con:
        write_rows(con, "run", [{"run_id": "A", "trace_id": "tA", "name": "a", "status": "ok", "started_at": at},
                                {"run_id": "A1", "parent_run_id": "A", "name": "a1", "status": "ok", "started_at": at},
                                {"run_id": "B", "trace_id": "tB", "name": "b", "status": "ok", "started_at": at}])
        write_rows(con, "span", [
            {"span_id": "in-trace-only", "trace_id": "tA", "run_id": None, "start_time": at},
            {"span_id": "inner-run-only", "trace_id": "tOther", "run_id": "A1", "start_time": at},
            {"span_id": "both", "trace_id": "tA", "run_id": "A", "start_time": at},
            {"span_id": "neither", "trace_id": "tB", "run_id": "B", "start_time": at}])
        indexed = {name for (name,) in con.execute("SELECT index_name FROM duckdb_indexes() WHERE table_name = 'spans'"
                                                    ).fetchall()}
    assert "spans_run" in indexed  # looked up by index, not by a scan of every span
    assert "spans_trace" not in indexed  # random keys: every commit would load the whole index (0022)
    assert sorted(read(db, lambda con: q.run_spans(con, "A"))["span_id"]) == ["both", "in-trace-only", "inner-run-only"]
    assert read(db, lambda con: q.run_spans(con, "A1"))["span_id"].to_list() == ["inner-run-only"]
    assert read(db, lambda con: q.run_spans(con, "nope")).is_empty()


def test_the_overview_headline_and_tables_are_the_whole_page(dashboard_db):
    """The page paints its headline from one read and its tables from another: together they are
    exactly what the page reads in one."""
    whole = read(dashboard_db, lambda con: q.overview_page(con, q.Filters(), by="run", top=1))
    parts = {**read(dashboard_db, lambda con: q.overview_headline(con, q.Filters())),
             **read(dashboard_db, lambda con: q.overview_tables(con, q.Filters(), "run", 1))}
    assert set(parts) == set(whole) == {"calls", "currency", "runs", "by_day", "by_model", "by_prompt", "breakdown",
                                        "top_names", "top_runs"}
    for name, frame in whole.items():
        assert parts[name].sort(frame.columns, nulls_last=True).equals(frame.sort(frame.columns, nulls_last=True)), name
    assert parts["calls"]["calls"][0] == len(CALLS)


@pytest.mark.parametrize("page, headline, tables", [
    ("prompt_cache", "cache_headline", "cache_tables"), ("compaction", "compaction_totals", "compaction_tables"),
    ("failures", "failure_totals", "failures_tables")])
def test_the_cache_and_compaction_headlines_and_tables_are_the_whole_page(dashboard_db, page, headline, tables):
    """Each page paints its headline figures from one read before its tables are read: together
    they are exactly what the page reads in one."""
    whole = read(dashboard_db, lambda con: q.PAGES[page](con, q.Filters()))
    first = read(dashboard_db, lambda con: getattr(q, headline)(con, q.Filters()))
    parts = {**(first if isinstance(first, dict) else {"totals": first}),
             **read(dashboard_db, lambda con: getattr(q, tables)(con, q.Filters()))}
    assert set(parts) == set(whole) and "totals" in whole
    for name, frame in whole.items():
        assert parts[name].equals(frame), name
    assert whole["totals"].height == 1


def test_transcript_reads_tool_calls_and_results(dashboard_db):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dashboards"))
    from _transcript import turns

    calls = read(dashboard_db, lambda con: q.run_calls(con, "R1")).to_dicts()
    shown = turns(calls)
    first_sent, first_answer = shown[0][1], shown[0][2]
    assert [e.role for e in first_sent] == ["system", "user"]
    assert first_answer[0].kind == "tool_call" and first_answer[0].name == "lookup_person"
    second_sent = shown[1][1]  # only what the second request added: the tool's result
    assert [(e.role, e.kind) for e in second_sent] == [("tool", "tool_result")]
    assert shown[1][2][0].text == "Hello, Ada Lovelace!"


def test_read_of_a_missing_store(tmp_path):
    with pytest.raises(q.StoreMissing):
        q.read(tmp_path / "none.duckdb", tmp_path / "spool", q.store_counts)
    assert not (tmp_path / "none.duckdb").exists()


def test_read_ingests_pending_spools_first(tmp_path):
    db = fx.build(tmp_path / "s.duckdb", evals=False)
    spool = tmp_path / "spool"
    spool.mkdir()
    row = dict(BY_ID["c11"], call_id="late", cost_micros=1)
    # a finished writer's spool file: <host>-<pid>-<n>.jsonl with a pid that is not running
    (spool / f"{socket.gethostname()}-{2**22 + os.getpid()}-0.jsonl").write_text(
        json.dumps({"kind": "call", "row": row}) + "\n")
    totals = q.read(db, spool, lambda con: q.call_totals(con, q.Filters()))
    assert totals["calls"][0] == len(CALLS) + 1
