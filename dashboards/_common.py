"""What every page shares: where the store is, the filters (kept in the URL so a view can be
shared), cached reads that never hold the store open (cached until the store changes: a refresh
shows new data at once), and money and table formatting.

Recorded text (prompts, answers, model and run names, tags, errors, case ids) is shown as text,
never as markup: in tables, chart labels, widget options, `st.text` and `st.code`. Streamlit renders
titles, captions, alerts and even metric values as Markdown, where an image link in a prompt would
make every viewer's browser fetch it, and no escaping stops a URL from becoming a link there; only
values of our own (counts, amounts, the store's path, through `escaped()`) go into Markdown.

Money stays integer micro-minor units until it is shown: every amount is shown exact (`workbench.money.
format_amount`: sub-cent where it is sub-cent, the currency named), so rows add up to their totals;
charts divide to major units only to draw an axis; CSV downloads keep the integers beside the text."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import altair as alt
import polars as pl
import streamlit as st

from workbench.config import is_lake, load_settings
from workbench.errors import WorkbenchError
from workbench.money import MICROS_PER_MINOR, format_amount, format_costs, minor_digits
from workbench.store import queries as q

# file, title, icon: the navigation, in order
PAGES = [
    ("overview.py", "Overview", ":material/monitoring:"),
    ("prompt_cache.py", "Prompt cache", ":material/cached:"),
    ("compaction.py", "Compaction", ":material/compress:"),
    ("failures.py", "Failures", ":material/error:"),
    ("evals.py", "Evals", ":material/checklist:"),
    ("run_explorer.py", "Run explorer", ":material/account_tree:"),
]
CACHE_TTL_S = 600  # a cached read lives this long unless the store changes first (`store_state`)
LAKE_TTL_S = 5  # a lake has no file whose change shows a write: its reads are cached this long
_LIST_PARAMS = {"provider": "providers", "model": "models", "prompt": "prompt_ids", "version": "prompt_versions",
                "run": "run_names", "tag": "tags"}
_LABELS = {"providers": "Provider", "models": "Model", "prompt_ids": "Prompt", "prompt_versions": "Prompt version",
           "run_names": "Run name", "tags": "Tags (key=value, all must match)"}
_SOURCES = {"all": "Live and replayed", "live": "Live only", "replayed": "Replayed only"}


# -- the store -----------------------------------------------------------------------------------


def store_paths() -> tuple[str, str]:
    """The store and spool folder: WORKBENCH_DB (set by `workbench dashboard --db`), else settings."""
    settings = load_settings()
    return str(Path(settings.db).resolve()), str(Path(settings.resolved_spool_dir).resolve())


def store_state(db: str, spool: str) -> tuple:
    """Ingests what recorders have spooled, then names the store's state: the size, modification
    time and inode of its file and of its write-ahead log. Every write (an append to the log, a
    checkpoint rewriting the file and removing the log) changes one of them, so a read cached under
    the state it was made in is never stale. A lake's catalog may live elsewhere: its state is the
    current LAKE_TTL_S-second window."""
    q.ingest_pending(Path(db), Path(spool))
    if is_lake(db):
        return ("window", time.time() // LAKE_TTL_S)
    state = []
    for path in (db, f"{db}.wal"):
        try:
            found = os.stat(path)
            state.append((found.st_size, found.st_mtime_ns, found.st_ino))
        except OSError:
            state.append(None)
    return tuple(state)


# each takes the store's state as an argument only so that a new state is a new cache entry; the
# spools were ingested when the state was taken
@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=32)
def _options(db: str, state: tuple) -> dict:
    return q.read(db, None, q.filter_options)


# (db, state, filters) -> their run sets (`q.run_sets`) and the values their scopes computed (`q.scope`'s `kept`)
_RUN_SETS: dict[tuple, tuple[dict[str, pl.DataFrame], dict]] = {}
_RUN_SETS_KEPT = 8


def _with_run_sets(db: str, state: tuple, filters: q.Filters | None, fn: Callable):
    """`fn(con)` on a read of the store, within a scope of `filters` whose run sets (the runs a run
    name, a tag or a call-level filter selects) are computed once per filters and store state and
    shared by every read of that state, as are the values computed within its scopes (the spend
    cube): a page made of several reads (the Overview's headline and tables) pays for them once.
    Returns `fn`'s answer and whether the store holds no calls and no runs
    at all (counted on the same connection: a page's first read tells an empty store from an empty
    filter before anything is drawn from it)."""
    def work(con):
        counts = q.store_counts(con).row(0, named=True)
        return scoped(con), not counts["calls"] and not counts["runs"]

    def scoped(con):
        if filters is None or not (filters.run_level or filters.call_level):
            return fn(con)
        key = (db, state, filters)
        shared = _RUN_SETS.get(key)
        if shared is None:
            shared = q.run_sets(con, filters), {}
            while len(_RUN_SETS) >= _RUN_SETS_KEPT:
                _RUN_SETS.pop(next(iter(_RUN_SETS)), None)
            _RUN_SETS[key] = shared
        sets, kept = shared
        with q.scope(con, filters, sets, kept):
            return fn(con)

    return q.read(db, None, work)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=128)
def _page(page: str, db: str, state: tuple, filters: q.Filters, extra: tuple) -> tuple[dict[str, pl.DataFrame], bool]:
    scoped = filters if page != "evals" else None  # the evals page reads no run set
    return _with_run_sets(db, state, scoped, lambda con: q.PAGES[page](con, filters, **dict(extra)))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=64)
def _named(name: str, db: str, state: tuple, args: tuple) -> tuple[pl.DataFrame, bool]:
    filters = next((arg for arg in args if isinstance(arg, q.Filters)), None)
    return _with_run_sets(db, state, filters, lambda con: getattr(q, name)(con, *args))


def _guard(fn: Callable):
    """Run a read; turn a missing store or an unreadable one into guidance, not a traceback."""
    db, _ = store_paths()
    try:
        return fn()
    except q.StoreMissing:
        empty_store(db, missing=True)
    except WorkbenchError as exc:
        _forget_tiles(clear=True)
        st.error(f"**{exc.code}**: {escaped(exc.cause)}\n\n**Fix:** {escaped(exc.fix)}")
        if exc.code == "WB_STORE_LOCKED":
            st.button("Retry", key=f"retry-{exc.code}")
        st.stop()


def empty_store(db: str, missing: bool = False) -> None:
    _forget_tiles(clear=True)
    where = escaped(db)
    what = f"There is no store at {where} yet." if missing else f"The store at {where} holds no calls or runs yet."
    st.info(
        f"{what}\n\nFill it with the offline demo:\n\n```\nworkbench demo\n```\n\nor record your own app: give "
        "its SDK client `http_client=workbench.http_client()` (or call `workbench.instrument()`), wrap its work in "
        "`with workbench.run(\"name\"):`, and its calls appear here on refresh. To look at another store: "
        "`workbench dashboard --db PATH`."
    )
    st.stop()


def filter_choices() -> dict:
    """The values each filter can take (run names, `key=value` tags, models, ...), cached."""
    db, spool = store_paths()
    return _guard(lambda: _options(db, store_state(db, spool)))


def _unless_empty(read: tuple, db: str):
    answer, empty = read
    if empty:
        empty_store(db)
    return answer


def load_page(page: str, filters: q.Filters, **extra) -> dict[str, pl.DataFrame]:
    db, spool = store_paths()
    return _unless_empty(_guard(lambda: _page(page, db, store_state(db, spool), filters, tuple(sorted(extra.items())))),
                         db)


# (db, state, filters) -> the run the explorer showed when opened without one (the latest listed)
_LATEST: dict[tuple, str] = {}


def load_explorer(filters: q.Filters, run_id: str | None) -> dict[str, pl.DataFrame]:
    """The run explorer's read: `run_id`'s run, or without one the latest listed, in the one read that
    lists the runs. The URL then names that run, so a later run of the page asking for it (a refresh)
    of the same store and filters is given that same cached read, not a read of its own."""
    db, spool = store_paths()
    state = store_state(db, spool)
    key = (db, state, filters)
    if run_id and _LATEST.get(key) == run_id:
        run_id = None
    data = _unless_empty(_guard(lambda: _page("run_explorer", db, state, filters, (("run_id", run_id),))), db)
    if not run_id and data["choices"].height:
        while len(_LATEST) >= _RUN_SETS_KEPT:
            _LATEST.pop(next(iter(_LATEST)), None)
        _LATEST[key] = data["choices"]["run_id"][0]
    return data


def load(name: str, *args) -> pl.DataFrame:
    """One named query of `workbench.store.queries` that takes (con, *args)."""
    db, spool = store_paths()
    return _unless_empty(_guard(lambda: _named(name, db, store_state(db, spool), args)), db)


# -- the filters, in the URL ---------------------------------------------------------------------


def _parse_day(text: str | None) -> date | None:
    try:
        return date.fromisoformat(text) if text else None
    except ValueError:
        return None


def filters_from_params(params: dict[str, list[str]]) -> q.Filters:
    """`?from=2024-05-01&to=...&provider=a&provider=b&...&source=live` → Filters."""
    first = {key: (values[0] if values else None) for key, values in params.items()}
    source = first.get("source") or "all"
    return q.Filters(
        date_from=_parse_day(first.get("from")), date_to=_parse_day(first.get("to")),
        source=source if source in _SOURCES else "all",
        **{field: tuple(v for v in params.get(param, []) if v) for param, field in _LIST_PARAMS.items()},
    )


def params_of(filters: q.Filters) -> dict[str, list[str] | str]:
    out: dict[str, list[str] | str] = {}
    if filters.date_from:
        out["from"] = filters.date_from.isoformat()
    if filters.date_to:
        out["to"] = filters.date_to.isoformat()
    for param, field in _LIST_PARAMS.items():
        if getattr(filters, field):
            out[param] = list(getattr(filters, field))
    if filters.source != "all":
        out["source"] = filters.source
    return out


def _url_filters() -> q.Filters:
    return filters_from_params({key: st.query_params.get_all(key) for key in st.query_params.keys()})


# the sidebar's filter widgets, by key: their values are the filters from a visitor's first change on
_KEYS = {"dates": "filter_dates", **{field: f"filter_{field}" for field in _LABELS}, "source": "filter_source"}


def _as_filters(days, chosen: dict[str, tuple], source: str) -> q.Filters:
    days = tuple(d for d in (days if isinstance(days, (tuple, list)) else (days,)) if d)
    return q.Filters(date_from=days[0] if days else None, date_to=days[-1] if days else None,
                     source=source if source in _SOURCES else "all", **chosen)


def _chosen_filters() -> q.Filters:
    """The filters the sidebar's widgets hold (once a visitor changed one, before the URL follows),
    else the URL's (a first visit, a shared link)."""
    url, state = _url_filters(), st.session_state
    return _as_filters(state[_KEYS["dates"]] if _KEYS["dates"] in state else (url.date_from, url.date_to),
                       {field: tuple(state[_KEYS[field]] if _KEYS[field] in state else getattr(url, field))
                        for field in _LABELS},
                       state[_KEYS["source"]] if _KEYS["source"] in state else url.source)


def page_header(title: str, caption: str) -> q.Filters:
    """The page title, the navigation and the filters chosen; reads nothing. The page then reads and
    draws its headline and calls `filter_sidebar`: a browser builds the sidebar's widgets (a date
    picker, six multiselects, a radio) in about a second of CPU on a cold page, and shows the figures
    sent before them first."""
    st.session_state.pop(_TILES, None)  # a previous run's tiles are not this run's
    st.title(title)
    st.caption(caption)
    st.html(_STYLE)
    filters = _chosen_filters()
    _navigation(filters, store_paths()[0])
    return filters


def filter_sidebar(filters: q.Filters) -> None:
    """The filters in the sidebar below the navigation, holding `filters` (`page_header`'s), and the
    URL written to match them so a view can be shared. Stops the page with guidance when the store
    is missing."""
    _forget_tiles(clear=False)  # the headline is drawn (or cleared by the page) by now
    options = filter_choices()
    side = st.sidebar
    side.subheader("Filters")
    first, last = options.get("first_day"), options.get("last_day")
    side.date_input(
        "Dates (UTC)", value=tuple(d for d in (filters.date_from, filters.date_to) if d), min_value=None,
        help=f"The store spans {first} to {last}." if first else None, key=_KEYS["dates"],
    )
    for field, label in _LABELS.items():
        values = list(getattr(filters, field))
        choices = sorted(set(options.get(field, [])) | set(values))
        side.multiselect(label, choices, default=values, placeholder="all", key=_KEYS[field])
    side.radio("Calls", list(_SOURCES), format_func=_SOURCES.get, index=list(_SOURCES).index(filters.source),
               horizontal=False, key=_KEYS["source"])
    keep = {key: st.query_params.get_all(key) for key in ("run_id", "eval_run_id", "matrix_id", "case")
            if key in st.query_params}
    wanted = {**params_of(filters), **{key: values[0] for key, values in keep.items() if values}}
    if {key: st.query_params.get_all(key) for key in st.query_params.keys()} != {
        key: value if isinstance(value, list) else [value] for key, value in wanted.items()
    }:
        st.query_params.from_dict(wanted)


_TILES = "_headline_tiles"  # session key: this run's headline tiles, until their figures are drawn


class Tiles:
    """The headline's metric tiles. One placeholder metric (`…`, its label hidden) is drawn before
    the page's first read: a cold browser loads the metric's code (about ten modules) while the store
    is read, so the figures paint as soon as they arrive instead of queueing behind the modules of
    the widgets, charts and tables sent right after them. The first `tiles[i]` puts the row of
    columns (`rows`: tiles a row) in its place; `tiles[i].metric(...)` draws a figure. `clear()`
    removes it (a page that stops before its figures; guidance and errors do it)."""

    def __init__(self, *rows: int) -> None:
        self._slot = st.empty()
        self._slot.metric("loading", "…", label_visibility="hidden")
        self._rows = rows
        self._columns: list | None = None
        st.session_state[_TILES] = self

    def __getitem__(self, index: int):
        if self._columns is None:
            with self._slot.container():
                self._columns = [column for count in self._rows for column in st.columns(count)]
        return self._columns[index]

    def clear(self) -> None:
        self._slot.empty()


def _forget_tiles(clear: bool) -> None:
    tiles = st.session_state.pop(_TILES, None)
    if clear and tiles is not None:
        tiles.clear()


def _navigation(filters: q.Filters, db: str) -> None:
    with st.sidebar:
        for path, label, icon in PAGES:
            st.page_link(path, label=label, icon=icon, query_params=params_of(filters) or None)
        st.caption(f"Store: {escaped(db)} · a refresh shows new data"
                   + (f" within {LAKE_TTL_S}s" if is_lake(db) else ""))


# metric values wrap instead of being cut with an ellipsis (an exact sub-cent amount is long)
_STYLE = """<style>
[data-testid="stMetricValue"] [data-testid="stMarkdownContainer"], [data-testid="stMetricValue"] p {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
  overflow-wrap: anywhere; line-height: 1.15;
}
[data-testid="stMetricValue"] { font-size: 1.9rem; height: auto !important; }
</style>"""


# -- recorded text ---------------------------------------------------------------------------------

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def escaped(text: object) -> str:
    """A value of our own (a path, an error's cause) for a Markdown string, shown as itself: every
    ASCII punctuation mark backslash-escaped (CommonMark: an escaped mark is literal) and line breaks
    as spaces, so no image, emphasis, colour or formula comes out of it. Not for recorded text (a URL
    in it would still become a link) and never inside a code span."""
    return _PUNCTUATION.sub(r"\\\1", str(text)).replace("\r", " ").replace("\n", " ")


def prompt_label(prompt_id: str | None, version: str | None) -> str:
    """`ticket-classifier v1`; a bare number gets its `v` (`greet v2`); a call outside any prompt
    is `(no prompt)`."""
    if prompt_id is None:
        return "(no prompt)"
    if version is None:
        return prompt_id
    return f"{prompt_id} v{version}" if re.fullmatch(r"\d+(\.\d+)*", version) else f"{prompt_id} {version}"


def with_prompt_labels(frame: pl.DataFrame) -> pl.DataFrame:
    """`prompt_id` and `prompt_version` as one `prompt` column, where the id was."""
    if "prompt_id" not in frame.columns or "prompt_version" not in frame.columns:
        return frame
    labels = [prompt_label(i, v) for i, v in zip(frame["prompt_id"].to_list(), frame["prompt_version"].to_list())]
    at = frame.columns.index("prompt_id")
    out = frame.drop("prompt_id", "prompt_version")
    return out.insert_column(min(at, out.width), pl.Series("prompt", labels, dtype=pl.Utf8))


# -- money and tables ----------------------------------------------------------------------------


def money(micros: int | None, currency: str | None = "USD", unpriced: int = 0) -> str:
    """An exact amount; unpriced calls are named beside it, never counted as free; `–` for no figure."""
    if micros is None and not unpriced:
        return "–"
    return format_costs({} if micros is None else {currency or "USD": micros}, unpriced)


def bill_note(run: dict) -> str | None:
    """A stored bill in words (`workbench.Billed`): the exact cost, the bill rounded up once beside it,
    replayed calls apart with what they would have cost."""
    from workbench.capture.runs import Billed

    billed = Billed.of_row(run)
    return None if billed is None else str(billed)


def bill_money(run: dict) -> str:
    """A stored run's live money per currency its calls were priced in (`Billed.money`), exact, its
    unpriced calls named beside it; `no bill` for a run that made no call."""
    from workbench.capture.runs import Billed

    billed = Billed.of_row(run)
    return "no bill" if billed is None else format_costs(billed.costs(), billed.unpriced_calls)


def exact(micros: int | None, currency: str | None = "USD") -> str:
    return format_amount(micros, currency or "USD")


def money_by_currency(frame: pl.DataFrame, column: str = "cost_micros") -> str:
    """Exact totals of a frame with a row per currency, joined: a sum never mixes currencies."""
    return format_costs({row.get("currency") or "USD": row[column] for row in frame.iter_rows(named=True)})


def cost_parts(parts: list[dict] | None) -> dict[str, int]:
    """A stored list of {currency, cost_micros} (a query's money per currency) as `format_costs` takes it."""
    return {part["currency"]: part["cost_micros"] for part in parts or []}


def with_costs(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """The frame with each money-per-currency column (`summary_costs`) as text (`summary`), each
    currency apart (`format_costs`)."""
    return frame.with_columns(pl.Series(column.removesuffix("_costs"), [format_costs(cost_parts(parts))
                                                                         for parts in frame[column].to_list()],
                                        dtype=pl.Utf8) for column in columns).drop(columns)


def eval_costs(rows) -> tuple[dict[str, int], int]:
    """Stored eval rows' cost (migration 0020) per currency, and their unpriced calls: `cost_micros` in
    its `currency` where it is one figure, else each currency's money in `costs`. A row written before
    named no currency: dollars, as it was shown then."""
    import json

    costs: dict[str, int] = {}
    unpriced = 0
    for row in rows:
        parts = ({row.get("currency") or "USD": row["cost_micros"]} if row["cost_micros"] is not None
                 else json.loads(row.get("costs") or "{}"))
        for currency, micros in parts.items():
            costs[currency] = costs.get(currency, 0) + micros
        unpriced += row.get("unpriced_calls") or 0
    return costs, unpriced


def with_eval_cost(frame: pl.DataFrame) -> pl.DataFrame:
    """An eval table with its cost as text (`cost`, each row's currencies apart, `format_costs`) in place
    of the stored figure and its parts."""
    if frame.is_empty():
        return frame
    text = [format_costs(*eval_costs([row])) for row in frame.select("cost_micros", "currency", "costs", "unpriced_calls")
            .iter_rows(named=True)]
    return frame.drop("cost_micros", "costs", "unpriced_calls").with_columns(pl.Series("cost", text, dtype=pl.Utf8))


def major_units(micros: pl.Expr, currency: str | None = "USD") -> pl.Expr:
    """For a chart axis only: micro-minor units to major units (a float, drawn, never summed)."""
    return micros.cast(pl.Float64) / float(MICROS_PER_MINOR * 10 ** minor_digits(currency))


def compact(count: int | None) -> str:
    """12,400,000 → 12.4M: for a metric tile; the exact figure goes in its help or a table."""
    value = count or 0
    for size, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:,}"


def share(part: int | None, whole: int | None) -> str:
    return f"{100 * (part or 0) / whole:.1f}%" if whole else "–"


def formatted(frame: pl.DataFrame, money_columns: tuple[str, ...] = (), exact_columns: tuple[str, ...] = ()
              ) -> pl.DataFrame:
    """The frame plus each money column as currency text (`cost_micros` → `cost`); a total names
    the row's `unpriced_calls` beside its amount."""
    if frame.is_empty():
        return frame
    n = frame.height
    currencies = frame["currency"].to_list() if "currency" in frame.columns else ["USD"] * n
    out = frame
    for column in (*money_columns, *exact_columns):
        if column not in frame.columns:
            continue
        values = frame[column].to_list()
        # a cost names the calls it leaves out: `cost_micros` its `unpriced_calls`, `replayed_cost_micros` its own
        counted = column.replace("cost_micros", "unpriced_calls")
        unpriced = frame[counted].to_list() if counted != column and counted in frame.columns else [0] * n
        if column in exact_columns:
            text = [exact(v, c) if v is not None else "–" for v, c in zip(values, currencies)]
        else:
            text = [money(v, c, int(u or 0)) for v, c, u in zip(values, currencies, unpriced)]
        out = out.with_columns(pl.Series(column.removesuffix("_micros"), text, dtype=pl.Utf8))
    return out


# never in a table (the CSV keeps them): each amount names its currency (and a rounded total its
# unpriced calls, so `unpriced_calls` goes too where there is one)
_HIDDEN = ("currency", "priced_calls", "replayed_priced_calls")
# free text that would push the figures off screen: shown after them
_LONG_TEXT = ("error_message", "output", "url", "prompt_hash", "git_commit", "scores", "error", "tags", "tag_list")
_LABEL_TYPES = (pl.Utf8, pl.Categorical, pl.Date, pl.Datetime)


def display_order(frame: pl.DataFrame, amounts: list[str], leading: tuple[str, ...] | None = None,
                  hide: tuple[str, ...] = ()) -> list[str]:
    """A table's columns as shown: the run link, then the labels that name a row (`leading`, else
    the first three), then the amounts, then the counts, long text last: the cost is visible
    without scrolling sideways."""
    shown = [c for c in frame.columns if c not in hide and c not in _HIDDEN]
    link = ["run"] if "run" in shown else []
    if link:
        shown = [c for c in shown if c != "run_id"]  # the link shows it
    long = [c for c in shown if c in _LONG_TEXT]
    rest = [c for c in shown if c not in link and c not in long and c not in amounts]
    if leading is None:
        leading = tuple([c for c in rest if isinstance(frame.schema[c], _LABEL_TYPES)][:3])
    labels = [c for c in leading if c in rest]
    return [*link, *labels, *[a for a in amounts if a in shown], *[c for c in rest if c not in labels], *long]


def table(frame: pl.DataFrame, name: str, money_columns: tuple[str, ...] = ("cost_micros", "replayed_cost_micros"),
          exact_columns: tuple[str, ...] = (), hide: tuple[str, ...] = (), column_config: dict | None = None,
          height: int | None = None, leading: tuple[str, ...] | None = None) -> None:
    """A table with money shown exact in its currency right after the labels, prompts as `id version`,
    and a CSV download (integer micro-minor units and the raw columns kept)."""
    if frame.is_empty():
        st.caption("Nothing matches the filters.")
        return
    shown = formatted(frame, money_columns, exact_columns)
    amounts = [c.removesuffix("_micros") for c in (*money_columns, *exact_columns) if c in frame.columns]
    display = with_prompt_labels(shown.drop([f"{a}_micros" for a in amounts]))
    if leading is not None:
        leading = tuple("prompt" if c in ("prompt_id", "prompt_version") else c for c in leading)
    # the unpriced calls a shown cost names beside it (`cost` its `unpriced_calls`, `replayed_cost` its own)
    named = tuple(c.replace("cost_micros", "unpriced_calls") for c in money_columns if c in frame.columns and "cost_micros" in c)
    order = display_order(display, amounts, leading, (*hide, *named))
    config = {c: st.column_config.Column(width="medium") for c in order
              if isinstance(display.schema[c], pl.Utf8) and c not in amounts}
    config.update(column_config or {})
    st.dataframe(display.select(order), hide_index=True, column_config=config, height=height or "auto",
                 width="stretch")
    flat = shown.with_columns(pl.col(c).cast(pl.List(pl.Utf8)).list.join(", ") for c, dtype in shown.schema.items()
                              if isinstance(dtype, pl.List))
    st.download_button("Download CSV", flat.write_csv().encode(), file_name=f"{name}.csv", mime="text/csv",
                       key=f"csv-{name}")


def explorer_link_column() -> st.column_config.LinkColumn:
    return st.column_config.LinkColumn("run", display_text=r"run_id=(\w{0,12})", help="open in the Run explorer")


def with_explorer_links(frame: pl.DataFrame, column: str = "run_id") -> pl.DataFrame:
    """Adds a `run` column linking the row's run to the explorer page (`run_explorer?run_id=…`)."""
    if frame.is_empty() or column not in frame.columns:
        return frame
    return frame.with_columns(("run_explorer?run_id=" + pl.col(column)).alias("run")).select(
        ["run", *[c for c in frame.columns]])


def bar_chart(frame: pl.DataFrame, x: str, y: str, color: str | None, title: str, money_axis: bool = True,
              x_type: str = "T", currency: str | None = "USD") -> None:
    """A stacked bar chart; a money axis is drawn in major units with the exact text in the tooltip."""
    if frame.is_empty():
        return
    data = frame
    tooltip = [alt.Tooltip(f"{x}:{x_type}")]
    if color:
        tooltip.append(alt.Tooltip(f"{color}:N"))
    if money_axis:
        data = data.with_columns(
            major_units(pl.col(y), currency).alias("_amount"),
            pl.col(y).map_elements(lambda v: format_amount(v, currency or "USD"), return_dtype=pl.Utf8).alias("amount"),
        )
        y_field, y_title = "_amount", f"spend ({currency})"
        tooltip.append(alt.Tooltip("amount:N"))
        y_axis = alt.Axis()
    else:
        y_field, y_title = y, y.replace("_", " ")
        tooltip.append(alt.Tooltip(f"{y}:Q"))
        y_axis = alt.Axis(tickMinStep=1, format="d")  # a count: whole-number ticks only
    encoding = {"x": alt.X(f"{x}:{x_type}", title=x.replace("_", " ")),
                "y": alt.Y(f"{y_field}:Q", title=y_title, axis=y_axis), "tooltip": tooltip}
    if color:
        encoding["color"] = alt.Color(f"{color}:N", title=color.replace("_", " "))
    chart = alt.Chart(data).mark_bar().encode(**encoding).properties(
        title=title, height=260)
    st.altair_chart(chart, width="stretch")

