"""The shared part of the queries: filters, the SQL they add, the one read path."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

import duckdb
import polars as pl

from workbench.store import rollup

log = logging.getLogger(__name__)
T = TypeVar("T")

_MODEL = "coalesce(c.model_served, c.model_requested)"


class StoreMissing(Exception):
    """There is no store file (and nothing spooled to make one) at the path."""


@dataclass(frozen=True)
class Filters:
    """What every page can be narrowed by. Empty tuples and None mean "all"."""

    date_from: date | datetime | None = None  # a day (from its UTC midnight) or a moment
    date_to: date | None = None  # inclusive
    providers: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    prompt_ids: tuple[str, ...] = ()
    prompt_versions: tuple[str, ...] = ()
    run_names: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # "key=value"; every one must match
    source: Literal["all", "live", "replayed"] = "all"

    @property
    def call_level(self) -> bool:
        return bool(self.providers or self.models or self.prompt_ids or self.prompt_versions or self.source != "all")

    @property
    def run_level(self) -> bool:
        return bool(self.run_names or self.tags)


@dataclass
class _Sql:
    """A query's WITH clause, built from the filters, and its named parameters."""

    filters: Filters
    params: dict[str, Any] = field(default_factory=dict)

    def _dates(self, column: str) -> list[str]:
        out = []
        if self.filters.date_from is not None:  # a day starts at UTC midnight; a moment is itself
            since = self.filters.date_from
            self.params["date_from"] = since if isinstance(since, datetime) else datetime.combine(since, time(), timezone.utc)
            out.append(f"{column} >= $date_from")
        if self.filters.date_to is not None:
            self.params["date_to"] = datetime.combine(self.filters.date_to + timedelta(days=1), time(), timezone.utc)
            out.append(f"{column} < $date_to")
        return out

    def day_predicates(self) -> list[str]:
        """The date filters on the rollup's day numbers (whole UTC days: see `rolled_up`)."""
        out = []
        if self.filters.date_from is not None:
            self.params["day_from"] = _day_number(self.filters.date_from)
            out.append("c.day_n >= $day_from")
        if self.filters.date_to is not None:
            to = self.filters.date_to  # its date, as the raw filter takes it
            self.params["day_to"] = _day_number(date(to.year, to.month, to.day))
            out.append("c.day_n <= $day_to")
        return out

    def call_predicates(self, model: str = _MODEL) -> list[str]:
        f, out = self.filters, []
        for name, values, column in (
            ("providers", f.providers, "c.provider"), ("models", f.models, model),
            ("prompt_ids", f.prompt_ids, "c.prompt_id"), ("prompt_versions", f.prompt_versions, "c.prompt_version"),
        ):
            if values:
                self.params[name] = list(values)
                out.append(f"list_contains(${name}, {column})")
        if f.source != "all":
            out.append(f"coalesce(c.replayed, false) = {'true' if f.source == 'replayed' else 'false'}")
        return out

    def _selected_runs(self) -> str:
        """The runs a name or tag picks, and every run inside them."""
        f, preds = self.filters, []
        if f.run_names:
            self.params["run_names"] = list(f.run_names)
            preds.append("list_contains($run_names, name)")
        for index, tag in enumerate(f.tags):
            key, _, value = tag.partition("=")
            self.params[f"tag_k{index}"], self.params[f"tag_v{index}"] = key, value
            preds.append(f"run_id IN (SELECT run_id FROM run_tags WHERE key = $tag_k{index} AND value = $tag_v{index})")
        # the runs inside them are found among the runs that have a parent alone (a tenth of the runs
        # at 10M calls), taken out once: each level of the recursion scanned and joined every run
        return (
            f"sel_top AS MATERIALIZED (SELECT run_id FROM runs WHERE {' AND '.join(preds)}),\n"
            "sel_kids AS MATERIALIZED (SELECT run_id, parent_run_id FROM runs WHERE parent_run_id IS NOT NULL),\n"
            "sel_inner(run_id) AS (SELECT run_id FROM sel_kids WHERE parent_run_id IN (SELECT run_id FROM sel_top) "
            "UNION SELECT k.run_id FROM sel_kids k JOIN sel_inner i ON k.parent_run_id = i.run_id),\n"
            "sel_runs AS (SELECT run_id FROM sel_top UNION SELECT run_id FROM sel_inner)"
        )

    def _hit_runs(self, rolled: bool = False) -> str:
        """The runs holding a call that matches the call-level filters, and every run around them
        (`rolled`: read from the per-run rollup, `rollup.RUNS`, instead of the calls)."""
        source, model = ("call_run_rollup", "c.model") if rolled else ("calls", _MODEL)
        return (f"hit_runs(run_id) AS (SELECT DISTINCT c.run_id FROM {source} c WHERE c.run_id IS NOT NULL AND "
                + " AND ".join(self.call_predicates(model))
                + " UNION SELECT r.parent_run_id FROM runs r JOIN hit_runs h ON r.run_id = h.run_id"
                " WHERE r.parent_run_id IS NOT NULL)")

    def with_(self, prepared: bool = False, rolled: bool = False, runs: str = "runs") -> str:
        """`WITH fc (filtered calls), fr (filtered runs), fx (filtered compactions)`. `prepared`: the
        run sets are already in the temp tables `_wb_sel_runs` and `_wb_hit_runs` (see `scope`);
        `rolled`: the runs a call-level filter keeps are read from the per-run rollup; `runs`: the
        relation of `runs` rows `fr` filters (a few picked first, see `spend.top_runs`)."""
        f = self.filters
        ctes = []
        sel, hit = ("_wb_sel_runs", "_wb_hit_runs") if prepared else ("sel_runs", "hit_runs")
        call_preds = self._dates("c.started_at") + self.call_predicates()
        run_preds = self._dates("r.started_at")
        x_preds = self._dates("x.occurred_at")
        if f.run_level:
            if not prepared:
                ctes.append(self._selected_runs())
            call_preds.append(f"c.run_id IN (SELECT run_id FROM {sel})")
            run_preds.append(f"r.run_id IN (SELECT run_id FROM {sel})")
            x_preds.append(f"x.run_id IN (SELECT run_id FROM {sel})")
        if f.call_level:
            if not prepared:
                ctes.append(self._hit_runs(rolled))
            run_preds.append(f"r.run_id IN (SELECT run_id FROM {hit})")
            x_preds.append(f"x.run_id IN (SELECT run_id FROM {hit})")
        ctes.append(f"fc AS (SELECT * FROM calls c WHERE {' AND '.join(call_preds) or 'true'})")
        ctes.append(f"fr AS (SELECT * FROM {runs} r WHERE {' AND '.join(run_preds) or 'true'})")
        ctes.append(f"fx AS (SELECT * FROM compactions x WHERE {' AND '.join(x_preds) or 'true'})")
        return "WITH RECURSIVE " + ",\n".join(ctes) + "\n"


_SCOPES: dict[int, Filters] = {}
_SCOPED: dict[int, dict[str, Any]] = {}  # values computed once within a scope, by name


def _run_set_queries(con: duckdb.DuckDBPyConnection, f: Filters) -> tuple[dict[str, str], dict[str, Any]]:
    """The run sets filters `f` need (temp table name -> its query) and the queries' parameters."""
    built, queries = _Sql(f), {}
    if f.run_level:
        queries["_wb_sel_runs"] = f"WITH RECURSIVE {built._selected_runs()} SELECT run_id FROM sel_runs"
    if f.call_level:
        queries["_wb_hit_runs"] = (f"WITH RECURSIVE {built._hit_runs(rollup.whole(con, rollup.RUNS))} "
                                   "SELECT run_id FROM hit_runs")
    return queries, built.params


def run_sets(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, pl.DataFrame]:
    """The run ids of the run sets filters `f` need, to hand to `scope` on another connection to the
    same store state: a page whose parts are separate reads computes them once."""
    queries, params = _run_set_queries(con, f)
    return {name: _frame(con, sql, params) for name, sql in queries.items()}


class _ArrowStream:
    """A frame that DuckDB scans through the Arrow C stream interface alone (a polars frame itself
    would be converted through pyarrow, ~0.5 s to import)."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self._frame = frame

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._frame.__arrow_c_stream__(requested_schema)


@contextmanager
def scope(con: duckdb.DuckDBPyConnection, f: Filters, sets: dict[str, pl.DataFrame] | None = None,
          kept: dict[str, Any] | None = None) -> Iterator[None]:
    """Within it, the queries on `con` with filters `f` read the run sets those filters need from
    temp tables computed once, instead of each query computing them again (a page runs several);
    `sets`: those sets as `run_sets` read them for `f` from the same store state, taken as they are;
    `kept`: the values `scoped` computed within earlier scopes of `f` on the same store state (a page's
    other read: the Overview's tables regroup the spend cube its headline read), taken as they are,
    and this scope's own added to it. Within a scope of the same filters, another one changes nothing."""
    if in_scope(con, f):
        yield
        return
    needed = {name for name, wanted in (("_wb_sel_runs", f.run_level), ("_wb_hit_runs", f.call_level)) if wanted}
    given = sets is not None and set(sets) == needed
    queries, params = (dict.fromkeys(needed), {}) if given else _run_set_queries(con, f)
    for name, sql in queries.items():
        if sql is None:
            ids = _ArrowStream(sets[name].select("run_id"))  # noqa: F841 - scanned by name below
            con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT run_id FROM ids")
        else:
            _frame_exec(con, f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}", params)
    _SCOPES[id(con)] = f
    if kept is not None:
        _SCOPED[id(con)] = kept
    try:
        yield
    finally:
        _SCOPES.pop(id(con), None)
        _SCOPED.pop(id(con), None)


def in_scope(con: duckdb.DuckDBPyConnection, f: Filters) -> bool:
    """Whether `con` is within a `scope` of filters `f`."""
    return _SCOPES.get(id(con)) == f


def scoped(con: duckdb.DuckDBPyConnection, f: Filters, name: str, compute: Callable[[], T]) -> T:
    """`compute()`, once per `scope` of `con` and `f` (a page's queries share it); outside one, every time."""
    if not in_scope(con, f):
        return compute()
    values = _SCOPED.setdefault(id(con), {})
    if name not in values:
        values[name] = compute()
    return values[name]


def _frame_exec(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> None:
    used = set(re.findall(r"\$(\w+)", sql))
    con.execute(sql, {key: value for key, value in params.items() if key in used} or None)


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None) -> pl.DataFrame:
    used = set(re.findall(r"\$(\w+)", sql))
    params = {key: value for key, value in (params or {}).items() if key in used}
    # read through the Arrow C stream interface: `.pl()` imports pyarrow and numpy (~0.5 s of CPU)
    return pl.DataFrame(con.sql(sql, params=params or None))


def _q(con: duckdb.DuckDBPyConnection, f: Filters, body: str, extra: dict[str, Any] | None = None,
       runs: str = "runs") -> pl.DataFrame:
    built = _Sql(f)
    prepared = in_scope(con, f)
    rolled = f.call_level and not prepared and rollup.whole(con, rollup.RUNS)
    head = built.with_(prepared=prepared, rolled=rolled, runs=runs)
    return _frame(con, head + body, {**built.params, **(extra or {})})


def _whole_day(moment: date | datetime) -> bool:
    """Whether `moment` is a day or a UTC midnight (where a rollup day starts)."""
    if not isinstance(moment, datetime):
        return True
    return moment.tzinfo is not None and moment.astimezone(timezone.utc).timetz().replace(tzinfo=None) == time()


def _day_number(moment: date | datetime) -> int:
    day = moment.astimezone(timezone.utc).date() if isinstance(moment, datetime) else moment
    return (day - date(1970, 1, 1)).days


def rolled_up(con: duckdb.DuckDBPyConnection, f: Filters) -> bool:
    """Whether the calls `f` selects can be summed from the daily rollup (`workbench.store.rollup`):
    no run name or tag, dates that are whole UTC days, and a rollup that counts every stored call."""
    if f.run_level or (f.date_from is not None and not _whole_day(f.date_from)):
        return False
    return scoped(con, f, "rollup_whole", lambda: rollup.whole(con))


def _rq(con: duckdb.DuckDBPyConnection, f: Filters, body: str, extra: dict[str, Any] | None = None) -> pl.DataFrame:
    """`body` over `fc`: the rollup's rows of the calls `f` selects (each a sum of calls; see `rolled_up`)."""
    built = _Sql(f)
    preds = built.day_predicates() + built.call_predicates(model="c.model")
    head = f"WITH fc AS (SELECT * FROM call_rollup c WHERE {' AND '.join(preds) or 'true'})\n"
    return _frame(con, head + body, {**built.params, **(extra or {})})


def runs_rolled_up(con: duckdb.DuckDBPyConnection, f: Filters) -> bool:
    """Whether the calls `f` selects can be merged per run from the per-run rollup (`rollup.RUNS`):
    dates that are whole UTC days and a rollup that counts every stored call (it has the run id, so
    a run name or tag filter reads it too)."""
    if f.date_from is not None and not _whole_day(f.date_from):
        return False
    return scoped(con, f, "runs_whole", lambda: rollup.whole(con, rollup.RUNS))


def _rrq(con: duckdb.DuckDBPyConnection, f: Filters, body: str, extra: dict[str, Any] | None = None,
         spec: rollup.Rollup = rollup.RUNS) -> pl.DataFrame:
    """`body` over `fc`: the rows of per-run rollup `spec` of the calls `f` selects (see `runs_rolled_up`).
    (A page reads `RUNS`' once: its spend cube, which the breakdowns beside it regroup.)"""
    built = _Sql(f)
    prepared, ctes = in_scope(con, f), []
    preds = built.day_predicates() + built.call_predicates(model="c.model")
    if f.run_level:
        if not prepared:
            ctes.append(built._selected_runs())
        preds.append(f"c.run_id IN (SELECT run_id FROM {'_wb_sel_runs' if prepared else 'sel_runs'})")
    ctes.append(f"fc AS (SELECT * FROM {spec.table} c WHERE {' AND '.join(preds) or 'true'})")
    return _frame(con, "WITH RECURSIVE " + ",\n".join(ctes) + "\n" + body, {**built.params, **(extra or {})})


_DAY = "(DATE '1970-01-01' + (epoch_us(c.started_at) // 86400000000)::INTEGER)"  # the UTC day
_COST = "sum(c.cost_micros)::BIGINT"
_LIVE = "NOT coalesce(c.replayed, false)"  # a call that was sent, and paid for


# -- the store as a whole ------------------------------------------------------------------------


def store_counts(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """How much the store holds, unfiltered: to tell an empty store from an empty filter."""
    return _frame(con, "SELECT (SELECT count(*) FROM calls) AS calls, (SELECT count(*) FROM runs) AS runs, "
                  "(SELECT count(*) FROM compactions) AS compactions")


def quarantined_records(con: duckdb.DuckDBPyConnection, limit: int = 1000) -> pl.DataFrame:
    """Records the store could not take, newest first, with the reason (they are kept, not lost)."""
    return _frame(con, "SELECT quarantined_at, kind, reason, spool_file, line_offset, record FROM quarantine "
                  "ORDER BY quarantined_at DESC, quarantine_id LIMIT $limit", {"limit": limit})


def filter_options(con: duckdb.DuckDBPyConnection, limit: int = 500, raw: bool = False) -> dict[str, list]:
    """The values each filter can take, and the dates the store spans (from the rollup unless `raw`)."""
    rolled = not raw and rolled_up(con, Filters())
    model, day = ("c.model", "(DATE '1970-01-01' + c.day_n)") if rolled else (_MODEL, _DAY)
    calls = _frame(con, f"""
        SELECT list(DISTINCT c.provider ORDER BY c.provider) FILTER (WHERE c.provider IS NOT NULL) AS providers,
               list(DISTINCT {model} ORDER BY {model}) FILTER (WHERE {model} IS NOT NULL) AS models,
               list(DISTINCT c.prompt_id ORDER BY c.prompt_id) FILTER (WHERE c.prompt_id IS NOT NULL) AS prompt_ids,
               list(DISTINCT c.prompt_version ORDER BY c.prompt_version)
                   FILTER (WHERE c.prompt_version IS NOT NULL) AS prompt_versions,
               min({day}) AS first_day, max({day}) AS last_day
        FROM {'call_rollup' if rolled else 'calls'} c""").row(0, named=True)
    names = _frame(con, "SELECT name FROM runs WHERE name IS NOT NULL GROUP BY name ORDER BY count(*) DESC, name "
                   "LIMIT $limit", {"limit": limit})["name"].to_list()
    # grouped by key and value before they are joined: joining every row's text first cost ~0.2 s at a
    # million runs; grouped again by the joined text, as two pairs can join to one (`a=b` `c`, `a` `b=c`)
    tags = _frame(con, "SELECT tag FROM (SELECT key || '=' || value AS tag, count(*) AS n FROM run_tags "
                  "GROUP BY key, value) GROUP BY tag ORDER BY sum(n) DESC, tag LIMIT $limit",
                  {"limit": limit})["tag"].to_list()
    return {**{key: value or [] for key, value in calls.items()}, "run_names": sorted(names), "tags": sorted(tags)}


def ingest_pending(db: Path, spool_dir: Path | None, wait: bool = False) -> int:
    """Ingest what recorders have spooled (`wait`: behind another process that is ingesting; the
    dashboard never waits, a command does); never raises, but for a command (`wait`) the refused
    lock file that stops every ingestion (`WB_LOCK_UNSAFE`): its figures would leave out the spooled
    records with no word of why, run after run."""
    if spool_dir is None:
        return 0
    try:
        from workbench.store.ingest import ingest_spools

        return ingest_spools(Path(db), Path(spool_dir), wait=wait)
    except Exception as exc:  # noqa: BLE001 - reading must not fail because ingestion did
        if wait and getattr(exc, "code", None) == "WB_LOCK_UNSAFE":
            raise
        log.warning("could not ingest spools from %s: %s", spool_dir, exc)
        return 0


def read(db: Path | str, spool_dir: Path | str | None, fn: Callable[[duckdb.DuckDBPyConnection], T],
         wait_s: float = 5.0, ingest_wait: bool = False) -> T:
    """Ingest pending spools, open the store read-only, run `fn`, close. `StoreMissing` when there
    is no store file; `WorkbenchError` (WB_STORE_LOCKED, WB_STORE_INVALID) when it cannot be read."""
    from workbench.store.db import open_store, store_exists

    db = Path(db)
    ingest_pending(db, Path(spool_dir) if spool_dir else None, wait=ingest_wait)
    if not store_exists(db):
        raise StoreMissing(str(db))
    with open_store(db, read_only=True, wait_s=wait_s) as con:
        return fn(con)


