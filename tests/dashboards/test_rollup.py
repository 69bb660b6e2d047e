"""The rollups of calls (`workbench.store.rollup`: daily, and per run) never disagree with the calls:
on random stores written the ways calls reach a store (ingest of spool files, records written again,
`store copy`, a migration of an older store), under random filters, every query the pages read from
them returns exactly what the same query returns from the calls themselves; a filter they cannot
answer is answered from the calls."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from unittest import mock

import duckdb
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import dashboard_store as fx
from test_ledger_properties import blank_store, stores  # noqa: F401 - a fixture, used by name
from workbench.store import queries as q
from workbench.store import rollup
from workbench.store.copy import copy_store
from workbench.store.db import open_store
from workbench.store.ingest import ArrowStream, commit_frames, ingest_spools, write_rows
from workbench.store.frames import table_frame as ingest_frame
from workbench.store.queries._base import _frame, _Sql, rolled_up, runs_rolled_up, scope
from workbench.store.queries import ledger
from workbench.store.queries.ledger import LATENCY
from workbench.store.records import TABLES
from workbench.store.schema import MIGRATIONS, migrate

VERDICTS = [None, "hit", "cold", "expired", "prefix_changed"]
PROMPTS = ("greet", "sum")


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def _same(rolled: pl.DataFrame, raw: pl.DataFrame) -> None:
    assert_frame_equal(_sorted(rolled), _sorted(raw), check_exact=True)


def _same_spend(rolled: pl.DataFrame, raw: pl.DataFrame, bucketed: bool) -> None:
    """A breakdown read from the rollups is the raw one: the same sums, and its latency percentiles
    the exact ones or, read from the latency buckets (and saying so), each within the buckets' stated
    error of the exact one (both rounded to 0.1 ms)."""
    assert rolled["latency_approx"].to_list() == [bucketed] * rolled.height
    assert not raw["latency_approx"].any()
    others = [name for name in rolled.columns if name not in (*LATENCY, "latency_approx")]
    rolled, raw = rolled.sort(others, nulls_last=True), raw.sort(others, nulls_last=True)
    _same(rolled.select(others), raw.select(others))
    for name in LATENCY:
        for shown, exact in zip(rolled[name].to_list(), raw[name].to_list()):
            assert (shown is None) == (exact is None), name
            if exact is not None and bucketed:
                assert abs(shown - exact) <= rollup.LATENCY_ERROR * abs(exact) + 0.1, (name, shown, exact)
            else:
                assert shown == exact, name


def _rollup_rows(con: duckdb.DuckDBPyConnection, source: str, spec: rollup.Rollup = rollup.DAILY) -> pl.DataFrame:
    """A rollup as stored (`stored`), or as it would be made now from the calls (`calls`)."""
    rows = spec.aggregate(spec.source) if source == "calls" else f"SELECT * FROM {spec.table}"
    return _sorted(con.sql(rows).pl())


def _hit_runs(con: duckdb.DuckDBPyConnection, f: q.Filters, rolled: bool) -> list:
    built = _Sql(f)
    return sorted(_frame(con, f"WITH RECURSIVE {built._hit_runs(rolled)} SELECT run_id FROM hit_runs",
                         built.params)["run_id"].to_list())


def check_rollup(con: duckdb.DuckDBPyConnection, filters: list[q.Filters]) -> None:
    """The stored rollups are the calls' own, and every query read from them equals its raw form."""
    for spec in rollup.ROLLUPS:
        assert_frame_equal(_rollup_rows(con, "stored", spec), _rollup_rows(con, "calls", spec))
    assert q.filter_options(con) == q.filter_options(con, raw=True)
    # a store of replayed calls only has no live latency: its percentiles stay exact whatever the limit
    live_latencies = con.execute(f"SELECT count(*) > 0 FROM {rollup.DURATION.table} WHERE bucket IS NOT NULL").fetchall()[0][0]
    for f in filters:
        whole_days = not isinstance(f.date_from, datetime) or f.date_from.timetz() == time(tzinfo=timezone.utc)
        assert rolled_up(con, f) == (not f.run_level and whole_days)
        assert runs_rolled_up(con, f) == whole_days
        _same(q.spend_cube(con, f), q.spend_cube(con, f, raw=True))
        _same(q.miss_reasons(con, f), q.miss_reasons(con, f, raw=True))
        for by in ("model", "provider", "prompt", "day", "week", "month"):
            # a small store's percentiles are exact; a store past the limit reads them from the buckets
            _same_spend(q.spend_by(con, f, by), q.spend_by(con, f, by, raw=True), bucketed=False)
            with mock.patch.object(ledger, "EXACT_LATENCY_UP_TO", 0):  # past it only with a live call to rank
                _same_spend(q.spend_by(con, f, by), q.spend_by(con, f, by, raw=True),
                            bucketed=by not in ("day", "week") and rolled_up(con, f) and live_latencies)
        for by in ((), ("prompt_id", "prompt_version", "model"), ("provider",)):
            _same(q.cache_savings(con, f, by), q.cache_savings(con, f, by, raw=True))
        if f.call_level:  # the runs a call-level filter keeps (a scope's run set)
            assert _hit_runs(con, f, rolled=True) == _hit_runs(con, f, rolled=False)
        for scoped in (False, True):  # alone, and inside a page's scope (its run sets in temp tables)
            with scope(con, f) if scoped else contextlib.nullcontext():
                _same(q.unstable_prefix_runs(con, f), q.unstable_prefix_runs(con, f, raw=True))
                _same(q.compaction_sources(con, f), q.compaction_sources(con, f, raw=True))
                for limit in (2, 20):  # the groups shown, and the first two of them (ties cut by name)
                    _same(q.changing_regions(con, f, limit), q.changing_regions(con, f, limit, raw=True))
                for now in NOWS:  # before, among and after the writes' lives
                    _same(q.write_waste(con, f, now=now), q.write_waste(con, f, raw=True, now=now))
                _same(q.outside_runs_spend(con, f), q.outside_runs_spend(con, f, raw=True))
                for by in ("model", "prompt", "provider"):  # in a scope, model and prompt rank their latency at once
                    _same_spend(q.spend_by(con, f, by), q.spend_by(con, f, by, raw=True), bucketed=False)
                _same(q.failure_totals(con, f), q.failure_totals(con, f, raw=True))


NOWS = (datetime(2024, 4, 1, tzinfo=timezone.utc), datetime(2024, 5, 20, tzinfo=timezone.utc),
        datetime(2030, 1, 1, tzinfo=timezone.utc))


def _insight(calls: list[dict], draw) -> list[dict]:
    """What insight writes on a call (a verdict, what a miss lost, what a write cost and when its
    life ends), and now and then an unknown token count."""
    for call in calls:
        verdict = draw(st.sampled_from(VERDICTS)) if call["settled"] else None
        call["cache_verdict"] = verdict
        call["cache_miss_micros"] = draw(st.sampled_from([None, 0, 1234, 99])) if verdict not in (None, "hit") else None
        call["cache_region"] = draw(st.sampled_from([None, "system block 0", "tool list"])) if verdict else None
        if call["cache_write_tokens"]:
            call["cache_write_micros"] = draw(st.sampled_from([None, 375, 1_000_001]))
            life = draw(st.sampled_from([None, timedelta(minutes=5), timedelta(days=30)]))
            call["cache_expires_at"] = (None if life is None
                                        else (datetime.fromisoformat(call["started_at"]) + life).isoformat())
        if draw(st.integers(0, 9)) == 0:
            call[draw(st.sampled_from(["input_tokens", "cache_read_tokens", "output_tokens"]))] = None
    return calls


moments = st.one_of(
    st.dates(date(2024, 4, 28), date(2024, 6, 12)),
    st.builds(lambda day: datetime.combine(day, time(), timezone.utc), st.dates(date(2024, 4, 28), date(2024, 6, 12))),
    st.datetimes(datetime(2024, 4, 28), datetime(2024, 6, 12), timezones=st.just(timezone.utc)),
)
filter_sets = st.builds(
    q.Filters,
    date_from=st.none() | moments,
    date_to=st.none() | st.dates(date(2024, 4, 28), date(2024, 6, 12)),
    providers=st.lists(st.sampled_from(sorted(set(fx.PROVIDERS.values()))), max_size=2, unique=True).map(tuple),
    models=st.lists(st.sampled_from(sorted(fx.PROVIDERS)), max_size=2, unique=True).map(tuple),
    prompt_ids=st.lists(st.sampled_from(PROMPTS), max_size=1).map(tuple),
    prompt_versions=st.lists(st.sampled_from(["1", "2"]), max_size=1).map(tuple),
    run_names=st.lists(st.sampled_from(["chat", "batch"]), max_size=1).map(tuple),
    tags=st.lists(st.sampled_from(["tenant=acme", "user=u1"]), max_size=1).map(tuple),
    source=st.sampled_from(["all", "live", "replayed"]),
)


def _spool(folder: Path, name: str, rows: list[dict]) -> None:
    """Call records as a recorder spools them (another host's file: the ingest never deletes it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"otherhost-1-{name}.jsonl", "a", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({"kind": "call", "row": row}) + "\n")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(store=stores(), data=st.data(), filters=st.lists(filter_sets, min_size=1, max_size=4),
       tiers=st.booleans())
def test_every_rollup_figure_is_the_raw_one(blank_store, store, data, filters, tiers):
    calls, runs, compactions = store
    rows = _insight(fx.call_rows(calls), data.draw)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=3)))
    batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)])]
    again = data.draw(st.lists(st.sampled_from(rows), max_size=4)) if rows else []  # written twice: counted once
    specs = fx.SPECS if tiers else {**fx.SPECS, "beta": fx.BETA.model_copy(update={"long_context": []})}
    with tempfile.TemporaryDirectory() as folder:
        db, spool = Path(folder) / "random.duckdb", Path(folder) / "spool"
        shutil.copyfile(blank_store, db)
        with open_store(db) as con:
            write_rows(con, "model", [{"price_source": f"{s.id}@{s.as_of.isoformat()}", "id": s.id,
                                       "provider": s.provider, "spec": s.model_dump_json()} for s in specs.values()])
            write_rows(con, "run", fx.run_rows(fx.call_rows(calls), runs))
            write_rows(con, "run_tag", [{"run_id": r[0], "key": k, "value": v} for r in runs for k, v in r[6].items()])
        # compactions before, between and after the calls of their runs; some reported again, replaced
        # their money in the currencies of the calls it was paid on (none stored: dollars)
        currencies = st.sampled_from([None, "USD", "EUR"])
        compaction_rows = [{"compaction_id": cid, "run_id": run, "occurred_at": fx._at(m).isoformat(),
                            "outcome": outcome, "tokens_before": before, "tokens_after": after, "cost_micros": cost,
                            "source": data.draw(st.sampled_from([None, "reported", "inferred"])),
                            "summary_currency": data.draw(currencies),
                            "recache_cost_micros": data.draw(st.sampled_from([None, 0, 375, 1_000_001])),
                            "recache_currency": data.draw(currencies)}
                           for cid, run, m, outcome, before, after, _, _, cost in compactions]
        at = [data.draw(st.integers(0, len(batches))) for _ in compaction_rows]
        written: list[dict] = []
        for index, batch in enumerate([*batches, []]):
            with open_store(db) as con:
                for row, where in zip(compaction_rows, at):
                    if where == index or (where < index and data.draw(st.integers(0, 3)) == 0):
                        write_rows(con, "compaction", [{**row, "outcome": data.draw(st.sampled_from(["ok", "error"]))}])
                # reads of writes already stored (insight names only those), some read again
                read = data.draw(st.lists(st.sampled_from(written), max_size=3)) if written else []
                write_rows(con, "cache_read", [{"call_id": call["call_id"], "read_by": "later"} for call in read])
            if not batch:
                continue
            if index % 2:
                with open_store(db) as con:
                    write_rows(con, "call", batch)
            else:  # the ingest's own path: a spool file, read from the offset it reached
                _spool(spool, "0000000a", batch)
                ingest_spools(db, spool)
            written += batch
        _spool(spool, "0000000b", again)
        ingest_spools(db, spool)
        q.read(db, None, lambda con: check_rollup(con, filters))
        copied = Path(folder) / "copied.duckdb"
        copy_store(db, copied)
        q.read(copied, None, lambda con: check_rollup(con, filters[:1]))


def test_the_migration_fills_the_rollup_from_the_calls_stored(tmp_path):
    db = tmp_path / "older.duckdb"
    before = next(number for number, (name, _) in enumerate(MIGRATIONS) if name.endswith("_rollup_daily_calls"))
    con = duckdb.connect(str(db))
    try:
        migrate(con, target=before)  # a store of the version before the rollup, with calls in it
        rows = fx.call_rows()
        for index, row in enumerate(rows):  # judged as insight would, a verdict each
            row["cache_verdict"] = VERDICTS[index % len(VERDICTS)] if row["settled"] else None
            row["cache_miss_micros"] = 700 + index if row["cache_verdict"] == "cold" else None
        frame = pl.DataFrame(rows)
        con.register("older", frame.to_arrow())
        con.execute("INSERT INTO calls BY NAME SELECT * FROM older")
        migrate(con)
        for spec in rollup.ROLLUPS:
            assert_frame_equal(_rollup_rows(con, "stored", spec), _rollup_rows(con, "calls", spec))
            assert rollup.whole(con, spec)
            if spec.of == "calls":
                assert con.sql(f"SELECT sum(calls) FROM {spec.table}").fetchall()[0][0] == len(fx.CALLS)
    finally:
        con.close()


def test_a_filter_the_rollup_cannot_answer_reads_the_calls(dashboard_db):
    def work(con):
        return {f: rolled_up(con, f) for f in (
            q.Filters(), q.Filters(date_from=date(2024, 5, 2), models=("alpha",), source="live"),
            q.Filters(run_names=("chat",)), q.Filters(tags=("env=prod",)),
            q.Filters(date_from=datetime(2024, 5, 1, 12, tzinfo=timezone.utc)))}

    assert list(q.read(dashboard_db, None, work).values()) == [True, True, False, False, False]


def test_calls_written_around_the_ingest_turn_the_rollup_off(tmp_path):
    db = fx.build(tmp_path / "wb.duckdb", evals=False)
    with open_store(db) as con:
        con.execute("INSERT INTO calls (call_id, provider, model_served, settled, replayed, cost_micros, started_at) "
                    "VALUES ('stray', 'openai', 'alpha', true, false, 5, TIMESTAMPTZ '2024-05-01 10:00:00+00')")

    def work(con):
        return rolled_up(con, q.Filters()), q.spend_cube(con, q.Filters()), q.spend_cube(con, q.Filters(), raw=True)

    rolled, cube, raw = q.read(db, None, work)
    assert not rolled
    _same(cube, raw)
    assert cube["calls"].sum() == len(fx.CALLS) + 1



def _written(call_id: str, model: str, day: int) -> dict:
    """A judged cache write of 2024-05-`day`."""
    return {"call_id": call_id, "provider": "openai", "model_served": model, "settled": True, "currency": "USD",
            "cache_write_tokens": 100, "cache_write_micros": 7, "cache_verdict": "cold",
            "started_at": f"2024-05-0{day}T10:00:00+00:00"}


def _read(call_id: str) -> dict:
    return {"call_id": call_id, "first_read_at": "2024-05-09T00:00:00+00:00", "read_by": "later"}


def test_a_read_counts_with_its_writers_keys_whether_the_writer_came_in_its_batch_or_an_earlier_one(
        blank_store, tmp_path):
    """The reads' rollup is the reads' own aggregate whatever batch wrote each writer: the read's own
    batch (the ingest's known-new write), an earlier one, none (null keys); a read stored already,
    written again, is counted once (`write_rows`)."""
    db = tmp_path / "wb.duckdb"
    shutil.copyfile(blank_store, db)
    with open_store(db) as con:
        commit_frames(con, {"call": ingest_frame(con, "calls", [_written("w1", "alpha", 1), _written("w2", "beta", 2)])},
                      {}, [], known_new=True)
        commit_frames(con, {"call": ingest_frame(con, "calls", [_written("w3", "alpha", 3)]),
                            "cache_read": ingest_frame(con, "cache_reads", [_read("w3"), _read("w1"), _read("gone")])},
                      {}, [], known_new=True)
        write_rows(con, "cache_read", [_read("w1"), _read("w2")])
        assert con.sql(f"SELECT sum(calls), sum(writes) FROM {rollup.READS.table}").fetchall() == [(4, 3)]
        assert con.sql(f"SELECT model FROM {rollup.READS.table} WHERE day_n IS NULL").fetchall() == [(None,)]
        assert_frame_equal(_rollup_rows(con, "stored", rollup.READS), _rollup_rows(con, "calls", rollup.READS))


class _Profiled:
    """A connection that keeps, per statement, the tables DuckDB scanned, how, and the rows each scan gave."""

    def __init__(self, con: duckdb.DuckDBPyConnection, folder: Path) -> None:
        self.con, self.path, self.scans = con, folder / "profile.json", []
        con.execute("PRAGMA enable_profiling = 'json'")
        con.execute(f"PRAGMA profiling_output = '{self.path}'")

    def execute(self, statement, *args):
        result = self.con.execute(statement, *args)
        nodes = json.loads(self.path.read_text()).get("operator", [])
        while nodes:
            node = nodes.pop()
            nodes += node.get("children", [])
            info = node.get("extra_info", {})
            if info.get("Table"):
                self.scans.append((info["Table"].split(".")[-1], info.get("Type"), node["intermediate_rows"]))
        return result

    def __getattr__(self, name: str):
        return getattr(self.con, name)


def test_a_batch_finds_its_stored_calls_and_its_reads_writers_without_reading_every_stored_call(
        blank_store, tmp_path):
    """Ids are random, so a join of a batch's few ids (more than DuckDB's 50 it looks up by default) to
    every stored one read them all, batch after batch (the cost grew with the store: 44 ms a batch of
    300 reads at 1M calls): the fold looks them up in the key's index."""
    db = tmp_path / "wb.duckdb"
    shutil.copyfile(blank_store, db)
    with open_store(db) as con:
        write_rows(con, "call", [_written(f"w{index:05}", "alpha", 1 + index % 3) for index in range(3000)])
        write_rows(con, "cache_read", [_read(f"w{index:05}") for index in range(0, 3000, 2)])
        profiled = _Profiled(con, tmp_path)
        con.execute("BEGIN TRANSACTION")
        for kind, rows in (("call", [_written("w00001", "alpha", 1), _written("new", "beta", 4)]),
                           ("cache_read", [*(_read(f"w{index:05}") for index in range(1, 121)), _read("new")])):
            table = TABLES[kind][0]
            con.register("_batch", ArrowStream(ingest_frame(con, table, rows)))  # as `write_frame` folds a batch
            if kind == "call":
                rollup.add_calls(profiled, "_batch", only_new=True)
            else:
                rollup.add_reads(profiled, "_batch")
            con.execute(f"INSERT OR IGNORE INTO {table} BY NAME SELECT * FROM _batch")
        con.execute("COMMIT")
        stored = [(kind, rows) for table, kind, rows in profiled.scans if table in ("calls", "cache_reads")]
        assert stored and all(kind == "Index Scan" and rows <= 121 for kind, rows in stored), stored
        con.execute("PRAGMA disable_profiling")
        assert con.sql(f"SELECT sum(calls) FROM {rollup.READS.table}").fetchall() == [(1500 + 60 + 1,)]


PART_FILTERS = (
    q.Filters(providers=("anthropic",)), q.Filters(date_from=date(2024, 5, 2), models=("alpha",), source="live"),
    q.Filters(run_names=("chat-app",)), q.Filters(tags=("env=dev",), prompt_ids=("summarize",)),
    q.Filters(run_names=("batch",), source="replayed"), q.Filters(providers=("nobody",)),
)


def _frames_equal(shared: dict[str, pl.DataFrame], own: dict[str, pl.DataFrame]) -> None:
    assert shared.keys() == own.keys()
    for name in own:
        assert_frame_equal(shared[name], own[name], check_exact=True)


def test_a_pages_parts_given_the_run_sets_read_once_show_what_each_part_computing_them_shows(dashboard_db):
    """A page made of several reads (the Overview's headline and tables, each on its own connection)
    takes the run sets `run_sets` read once; every page's figures are then those of the page that
    computes its sets itself, and the sets are exactly the runs the filters select."""
    with open_store(dashboard_db, read_only=True) as con:
        for f in PART_FILTERS:
            sets = q.run_sets(con, f)
            assert set(sets) == {name for name, wanted in (("_wb_sel_runs", f.run_level),
                                                           ("_wb_hit_runs", f.call_level)) if wanted}
            if f.call_level:
                assert sorted(sets["_wb_hit_runs"]["run_id"].to_list()) == _hit_runs(con, f, rolled=False)
            for page, read in q.PAGES.items():
                kwargs = {"run_id": "R2"} if page == "run_explorer" else {}
                own = read(con, f, **kwargs)
                part = con.cursor()  # another connection: none of `con`'s temp tables
                try:
                    with scope(part, f, sets):
                        _frames_equal(read(part, f, **kwargs), own)
                finally:
                    part.close()
            shared = {}
            for part_of in (q.overview_headline, lambda con, f: q.overview_tables(con, f, "run", 3)):
                part = con.cursor()
                try:
                    with scope(part, f, sets):
                        shared.update(part_of(part, f))
                finally:
                    part.close()
            _frames_equal(shared, {**q.overview_headline(con, f), **q.overview_tables(con, f, "run", 3)})


def test_sets_read_for_other_filters_are_not_taken(dashboard_db):
    """A scope given run sets that are not those its filters need computes its own."""
    with open_store(dashboard_db, read_only=True) as con:
        f = q.Filters(providers=("anthropic",), run_names=("chat-app",))
        wrong = q.run_sets(con, q.Filters(providers=("anthropic",)))  # no run-name set in it
        part = con.cursor()
        try:
            with scope(part, f, wrong):
                _frames_equal(q.failures_page(part, f), q.failures_page(con, f))
        finally:
            part.close()


def test_the_overviews_model_and_prompt_latency_is_ranked_in_one_read_of_the_calls_within_a_scope(dashboard_db):
    """Within a page's scope, the Overview's breakdowns by model and by prompt rank the live calls the
    filters select once for both (picking them out of every call is most of each ranking's cost), and
    show what each breakdown read alone shows."""
    with open_store(dashboard_db, read_only=True) as con:
        for f in PART_FILTERS:
            ranked = mock.patch.object(ledger, "_q", wraps=ledger._q)
            with scope(con, f), ranked as read:
                shared = {by: q.spend_by(con, f, by) for by in ("model", "prompt")}
            rankings = [call for call in read.call_args_list if "quantile_cont" in call.args[2]]
            assert runs_rolled_up(con, f) and not ledger.latency_rolled_up(con, f)  # the sums from the rollup
            assert len(rankings) == 1
            _frames_equal(shared, {by: q.spend_by(con, f, by) for by in ("model", "prompt")})
            _frames_equal(shared, {by: q.spend_by(con, f, by, raw=True) for by in ("model", "prompt")})



def test_under_a_run_name_or_tag_the_overviews_breakdowns_regroup_its_spend_cube(dashboard_db):
    """Within a page's scope of a run name or tag, the spend cube reads the per-run rollup's rows of the
    selected runs once; the breakdowns by model and by prompt take their sums and main currency from it
    (picking those rows out of every run's is most of each read's cost), so the only read they add is
    their latency ranking; and they show what each breakdown read alone, and raw, shows."""
    from workbench.store.queries import _base

    with open_store(dashboard_db, read_only=True) as con:
        for f in (f for f in PART_FILTERS if f.run_level):
            with contextlib.ExitStack() as stack:
                stack.enter_context(scope(con, f))
                q.spend_cube(con, f)  # the headline's
                reads = [stack.enter_context(mock.patch.object(module, name, wraps=getattr(module, name)))
                         for module, name in ((_base, "_frame"), (_base, "_frame_exec"), (ledger, "_frame"))]
                shared = {by: q.spend_by(con, f, by) for by in ("model", "prompt")}
            assert runs_rolled_up(con, f) and not rolled_up(con, f)
            statements = [call.args[1] for read in reads for call in read.call_args_list]
            assert len(statements) == 1 and "quantile_cont" in statements[0], statements
            _frames_equal(shared, {by: q.spend_by(con, f, by) for by in ("model", "prompt")})
            _frames_equal(shared, {by: q.spend_by(con, f, by, raw=True) for by in ("model", "prompt")})
            for by in ("provider", "day", "week", "month"):  # the other keys the cube has
                assert_frame_equal(q.spend_by(con, f, by), q.spend_by(con, f, by, raw=True), check_exact=True)


def test_the_overviews_tables_read_after_its_headline_take_the_spend_cube_it_kept(dashboard_db):
    """The Overview as the dashboard reads it, its headline then its tables each on a connection of its
    own, given the run sets and the values the headline's scope computed (`scope`'s `kept`): under a
    run name or tag the tables read no per-run rollup row again (the spend cube is the headline's, a
    third of the tables' cost at 10M calls), and every figure is the one-read page's."""
    from workbench.store.queries import _base

    with open_store(dashboard_db, read_only=True) as con:
        for f in PART_FILTERS:
            sets, kept, shared, statements = q.run_sets(con, f), {}, {}, []
            for part_of in (q.overview_headline, q.overview_tables):
                part = con.cursor()  # another connection: none of `con`'s temp tables
                try:
                    with contextlib.ExitStack() as stack:
                        stack.enter_context(scope(part, f, sets, kept))
                        reads = [stack.enter_context(mock.patch.object(module, "_frame", wraps=module._frame))
                                 for module in (_base, ledger)]
                        shared.update(part_of(part, f))
                    statements.append([call.args[1] for read in reads for call in read.call_args_list])
                finally:
                    part.close()
            if f.run_level:
                assert any("call_run_rollup" in sql for sql in statements[0])
                assert not any("call_run_rollup" in sql for sql in statements[1]), statements[1]
            _frames_equal(shared, q.overview_page(con, f))


def test_the_overviews_run_totals_and_top_run_names_read_the_selected_runs_once(dashboard_db):
    """Under a run name, tag or call-level filter the Overview's run totals (headline) and top run names
    (tables) regroup one read of the runs the filters select, shared by the two parts on their own
    connections (`scope`'s `kept`): under a tag at 10,000,000 calls each read picked its runs out of
    every run. Their figures are the runs counted
    one by one, and the names those of the bills summed (`test_summed_bills_are_their_rows_summed`)."""
    from workbench.store.queries import _base

    with open_store(dashboard_db, read_only=True) as con:
        for f in (q.Filters(), *PART_FILTERS):
            sets, kept, reads = q.run_sets(con, f), {}, []
            out = {}
            for part_of in (q.run_totals, q.top_run_names):
                part = con.cursor()  # another connection, as the dashboard's two reads
                try:
                    with scope(part, f, sets, kept), mock.patch.object(_base, "_frame", wraps=_base._frame) as read:
                        out[part_of.__name__] = part_of(part, f)
                    reads += [call.args[1] for call in read.call_args_list]
                finally:
                    part.close()
            # with no run or call filter the totals are counted apart: the headline reads no bill
            assert len([sql for sql in reads if "FROM runs" in sql]) == (1 if f.run_level or f.call_level else 2), reads
            built = _Sql(f)
            runs = _frame(con, built.with_() + "SELECT parent_run_id IS NULL AS top, status FROM fr", built.params)
            top = runs.filter(pl.col("top"))
            expected = pl.DataFrame({"runs": [top.height],
                                     **{status: [top.filter(pl.col("status") == status).height]
                                        for status in ("failed", "ok", "running")},
                                     "nested_runs": [runs.height - top.height]})
            assert_frame_equal(out["run_totals"], expected, check_dtypes=False)
            assert out["top_run_names"]["runs"].sum() == top.height
            assert_frame_equal(out["top_run_names"], q.top_run_names(con, f), check_exact=True)


def test_the_top_runs_under_a_run_name_or_tag_are_read_among_the_costliest_runs_first(dashboard_db):
    """Under a run name, tag or call-level filter the top runs are looked for among the store's
    costliest runs first (picking the selected runs out of every run was most of the read at
    1,000,000 runs), and all the runs are read only when fewer than the runs shown were among them:
    either way the top runs of all the runs, whatever the share read first."""
    from workbench.store.queries import _base, spend

    with open_store(dashboard_db, read_only=True) as con:
        first_only = again = 0
        for f in (q.Filters(), q.Filters(run_names=("chat-app", "batch")), *PART_FILTERS):
            every = q.top_runs(con, f, limit=1000)
            for limit in (1, 2, 3):
                shown = every.filter(pl.col("run_id").is_in(every["run_id"].unique(maintain_order=True).head(limit)))
                for picked in (1, 2, 50):
                    with mock.patch.object(spend, "_PICKED_PER_SHOWN", picked), \
                            mock.patch.object(_base, "_frame", wraps=_base._frame) as read:
                        assert_frame_equal(q.top_runs(con, f, limit=limit), shown, check_exact=True)
                    statements = [call.args[1] for call in read.call_args_list]
                    first_only += len(statements) == 1 and f"LIMIT {picked * limit})" in statements[0]
                    again += len(statements) == 2
        assert first_only and again  # both ways taken: all found among the costliest, and not


def test_under_a_run_name_or_tag_cache_savings_and_write_fates_sum_per_run_rollups(tmp_path):
    """A run name or tag, which the daily rollups cannot answer: with no long-context price tier (a
    call's tier is its own), cache savings sum the selected runs' rows of `rollup.CACHE_RUNS` (at
    10,000,000 calls a sixth as many as their calls) instead of scanning every call, the write fates
    those of `RUN_WRITES` and `RUN_READS` instead of joining the calls with every cache read, inside
    a page's scope or not; and they show what the calls show."""
    from workbench.store.queries import _base

    db = fx.build(tmp_path / "wb.duckdb", evals=False)
    with open_store(db) as con:
        con.execute("UPDATE models SET spec = $spec WHERE id = 'beta'",
                    {"spec": fx.BETA.model_copy(update={"long_context": []}).model_dump_json()})
    by = ("prompt_id", "prompt_version", "model")
    with open_store(db, read_only=True) as con:
        calls = 0
        for f in (f for f in PART_FILTERS if f.run_level):
            with mock.patch.object(_base, "_frame", wraps=_base._frame) as reads:
                shown = q.cache_savings(con, f, by)
            statements = [call.args[1] for call in reads.call_args_list]
            assert [rollup.CACHE_RUNS.table in sql for sql in statements] == [True], statements
            _same(shown, q.cache_savings(con, f, by, raw=True))
            calls += shown["calls"].sum()
            for scoped in (False, True):
                with scope(con, f) if scoped else contextlib.nullcontext():
                    for now in NOWS:
                        with mock.patch.object(_base, "_frame", wraps=_base._frame) as reads:
                            fates = q.write_waste(con, f, now=now)
                        statements = [call.args[1] for call in reads.call_args_list]
                        assert [rollup.RUN_WRITES.table in sql and rollup.RUN_READS.table in sql
                                for sql in statements] == [True], statements
                        _same(fates, q.write_waste(con, f, raw=True, now=now))
                        calls += fates["writes"].sum()
        assert calls > 0


_TAG_PAIRS = st.tuples(st.sampled_from(["env", "a", "a=b", "team", ""]), st.sampled_from(["prod", "c", "b=c", "", "x y"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tagged=st.lists(st.lists(_TAG_PAIRS, max_size=3, unique_by=lambda pair: pair[0]), max_size=30),
       limit=st.integers(1, 6))
def test_the_sidebars_tags_are_the_most_common_ones_as_the_joined_text_counts_them(blank_store, tagged, limit):
    """The tag options are the `limit` most common `key=value` texts (ties by text), counted by the
    joined text: two pairs that join to the same text (`a=b` `c` and `a` `b=c`) are one option."""
    rows = [{"run_id": f"r{index}", "key": key, "value": value}
            for index, pairs in enumerate(tagged) for key, value in pairs]
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "tags.duckdb"
        shutil.copyfile(blank_store, db)
        with open_store(db) as con:
            write_rows(con, "run_tag", rows)
            counts: dict[str, int] = {}
            for row in rows:
                text = f"{row['key']}={row['value']}"
                counts[text] = counts.get(text, 0) + 1
            expected = sorted(sorted(counts, key=lambda text: (-counts[text], text))[:limit])
            assert q.filter_options(con, limit=limit)["tags"] == expected
