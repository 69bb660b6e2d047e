"""Insight at ingest: each batch of records gets its cache verdicts and inferred compactions before
it is written (`workbench.store.ingest` calls `derive`). Reads go through the named queries of
`workbench.store.queries.insight`; what it returns is frames, never SQL.

The batch's calls are judged on their lineages' timelines, from the cache state each lineage's
previous batch left (`workbench.insight.carried`), so the verdicts are those of one batch holding
all the traffic, whatever the batch sizes. A lineage with no state yet, or whose batch holds a call
older than its state, is judged by replaying the calls stored from the longest cache life the batch
asks for (5 minutes, an hour, a day) before its first call on. Prefixes that older entries left
(before the replayed window, or pruned from the state) are looked up once for the calls no entry in
the state explains as deep as they could have been (`expired`)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timezone

import orjson
import polars as pl

from workbench.insight import carried
from workbench.insight import compaction as compact
from workbench.insight.prefix import Fingerprint, fingerprint, region_values
from workbench.insight.prefix import row as prefix_row
from workbench.insight.verdicts import (CHANGED, COLD, Judged, Lineage, expire_older, minimum_tokens, older_wanted,
                                        order, price_write)
from workbench.models import ModelSpec
from workbench.store.frames import list_series
from workbench.store.queries import insight as q

_ALIKE = 0.9  # a changed lead region across conversations counts when this much of its text is unchanged
_DIFF_CONTEXT = 40
_CALL_COLUMNS = ("cache_verdict", "cache_region", "cache_miss_micros", "cache_entry_call_id", "cache_write_micros",
                 "cache_expires_at")
# the calls' columns a call is judged by (`_judged`, `_from_body`, its lineage): rows of these only,
# not of every column of the table
_JUDGED_COLUMNS = ("call_id", "run_id", "wire", "provider", "model_requested", "model_served", "price_source", "settled",
                   "input_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens", "output_tokens",
                   "cost_micros", "started_at")
# ... and those the compactions read
_OUTPUT_COLUMNS = ("call_id", "run_id", "settled", "started_at", "cost_micros", "model_served", "model_requested",
                   "currency")


def _us(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return int(value.timestamp() * 1_000_000) if value.tzinfo else None


def _iso(micros: int | None) -> str | None:
    return None if micros is None else datetime.fromtimestamp(micros / 1_000_000, tz=timezone.utc).isoformat()


def _fingerprint_of(row: dict) -> Fingerprint:
    return Fingerprint(blocks=list(row["blocks"] or []), sizes=list(row["sizes"] or []), kinds=row["kinds"] or "",
                       marks=list(row["marks"] or []), explicit=bool(row["explicit"]), ttl_s=row["ttl_s"] or 300,
                       scope=row["scope"], lead=row["lead"] or 0, base=row["base"] or 0)


def _specs(con, frames) -> dict[str, ModelSpec]:
    rows = q.model_specs(con).rows()
    if "model" in frames:
        rows += frames["model"].select("price_source", "spec").rows()
    specs = {}
    for source, spec in rows:
        try:
            specs[source] = ModelSpec.model_validate_json(spec)
        except ValueError:
            continue
    return specs


def derive(con, frames: dict[str, pl.DataFrame]) -> tuple[dict[str, pl.DataFrame], dict[str, list[str]]]:
    """The batch's frames with the verdict columns filled, its prefixes' lineages, keys and diffs,
    and inferred compactions; and the stored rows they supersede (by kind)."""
    calls = frames.get("call")
    if calls is None or calls.is_empty():  # compactions an app reported apart from its traffic
        frames = dict(frames)
        return frames, _compactions(con, frames, {}, _Bodies(None), None) if "compaction" in frames else {}
    specs = _specs(con, frames)
    bodies = _Bodies(frames.get("call_body"))
    captured = {row["call_id"]: row for row in frames["call_prefix"].iter_rows(named=True)} if "call_prefix" in frames else {}
    batch: dict[str, dict] = {}
    for call in calls.select(_JUDGED_COLUMNS).iter_rows(named=True):
        prefix = captured.get(call["call_id"]) or _from_body(call, bodies.requests.get(call["call_id"]))
        if prefix is None:
            continue
        model = call["model_requested"] or call["model_served"]
        prefix["lineage"] = "|".join((call["provider"] or "", model or "", prefix["scope"] or "", prefix["session"] or ""))
        batch[call["call_id"]] = {**call, **prefix, "model": model, "clock": _us(prefix["clock_at"]) or _us(call["started_at"]),
                                  "started": _us(call["started_at"]) or 0}
    if not batch:
        frames = dict(frames)
        return frames, _compactions(con, frames, {}, bodies, None) if "compaction" in frames else {}
    minimums: dict[tuple[str | None, str | None], int] = {}
    by_lineage: dict[str, list[Judged]] = defaultdict(list)
    for row in batch.values():
        by_lineage[row["lineage"]].append(_judged(row, specs, minimums, judge=True))

    def history(lineages: list[str], since: int, runs: list[str] | None = None,
                blocks: list[int] | None = None) -> list[tuple[str, Judged]]:
        rows = q.lineage_history(con, lineages, carried.micros_time(since), runs, blocks).iter_rows(named=True)
        return [(row["lineage"], _judged(row, specs, minimums, judge=False)) for row in rows
                if row["call_id"] not in batch]

    states = carried.load(con, sorted(by_lineage), history)
    # a lineage with no state yet, or whose batch is not all later than its state, is replayed; calls
    # at the very instant of the state's latest (a clock of whole seconds, one start) are later
    replayed = sorted(lineage for lineage, calls in by_lineage.items() if lineage not in states
                      or min(order(call)[:2] for call in calls) < states[lineage].last[:2])
    since = None
    if replayed:
        first = min(call.clock for lineage in replayed for call in by_lineage[lineage])
        since = first - max(call.fp.ttl_s for lineage in replayed for call in by_lineage[lineage]) * 1_000_000
        stored: dict[str, list[Judged]] = defaultdict(list)
        for lineage, call in history(replayed, since):
            stored[lineage].append(call)
        for lineage in replayed:
            states[lineage] = Lineage(since=since)
            states[lineage].replay(stored[lineage] + by_lineage[lineage])
    for lineage, lineage_calls in by_lineage.items():
        if lineage not in replayed:
            carried.recall(states[lineage], lineage, lineage_calls, history)
            states[lineage].replay(lineage_calls)
    mine = {call.call_id: call for lineage_calls in by_lineage.values() for call in lineage_calls}
    _expire_older(con, by_lineage, replayed, since)
    for call in mine.values():
        price_write(call)
    # the calls of the runs the batch touched, per lineage: where its compactions are looked for
    judged = {lineage: [call for run in {call.run_id for call in lineage_calls} for call in states[lineage].runs[run]]
              for lineage, lineage_calls in by_lineage.items()}
    diffs = _explain_changes(con, mine, batch, bodies)
    frames = dict(frames)
    frames["call"] = _with_verdicts(calls, mine)
    frames["call_prefix"] = _prefix_frame(frames.get("call_prefix"), batch, mine, diffs)
    reads = _reads(con, mine)
    if reads is not None:
        frames["cache_read"] = reads
    outputs_since = min(call.started for lineage_calls in judged.values() for call in lineage_calls)
    superseded = _compactions(con, frames, judged, bodies, carried.micros_time(outputs_since))
    for state in states.values():
        state.prune()
    frames["lineage_state"] = carried.saved(states)
    return frames, superseded


class _Requests(Mapping):
    """The batch's request texts by call id, each read from the body frame when it is asked for: the
    few calls that need it (a changed prefix, a candidate compaction, a call recorded without its
    prefix), not a Python text of kilobytes made for every call of the batch."""

    def __init__(self, frame: pl.DataFrame | None, rows: dict[str, int]) -> None:
        self._texts = frame["request_json"] if frame is not None else None
        self._rows = rows

    def __getitem__(self, call_id: str) -> str | None:
        return self._texts[self._rows[call_id]]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


class _Bodies:
    """The batch's bodies: their request texts (`_Requests`), and their output texts by call id."""

    def __init__(self, frame: pl.DataFrame | None) -> None:
        ids = frame["call_id"].to_list() if frame is not None else []
        # an id's last row, as a dict of the rows keeps it
        self.requests = _Requests(frame, {call_id: index for index, call_id in enumerate(ids)})
        self.outputs = dict(zip(ids, frame["output_text"].to_list())) if frame is not None else {}


def _from_body(call: dict, text: str | None) -> dict | None:
    """A prefix for a call recorded without one (an older recorder): from the stored body's request
    text, when it is whole (a body cut at the size cap is not JSON)."""
    if not text:
        return None
    try:
        found = fingerprint(call["wire"] or "", orjson.loads(text), call["model_requested"])
    except orjson.JSONDecodeError:
        return None
    return None if found is None else prefix_row(call["call_id"], found, None, None)


def _judged(row: dict, specs: dict[str, ModelSpec], minimums: dict, judge: bool) -> Judged:
    """A call of the batch (`judge`), or a stored one, on its lineage's timeline."""
    spec = specs.get(row["price_source"]) if row["price_source"] else None
    minimum = minimums.get((row["model"], row["price_source"]))
    if minimum is None:
        minimum = minimums[(row["model"], row["price_source"])] = minimum_tokens(row["model"], spec)
    return Judged(
        call_id=row["call_id"], run_id=row["run_id"], clock=row["clock"], started=row["started"] or 0,
        settled=bool(row["settled"]), input_tokens=row["input_tokens"] or 0, read=row["cache_read_tokens"] or 0,
        write=row["cache_write_tokens"] or 0, write_1h=row["cache_write_1h_tokens"] or 0,
        output_tokens=row["output_tokens"] or 0, cost_micros=row["cost_micros"], spec=spec,
        minimum=minimum, fp=_fingerprint_of(row), judge=judge, keys=[] if judge else list(row["keys"] or []))


def _expire_older(con, by_lineage: dict[str, list[Judged]], replayed: list[str], since: int | None) -> None:
    """Entries older than what a lineage's state held (before the replayed window, or pruned from the
    carried state), for the misses no entry it held explained as deep as they could have been."""
    carried_ones = sorted(set(by_lineage) - set(replayed))
    for lineages, before in ((carried_ones, None), (replayed, since)):
        wanted = {lineage: [call for call in by_lineage[lineage] if older_wanted(call)] for lineage in lineages}
        wanted = {lineage: calls for lineage, calls in wanted.items() if calls}
        if not wanted:
            continue
        keys = sorted({key for calls in wanted.values() for call in calls for key in older_wanted(call)})
        found: dict[str, dict[int, str]] = defaultdict(dict)
        for lineage, key, call_id in q.older_entries(
                con, sorted(wanted), keys, None if before is None else carried.micros_time(before)).rows():
            found[lineage][key] = call_id
        for lineage, calls in wanted.items():
            for call in calls:
                expire_older(call, found.get(lineage, {}))


def _region_text(wire: str | None, model: str | None, request_json: str | None, index: int) -> str | None:
    if not request_json:
        return None
    try:
        values = region_values(wire or "", orjson.loads(request_json), model)
    except orjson.JSONDecodeError:
        return None
    if values is None or index >= len(values):
        return None
    return _readable(values[index])


def _readable(value) -> str:
    """A region as a person reads it: its text when it is text (a system block, a message), else JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if isinstance(value.get("text"), str) and set(value) <= {"type", "text"}:
            return value["text"]
        content = value.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list) and all(isinstance(part, dict) and isinstance(part.get("text"), str)
                                             for part in content):
            return "\n".join(part["text"] for part in content)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _common_ends(old: str, new: str) -> tuple[int, int]:
    """How many characters the two texts share at the start, and then at the end. (Found by halving,
    each step one comparison of slices: a character at a time in Python, two system prompts of 6,000
    characters that differ at their end were 15% of ingesting a suite whose prompts change so.)"""
    shortest = min(len(old), len(new))
    start = _longest(lambda size: old[:size] == new[:size], shortest)
    return start, _longest(lambda size: old[len(old) - size:] == new[len(new) - size:], shortest - start)


def _longest(same, most: int) -> int:
    """The largest size up to `most` that `same` holds for (it holds for every size up to that one)."""
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if same(middle) else (low, middle - 1)
    return low


def _unchanged_share(old: str, new: str) -> float:
    """The share of the longer text left as it was around one edit in place (a timestamp, an id)."""
    start, end = _common_ends(old, new)
    return (start + end) / max(len(old), len(new), 1)


def short_diff(old: str, new: str, context: int = _DIFF_CONTEXT) -> str:
    """The bytes that changed between two texts, with a little context: `…ctx[-old-]{+new+}ctx…`."""
    start, end = _common_ends(old, new)
    before = old[max(0, start - context):start]
    after = old[len(old) - end:len(old) - end + context]
    removed, added = old[start:len(old) - end], new[start:len(new) - end]
    return (("…" if start > context else "") + before + f"[-{removed[:120]}-]{{+{added[:120]}+}}" + after
            + ("…" if end > context else ""))


def _explain_changes(con, mine: dict[str, Judged], batch: dict[str, dict], bodies: _Bodies) -> dict[str, str]:
    """A short diff for every changed prefix; a change across conversations whose region's text is
    not alike is no change (the call is cold)."""
    changed = [call for call in mine.values() if call.verdict == CHANGED and call.compared is not None]
    if not changed:
        return {}
    stored = sorted({call.compared.call_id for call in changed} - set(batch))
    texts = {row["call_id"]: (row["wire"], row["model"], row["request_json"])
             for row in (q.stored_texts(con, stored).iter_rows(named=True) if stored else ())}

    def text(call_id: str) -> tuple[str | None, str | None, str | None]:
        if call_id in batch:
            return batch[call_id]["wire"], batch[call_id]["model"], bodies.requests.get(call_id)
        return texts.get(call_id, (None, None, None))

    diffs = {}
    for call in changed:
        new = _region_text(*text(call.call_id), call.region)
        old = _region_text(*text(call.compared.call_id), call.region)
        if old is not None and new is not None:
            alike = _unchanged_share(old, new) >= _ALIKE
        else:  # a body cut at the size cap: alike when the sizes are
            mine_size, theirs = call.fp.sizes[call.region], call.compared.fp.sizes[call.region]
            alike = abs(mine_size - theirs) <= 0.05 * max(mine_size, theirs)
        if call.confirm and not alike:
            call.verdict, call.compared, call.entry_call, call.region = COLD, None, None, None
            continue
        if old is not None and new is not None:
            diffs[call.call_id] = short_diff(old, new)
    return diffs


def _with_verdicts(calls: pl.DataFrame, mine: dict[str, Judged]) -> pl.DataFrame:
    results = pl.DataFrame(
        [{"call_id": call.call_id, "cache_verdict": call.verdict,
          "cache_region": call.fp.label(call.region) if call.region is not None else None,
          "cache_miss_micros": call.miss_micros, "cache_entry_call_id": call.entry_call,
          "cache_write_micros": call.write_micros, "cache_expires_at": _iso(call.expires)} for call in mine.values()],
        schema={"call_id": pl.Utf8, "cache_verdict": pl.Utf8, "cache_region": pl.Utf8, "cache_miss_micros": pl.Int64,
                "cache_entry_call_id": pl.Utf8, "cache_write_micros": pl.Int64, "cache_expires_at": pl.Utf8})
    order = calls.columns
    return calls.drop([name for name in _CALL_COLUMNS if name in order]).join(
        results, on="call_id", how="left", maintain_order="left").select(order)


def _reads(con, mine: dict[str, Judged]) -> pl.DataFrame | None:
    """The writes this batch's hits read, that no earlier batch had read: each once, first read first."""
    first: dict[str, Judged] = {}
    for call in sorted(mine.values(), key=lambda c: (c.clock, c.started)):
        if call.verdict == "hit" and call.entry_call is not None:
            first.setdefault(call.entry_call, call)
    if first:
        for (known,) in q.known_reads(con, sorted(first)).rows():
            first.pop(known, None)
    if not first:
        return None
    return pl.DataFrame([{"call_id": writer, "first_read_at": _iso(call.clock), "read_by": call.call_id}
                         for writer, call in first.items()],
                        schema={"call_id": pl.Utf8, "first_read_at": pl.Utf8, "read_by": pl.Utf8})


_PREFIX_SCHEMA = {
    "call_id": pl.Utf8, "lineage": pl.Utf8, "session": pl.Utf8, "scope": pl.Utf8, "clock_at": pl.Utf8,
    "blocks": pl.List(pl.Int64), "sizes": pl.List(pl.Int32), "kinds": pl.Utf8, "marks": pl.List(pl.Int32),
    "lead": pl.Int32, "base": pl.Int32, "explicit": pl.Boolean, "ttl_s": pl.Int32, "keys": pl.List(pl.Int64),
    "diff": pl.Utf8, "written": pl.List(pl.Int64),
}


def _prefix_frame(captured: pl.DataFrame | None, batch: dict[str, dict], mine: dict[str, Judged],
                  diffs: dict[str, str]) -> pl.DataFrame:
    """The prefix records as captured (a frame already) plus those built from bodies, with what
    ingestion adds: the lineage, the entry keys, the diff."""
    known = set(captured["call_id"]) if captured is not None else set()
    built = [{key: row.get(key) for key in _PREFIX_SCHEMA} | {"clock_at": row["started_at"]}
             for call_id, row in batch.items() if call_id not in known]
    frames = [pl.DataFrame(built, schema=_PREFIX_SCHEMA)] if built else []
    if captured is not None:
        frames.insert(0, captured.select(list(_PREFIX_SCHEMA)).cast(_PREFIX_SCHEMA))
    frame = pl.concat(frames) if len(frames) > 1 else frames[0]
    ids = frame["call_id"].to_list()
    return frame.with_columns(
        pl.Series("lineage", [batch[i]["lineage"] if i in batch else None for i in ids], dtype=pl.Utf8),
        list_series("keys", [mine[i].keys if i in mine else None for i in ids], pl.List(pl.Int64)),
        pl.Series("diff", [diffs.get(i) for i in ids], dtype=pl.Utf8),
        list_series("written", [mine[i].written if i in mine else None for i in ids], pl.List(pl.Int64)))


_COMPACTION_SCHEMA = {
    "compaction_id": pl.Utf8, "run_id": pl.Utf8, "span_id": pl.Utf8, "occurred_at": pl.Utf8, "turn": pl.Int32,
    "outcome": pl.Utf8, "tokens_before": pl.Int64, "tokens_after": pl.Int64, "limit_tokens": pl.Int64,
    "summarised_turns": pl.Int32, "kept_turns": pl.Int32, "model": pl.Utf8, "cost_micros": pl.Int64,
    "source": pl.Utf8, "detected": pl.Boolean, "before_call_id": pl.Utf8, "after_call_id": pl.Utf8,
    "summary_call_id": pl.Utf8, "recache_write_tokens": pl.Int64, "recache_cost_micros": pl.Int64,
    "summary_currency": pl.Utf8, "recache_currency": pl.Utf8,
}
_SEARCH_US = 600 * 1_000_000  # a stored inferred compaction whose first call is gone from the window


def _compactions(con, frames: dict[str, pl.DataFrame], judged: dict[str, list[Judged]], bodies: _Bodies,
                 since: datetime | None) -> dict[str, list[str]]:
    """Infer the batch's compactions; fold each into the compaction its agent reported, if any, in
    this batch or stored, and fold stored inferred ones into the reported ones this batch brings."""
    reported = [{**row, "source": row.get("source") or "reported"}
                for row in (frames["compaction"].iter_rows(named=True) if "compaction" in frames else [])]
    # a run is one conversation or job; calls outside any run are one group per lineage
    groups: dict[tuple[str, str | None], list[Judged]] = defaultdict(list)
    for lineage, calls in judged.items():
        for call in calls:
            groups[(lineage, call.run_id)].append(call)
    groups = {key: calls for key, calls in groups.items() if any(call.judge for call in calls)}
    run_ids = sorted({run for _, run in groups if run} | {row["run_id"] for row in reported if row["run_id"]})
    if not groups and not reported:
        return {}
    outputs: dict[str, dict[str, tuple]] = defaultdict(dict)
    # no query for no runs (calls outside any run): it would find nothing, at a plan's cost a batch
    runs = sorted({run for _, run in groups if run})
    for row in q.run_outputs(con, runs, since).iter_rows(named=True) if runs else ():
        outputs[row["run_id"]][row["call_id"]] = (row["started"], row["call_id"], row["output_text"],
                                                  row["cost_micros"], row["model"], row["currency"])
    for call in (frames["call"].select(_OUTPUT_COLUMNS).iter_rows(named=True) if groups else ()):
        if call["settled"]:
            outputs[call["run_id"]][call["call_id"]] = (
                _us(call["started_at"]) or 0, call["call_id"], bodies.outputs.get(call["call_id"]),
                call["cost_micros"], call["model_served"] or call["model_requested"], call["currency"])
    events = [event for (_, run), calls in groups.items()
              for event in compact.infer(calls, bodies.requests, list(outputs[run].values()))]
    stored = q.run_compactions_all(con, run_ids).to_dicts() if run_ids else []
    candidates = reported + [row for row in stored if (row["source"] or "reported") == "reported"]
    started = {call.call_id: call.started for calls in judged.values() for call in calls}
    out: dict[str, dict] = {row["compaction_id"]: row for row in reported}
    superseded: list[str] = []
    taken: set[str] = set()
    for event in events:
        fields = {"detected": True, "before_call_id": event.before.call_id, "after_call_id": event.after.call_id,
                  "summary_call_id": event.summary_call_id, "summary_currency": event.summary_currency,
                  "recache_write_tokens": event.after.write, "recache_cost_micros": event.after.write_micros,
                  # priced by the call's own model row (`verdicts.price_write`): the call's currency
                  "recache_currency": event.after.spec.currency if event.after.write_micros is not None else None}
        match = next((row for row in candidates if row["run_id"] == event.after.run_id
                      and row["compaction_id"] not in taken and _us(row["occurred_at"]) is not None
                      and compact.matches(event, _us(row["occurred_at"]))), None)
        if match is not None:
            taken.add(match["compaction_id"])
            out[match["compaction_id"]] = {**match, **fields}
            continue
        total = lambda call: call.input_tokens + call.read + call.write  # noqa: E731
        out[f"inferred-{event.after.call_id}"] = {
            "compaction_id": f"inferred-{event.after.call_id}", "run_id": event.after.run_id, "span_id": None,
            "occurred_at": _iso(event.after.started), "turn": None, "outcome": "ok",
            "tokens_before": total(event.before), "tokens_after": total(event.after), "limit_tokens": None,
            "summarised_turns": event.summarised_turns, "kept_turns": event.kept_turns,
            "model": event.summary_model, "cost_micros": event.summary_cost_micros, "source": "inferred", **fields}
    # a reported compaction that arrives after its traffic was stored: it takes the inferred row's place
    for row in reported:
        if row["compaction_id"] in taken or _us(row["occurred_at"]) is None:
            continue
        at = _us(row["occurred_at"])
        for other in stored:
            after = _us(other["occurred_at"])
            if other["source"] != "inferred" or other["run_id"] != row["run_id"] or other["compaction_id"] in superseded:
                continue
            first = started.get(other["before_call_id"], after - _SEARCH_US)
            if first - compact._SLACK_US <= at <= after + compact._SLACK_US:
                superseded.append(other["compaction_id"])
                out[row["compaction_id"]] = {**row, **{key: other[key] for key in (
                    "detected", "before_call_id", "after_call_id", "summary_call_id", "summary_currency",
                    "recache_write_tokens", "recache_cost_micros", "recache_currency")}}
                break
    if out:
        frames["compaction"] = pl.DataFrame([{key: _text(row.get(key)) for key in _COMPACTION_SCHEMA} for row in out.values()],
                                            schema=_COMPACTION_SCHEMA)
    return {"compaction": superseded} if superseded else {}


def _text(value):
    return value.isoformat() if isinstance(value, datetime) else value
