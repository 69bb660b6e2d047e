"""Every figure agrees with every other, on stores of random calls: each page's KPIs equal the sum of
its rows and of its chart's data, under any filter, and equal the sums computed here from the calls
themselves (live calls paid, replayed ones apart, unpriced ones counted and never taken as free)."""

from __future__ import annotations

import shutil
import tempfile
from datetime import date, datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dashboard_store as fx
from fixtures.ledger_checks import check_pages, raw_figures
from workbench.store import queries as q
from workbench.store import rollup
from workbench.store.db import open_store
from workbench.store.queries import ledger
from workbench.store.queries._base import _q
from workbench.store.ingest import write_rows

MODELS = ["alpha", "beta", "mystery"]  # mystery has no price
TENANTS = ["acme", "globex", "initech"]


@st.composite
def stores(draw) -> tuple[list[tuple], list[tuple], list[tuple]]:
    runs: list[tuple] = []
    for index in range(draw(st.integers(0, 6))):
        parent = draw(st.sampled_from([None, *[run[0] for run in runs]]))
        status = draw(st.sampled_from(["ok", "failed", "running"]))
        tags = draw(st.fixed_dictionaries({}, optional={"tenant": st.sampled_from(TENANTS),
                                                        "user": st.sampled_from(["u1", "u2"])}))
        runs.append((f"R{index}", parent, draw(st.sampled_from(["chat", "batch", "eval"])), status,
                     draw(st.sampled_from(["WB_PROVIDER_ERROR", "WB_AGENT_DEADLINE", None])) if status == "failed"
                     else None, draw(st.integers(0, 60 * 24 * 40)), tags,
                     draw(st.sampled_from([("greet", "1"), ("greet", "2"), (None, None)]))))
    usage = st.fixed_dictionaries({}, optional={
        "input_tokens": st.integers(0, 5000), "cache_read_tokens": st.integers(0, 5000),
        "cache_write_tokens": st.integers(0, 3000), "output_tokens": st.integers(0, 3000)})
    calls = []
    for index in range(draw(st.integers(0, 25))):
        flags = {"settled": draw(st.booleans()) or draw(st.booleans()), "replayed": draw(st.booleans()),
                 "ttfb_ms": draw(st.integers(1, 3000)), "duration_ms": draw(st.integers(3000, 60_000))}
        calls.append((f"c{index}", draw(st.sampled_from([None, *[run[0] for run in runs]])),
                      draw(st.integers(0, 60 * 24 * 40)), draw(st.sampled_from(MODELS)), draw(usage),
                      draw(st.sampled_from([("greet", "1"), ("greet", "2"), ("sum", "1"), (None, None)])), flags))
    compactions = [(f"x{index}", draw(st.sampled_from([None, *[run[0] for run in runs]])),
                    draw(st.integers(0, 60 * 24 * 40)), draw(st.sampled_from(["ok", "error"])), 9000, 2000, 5, 2,
                    draw(st.integers(0, 10**9))) for index in range(draw(st.integers(0, 4)))]
    return calls, runs, compactions


FILTERS = st.sampled_from([
    q.Filters(), q.Filters(source="live"), q.Filters(source="replayed"), q.Filters(tags=("tenant=acme",)),
    q.Filters(run_names=("chat",)), q.Filters(models=("alpha", "mystery")), q.Filters(prompt_ids=("greet",)),
    q.Filters(date_from=date(2024, 5, 10), date_to=date(2024, 5, 30)),
])


def _expected(calls: list[dict], runs: list[tuple]) -> dict[str, int]:
    live = [c for c in calls if not c["replayed"]]
    failed = set().union(*[fx.subtree(run[0], runs) for run in runs if run[3] == "failed" and run[1] is None])
    return {
        "cost_micros": sum(c["cost_micros"] or 0 for c in live),
        "replayed_cost_micros": sum(c["cost_micros"] or 0 for c in calls if c["replayed"]),
        "calls": len(calls), "replayed_calls": sum(1 for c in calls if c["replayed"]),
        "unpriced_calls": sum(1 for c in live if c["settled"] and c["cost_micros"] is None),
        "failed_cost_micros": sum(c["cost_micros"] or 0 for c in live if c["run_id"] in failed and c["settled"]),
        "failed_replayed_cost_micros": sum(c["cost_micros"] or 0 for c in calls
                                           if c["replayed"] and c["run_id"] in failed),
        "net_savings_micros": _net_savings(live),
    }


def _net_savings(calls: list[dict]) -> int:
    """Net cache savings of priced calls, by hand from the price sheets (truncated once per group:
    by prompt id, version and model)."""
    groups: dict[tuple, Fraction] = {}
    for call in calls:
        if not call["settled"] or call["cost_micros"] is None:
            continue
        sheet = fx.SPECS[call["model_served"]]
        over = call["input_tokens"] + call["cache_read_tokens"] + call["cache_write_tokens"]
        tier = next((t for t in reversed(sheet.long_context) if over > t.above_input_tokens), sheet)
        unit = Fraction(100, 10**sheet.scale)
        read = tier.cache_read if tier.cache_read is not None else Fraction(tier.input, 10)
        write = tier.cache_write_5m if tier.cache_write_5m is not None else Fraction(tier.input * 5, 4)
        key = (call["prompt_id"], call["prompt_version"], call["model_served"])
        groups[key] = groups.get(key, Fraction(0)) + unit * (
            call["cache_read_tokens"] * (tier.input - read) - call["cache_write_tokens"] * (write - tier.input))
    return sum(int(value) if value >= 0 else -int(-value) for value in groups.values())


@pytest.fixture(scope="module")
def blank_store(tmp_path_factory) -> Path:
    """A migrated, empty store, copied for each example (migrating one takes a second)."""
    path = tmp_path_factory.mktemp("blank") / "blank.duckdb"
    with open_store(path):
        pass
    return path


_RUN_IDS = [f"R{index}" for index in range(8)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.dictionaries(st.sampled_from(_RUN_IDS[:6]), st.tuples(
           st.none() | st.sampled_from(_RUN_IDS), st.sampled_from(["chat", "batch"]))),
       tagged=st.sets(st.sampled_from(_RUN_IDS)),
       f=st.sampled_from([q.Filters(run_names=("chat",)), q.Filters(tags=("env=prod",)),
                          q.Filters(run_names=("chat",), tags=("env=prod",))]))
# three deep, a tagged run inside a tagged one, a cycle under a selected run, and one under a run never stored
@example(runs={"R0": (None, "chat"), "R1": ("R0", "batch"), "R2": ("R1", "batch"), "R3": ("R2", "chat"),
               "R4": ("R5", "batch"), "R5": ("R4", "batch"), "R6": ("R7", "chat")},
         tagged={"R0", "R3", "R4", "R7"}, f=q.Filters(tags=("env=prod",)))
def test_a_run_name_or_tag_selects_its_stored_runs_and_every_run_inside_them(blank_store, runs, tagged, f):
    """The runs a name or tag selects, computed here by walking parent links: the stored runs that
    match, then every stored run whose parent is selected, however deep (a run inside a selected one
    may match too; parents may form a cycle or be runs never stored; a tag may name a run never
    stored), read as the run sets and through `fr` (filtered runs) with and without a scope."""
    matched = {run for run, (_, name) in runs.items()
               if (not f.run_names or name in f.run_names) and (not f.tags or run in tagged)}
    expected, grew = set(matched), True
    while grew:
        inside = {run for run, (parent, _) in runs.items() if parent in expected}
        grew, expected = not inside <= expected, expected | inside
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "runs.duckdb"
        shutil.copyfile(blank_store, db)
        with open_store(db) as con:
            write_rows(con, "run", [{"run_id": run, "parent_run_id": parent, "name": name, "status": "ok",
                                     "started_at": "2024-05-01T00:00:00+00:00"}
                                    for run, (parent, name) in runs.items()])
            write_rows(con, "run_tag", [{"run_id": run, "key": "env", "value": "prod"} for run in tagged])

        def work(con):
            sets = q.run_sets(con, f)["_wb_sel_runs"]["run_id"].to_list()
            unscoped = _q(con, f, "SELECT run_id FROM fr")["run_id"].to_list()
            with q.scope(con, f):
                scoped = _q(con, f, "SELECT run_id FROM fr")["run_id"].to_list()
            return sets, unscoped, scoped

        for ids in q.read(db, None, work):
            assert sorted(ids) == sorted(expected)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(store=stores(), f=FILTERS, top=st.integers(1, 4), by=st.sampled_from(["model", "tenant", "week", "run"]))
def test_every_page_kpi_is_the_sum_of_its_rows_and_of_its_chart(blank_store, store, f, top, by):
    calls, runs, compactions = store
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "random.duckdb"
        shutil.copyfile(blank_store, db)
        fx.build(db, evals=False, calls=calls, runs=runs, compactions=compactions)
        expected = _expected(fx.call_rows(calls), runs)

        def work(con):
            shown = check_pages(con, q.Filters(), top=top, by=by)
            check_pages(con, f, top=top, by=by)
            return shown, raw_figures(con)

        shown, raw = q.read(db, None, work)
    for name in ("cost_micros", "replayed_cost_micros", "calls", "replayed_calls", "unpriced_calls"):
        assert shown[name] == expected[name] == raw[name], name
    assert shown["failed_cost_micros"] == expected["failed_cost_micros"] == raw["failed_cost_micros"]
    assert shown["failed_replayed_cost_micros"] == expected["failed_replayed_cost_micros"]
    assert shown["net_savings_micros"] == expected["net_savings_micros"]


def test_the_fixture_store_agrees_with_itself(dashboard_db):
    shown = q.read(dashboard_db, None, lambda con: check_pages(con, q.Filters()))
    calls = fx.call_rows()
    assert shown["cost_micros"] == sum(c["cost_micros"] or 0 for c in calls if not c["replayed"])
    assert shown["replayed_calls"] == 1 and shown["unpriced_calls"] == 1


def test_top_n_sums_everything_else_into_one_row(dashboard_db):
    page = q.read(dashboard_db, None, lambda con: q.overview_page(con, q.Filters(), by="model", top=1))
    breakdown = page["breakdown"]
    assert breakdown["model"].to_list() == ["alpha", q.OTHERS]
    assert breakdown["calls"].sum() == page["calls"]["calls"][0]
    assert breakdown.row(1, named=True)["unpriced_calls"] == 1  # the mystery call is in everything else


def test_breakdown_by_tag_takes_the_nearest_run_that_has_the_key(dashboard_db):
    frame = q.read(dashboard_db, None, lambda con: q.spend_by(con, q.Filters(), "env"))
    calls = fx.call_rows()
    by_env = {row["env"]: row["calls"] for row in frame.iter_rows(named=True)}
    # R2a has no tags: its calls take env=prod from R2 around it; c11 ran outside any run
    assert by_env == {"prod": 6, "dev": 4, "(none)": 1} and sum(by_env.values()) == len(calls)


def test_latency_beside_cost(dashboard_db):
    def work(con):
        return (q.spend_by(con, q.Filters(), "model", raw=True), q.spend_by(con, since_noon, "model"),
                q.spend_by(con, q.Filters(), "model"))

    since_noon = q.Filters(date_from=datetime(2024, 4, 30, 12, tzinfo=timezone.utc))  # no whole day: from the calls
    exact, from_noon, small = q.read(dashboard_db, None, work)
    with mock.patch.object(ledger, "EXACT_LATENCY_UP_TO", 0):  # as on a store of millions of calls
        bucketed = q.read(dashboard_db, None, work)[2]
    # the fixture's live calls all took 2 s with a first byte at 400 ms; a small store ranks them exactly
    for frame in (exact, from_noon, small):
        alpha = frame.filter(frame["model"] == "alpha").row(0, named=True)
        assert (alpha["ttfb_p50_ms"], alpha["ttfb_p99_ms"], alpha["duration_p95_ms"]) == (400.0, 400.0, 2000.0)
        assert not alpha["latency_approx"]
    # read from the monthly latency buckets: said so, and within their error
    alpha = bucketed.filter(bucketed["model"] == "alpha").row(0, named=True)
    assert alpha["latency_approx"] and rollup.LATENCY_ERROR < 0.01
    assert abs(alpha["ttfb_p50_ms"] - 400) <= 4 and abs(alpha["duration_p95_ms"] - 2000) <= 20


def test_bucketed_percentiles_interpolate_as_the_exact_ones(tmp_path):
    """Latencies spread over three months and many buckets: every percentile by model and by month,
    over whole months, partial ones and no whole one, within the stated error of `quantile_cont`."""
    rows = fx.call_rows()
    spread = []
    for index in range(300):
        row = dict(rows[index % len(rows)], call_id=f"spread{index}", run_id=None, replayed=index % 7 == 0)
        start = datetime(2024, 4, 1, tzinfo=timezone.utc) + timedelta(hours=7 * index)
        row.update(started_at=start.isoformat(), first_byte_at=(start + timedelta(microseconds=37 * index ** 2)).isoformat(),
                   ended_at=(start + timedelta(milliseconds=5 + (index * 7919) % 90_000)).isoformat())
        spread.append(row)
    db = fx.build(tmp_path / "wb.duckdb", evals=False)
    with open_store(db) as con:
        write_rows(con, "call", spread)
    cuts = [q.Filters(), q.Filters(date_from=date(2024, 5, 1)), q.Filters(date_from=date(2024, 4, 9), date_to=date(2024, 6, 3)),
            q.Filters(date_from=date(2024, 5, 3), date_to=date(2024, 5, 20)), q.Filters(date_to=date(2024, 5, 31))]

    def work(con):
        return [(q.spend_by(con, f, by), q.spend_by(con, f, by, raw=True)) for f in cuts for by in ("model", "month")]

    with mock.patch.object(ledger, "EXACT_LATENCY_UP_TO", 0):  # as on a store of millions of calls
        compared = q.read(db, None, work)
    for bucketed, exact in compared:
        assert bucketed["latency_approx"].all() and bucketed.height == exact.height
        joined = bucketed.join(exact, on=[c for c in exact.columns if c not in (*q.LATENCY, "latency_approx")],
                               nulls_equal=True)
        assert joined.height == exact.height
        for name in q.LATENCY:
            for shown, true in zip(joined[name], joined[f"{name}_right"]):
                assert (shown is None) == (true is None)
                assert true is None or abs(shown - true) <= rollup.LATENCY_ERROR * true + 0.1, (name, shown, true)


def test_week_and_month_rows_add_up_to_days(dashboard_db):
    def work(con):
        return [q.spend_by(con, q.Filters(), by) for by in ("day", "week", "month")]

    day, week, month = q.read(dashboard_db, None, work)
    assert day["cost_micros"].sum() == week["cost_micros"].sum() == month["cost_micros"].sum()
    assert month["month"].to_list() == [date(2024, 5, 1)]
    assert all(d - timedelta(days=d.weekday()) == d for d in week["week"].to_list())  # Mondays
