"""Each lineage's cache state, carried from one batch to the next: a batch is judged from the state
its lineage's latest batch left, not by replaying every stored call within a cache life before it.

The state (`verdicts.Lineage`) is kept in the store, in `insight_lineages`, written in the same
transaction as the batch's rows: its live entries (each with the call that made it and its end of
life) and the order key of the latest call judged. What else a later call is judged against (the
latest call per prefix, region and lead shape; each run's calls for compactions) is the stored calls
of the last cache life, read back only when a process does not hold the state already: the one
that wrote it keeps it in memory, known by the version it wrote, with the calls of its latest runs
only (an eval's every case is a run); a run let go is read back when a later batch goes on with it
(`recall`).

A batch whose calls are not all later than its lineage's state (traffic that arrives out of clock
order: several recording processes, a late spool) is judged by the replay instead, and its state
made anew from that replay."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from datetime import datetime, timezone

import orjson
import polars as pl

from workbench.insight.verdicts import CacheEntry, Judged, Lineage, compared_keys, latest, order
from workbench.store.queries import insight as q

# states this process wrote, by version; a few hundred lineages (an eval replay is one) at most
_KEPT = 256
_held: OrderedDict[str, Lineage] = OrderedDict()
# the version each lineage's latest state was saved as: a batch that was not committed (a commit out
# of memory, a full disk) left its state held under a version no store holds, and the retry made the
# state again, so a process held both (two lineage states of 40,000 live entries at a 100,000-call ingest)
_latest: dict[str, str] = {}

SCHEMA = {"lineage": pl.Utf8, "version": pl.Utf8, "last_clock": pl.Int64, "last_started": pl.Int64,
          "last_call_id": pl.Utf8, "ttl_us": pl.Int64, "entries": pl.Utf8}


def micros_time(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, tz=timezone.utc)


def load(con, lineages: list[str], history) -> dict[str, Lineage]:
    """The carried state of each of these lineages that has one. `history(lineages, since µs)`: the
    stored calls (as `Judged`, not to be judged) of those lineages from `since` on, in any order."""
    states: dict[str, Lineage] = {}
    missing: dict[str, dict] = {}
    for row in q.lineage_states(con, lineages).iter_rows(named=True):
        held = _held.pop(row["version"], None)  # taken: a batch that is not committed leaves it out
        if held is not None:
            states[row["lineage"]] = held
        else:
            missing[row["lineage"]] = row
    if not missing:
        return states
    since = min(row["last_clock"] - row["ttl_us"] for row in missing.values())
    calls: dict[str, list[Judged]] = {lineage: [] for lineage in missing}
    for lineage, call in history(sorted(missing), since):
        row = missing[lineage]
        if call.clock >= row["last_clock"] - row["ttl_us"]:
            calls[lineage].append(call)
    entries = dict(q.lineage_entries(con, sorted(missing)).rows())
    for lineage, row in missing.items():
        state = Lineage()
        for call in sorted(calls[lineage], key=lambda c: (c.clock, c.started, c.call_id)):
            state.index(call)
        state.entries = {key: CacheEntry(alive_until, writer)
                         for key, alive_until, writer in orjson.loads(entries.get(lineage) or "[]")}
        state.last = (row["last_clock"], row["last_started"], row["last_call_id"])
        state.ttl_us = row["ttl_us"]
        state.since = row["last_clock"] - row["ttl_us"]
        states[lineage] = state
    return states


def recall(state: Lineage, lineage: str, calls: list[Judged], history) -> None:
    """Read back from the store what the state let go of (`Lineage.prune`) that these calls go on
    with: the calls of their runs, and the latest call of each prefix and region they may be compared
    with; what it would hold had it kept everything. `history(lineages, since µs, runs, blocks)`: the
    stored calls of those runs, or with one of those region hashes."""
    if state.let_go:
        runs = sorted({call.run_id for call in calls if call.run_id is not None} - state.runs.keys())
        found: dict[str, list[Judged]] = {}
        for _, call in history([lineage], state.since, runs) if runs else ():
            found.setdefault(call.run_id, []).append(call)
        for run, run_calls in found.items():
            state.runs[run] = latest(sorted(run_calls, key=order), state.since)
    if state.horizon is None:
        return
    prefixes, blocks, hashes = set(), set(), set()
    for call in calls:
        call_prefixes, call_blocks = compared_keys(call, state.entries)
        for index, key in enumerate(call_prefixes):
            if key not in state.by_prefix:
                prefixes.add(key)
                hashes.add(call.fp.blocks[index])  # a call with the prefix has its last region
        for key in call_blocks:
            if key not in state.by_block:
                blocks.add(key)
                hashes.add(key[1])
    if not hashes:
        return
    # no call after the horizon sent a key missing here: the latest stored call that did is the one
    # the state would hold (none before `since`: `prune` forgot those)
    for _, stored in sorted(history([lineage], state.since, None, sorted(hashes)), key=lambda found: order(found[1])):
        for key in prefixes.intersection(stored.cum):
            state.by_prefix[key] = stored
        lead = stored.fp.lead
        for key in blocks.intersection(enumerate(stored.fp.blocks[lead:], lead)):
            state.by_block[key] = stored


def saved(states: dict[str, Lineage]) -> pl.DataFrame:
    """The rows that carry these (pruned) states to the next batch; this process keeps them too."""
    rows = []
    for lineage, state in states.items():
        if state.last is None:
            continue
        version = uuid.uuid4().hex
        _held.pop(_latest.get(lineage, ""), None)
        _held[version] = state
        _latest[lineage] = version
        while len(_held) > _KEPT:
            _held.popitem(last=False)
        if len(_latest) > _KEPT:
            for name in [name for name, kept in _latest.items() if kept not in _held]:
                del _latest[name]
        entries = orjson.dumps([(key, entry.alive_until, entry.writer) for key, entry in state.entries.items()])
        rows.append({"lineage": lineage, "version": version, "last_clock": state.last[0],
                     "last_started": state.last[1], "last_call_id": state.last[2], "ttl_us": state.ttl_us,
                     "entries": entries.decode()})
    return pl.DataFrame(rows, schema=SCHEMA)


__all__ = ["load", "micros_time", "recall", "saved"]
