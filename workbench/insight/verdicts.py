"""Why a call read the prompt cache or missed it: one verdict per call, computed once at ingest.

## Lineage: the calls one cache can serve

A provider's prompt cache is shared by the requests of one organization to one model (OpenAI also
splits it by `prompt_cache_key`). So a call's *lineage* is every call with the same provider, model
(as requested, else as served) and cache scope (`prompt_cache_key` when sent), in the order of the
provider's clock: its `Date` header, which a cassette keeps, so a replay is judged on the recorded
timeline and gets the verdicts the live traffic got; the call's own start breaks ties and stands in
when there is no header. A replayed call's lineage is its replay session (one cassette, one load of
it): two replays of one cassette never see each other's entries.

Within a lineage, the calls of the same run are compared first (a run is one conversation or one
job); across runs, a call is compared with another only when the prefixes say so: they share a
leading region, or the one region that differs is nearly the same text (a timestamp, an id).

## Cache entries

Replaying the lineage in clock order, each call leaves entries: the hashes of the prefixes the
provider now holds, each alive until its life ends (5 minutes, 1 hour for a 1-hour write, 24 hours
for OpenAI's extended retention), and each read renews the entry it read. Explicit caching
(Anthropic) holds the prefixes that end at a call's marks when the call wrote or read; automatic
caching (OpenAI and its followers) holds every prefix of a call at least the model's minimum long.

## The verdict of a settled call, first match wins

| verdict | when |
|---|---|
| `hit` | it read from the cache (the entry it read names the call that wrote it) |
| `not_requested` | explicit caching, and the request has no mark |
| `below_minimum` | nothing written, and its cacheable prefix (to its last mark; all of it, automatic) is under the model's minimum |
| `unexplained` | an entry it could have read was alive: the provider evicted or routed elsewhere; the prompt is not to blame |
| `expired` | an entry for its prefix existed, but its life had ended |
| `prefix_changed` | an earlier call within the life shares only part of the prefix: the first region that differs is named |
| `cold` | none of the above: this prefix was never sent before |

Token counts per region are estimated from the region's bytes, scaled to the call's reported input.
A miss costs what the call paid minus what it would have paid had its cacheable prefix (what it
wrote, else the estimate) been read; a write is wasted when no later hit reads it before it expires.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import accumulate

from workbench.insight.prefix import Fingerprint
from workbench.models import ModelSpec, Usage, price_with

HIT, COLD, EXPIRED, CHANGED, BELOW, NOT_REQUESTED, UNEXPLAINED = (
    "hit", "cold", "expired", "prefix_changed", "below_minimum", "not_requested", "unexplained")
VERDICTS = (HIT, COLD, EXPIRED, CHANGED, BELOW, NOT_REQUESTED, UNEXPLAINED)
_US = 1_000_000
RUN_LOOKBACK = 64  # earlier calls with the same lead a compaction's first call is compared with
# runs whose calls a lineage's state holds between batches, the latest touched: an eval's every case is
# a run, so holding them all grows with the eval; a run let go is read back from the store when a later
# batch brings a call of it (`workbench.insight.carried.recall`)
RUNS_KEPT = 256
# calls whose prefixes and regions a lineage's state holds as the latest that sent them, between
# batches: a suite of distinct prompts would hold one a case for the cache life; a key let go is read
# back from the store when a later batch's call may be compared with it (`carried.recall`)
CALLS_KEPT = 4096

# the shortest prefix each provider caches, by model name (first match); a registry row's
# `cache_min_tokens` wins. Anthropic documents 1024-4096 by model; OpenAI 1024.
_MINIMUMS = (
    ("claude-opus-4-5", 4096), ("claude-haiku-4-5", 4096), ("claude-3-haiku", 2048), ("claude-3-5-haiku", 2048),
    ("claude-haiku-3", 2048), ("claude", 1024), ("gpt-", 1024), ("o1", 1024), ("o3", 1024), ("o4", 1024),
    ("deepseek", 64),
)


def minimum_tokens(model: str | None, spec: ModelSpec | None) -> int:
    if spec is not None and getattr(spec, "cache_min_tokens", None) is not None:
        return spec.cache_min_tokens
    name = (model or "").lower().rsplit("/", 1)[-1]
    return next((tokens for prefix, tokens in _MINIMUMS if name.startswith(prefix)), 0)


@dataclass(slots=True, eq=False)
class Judged:
    """One call on its lineage's timeline, and (for the calls of this batch) its verdict."""

    call_id: str
    run_id: str | None
    clock: int  # µs, the provider's clock
    started: int  # µs
    settled: bool
    input_tokens: int
    read: int
    write: int
    write_1h: int
    output_tokens: int
    cost_micros: int | None
    spec: ModelSpec | None
    minimum: int
    fp: Fingerprint
    judge: bool  # in this batch: give it a verdict
    cum: list[int] = field(default_factory=list)
    est: list[int] = field(default_factory=list)  # estimated tokens of the prefix at each depth
    keys: list[int] = field(default_factory=list)  # prefix hashes of the entries it left
    written: list[int] = field(default_factory=list)  # prefix hashes of the entries it made anew
    verdict: str | None = None
    region: int | None = None  # prefix_changed: the index of the first region that differs
    entry_call: str | None = None
    compared: Judged | None = None  # prefix_changed: the call it differs from
    found: int = -1  # expired: the index of the prefix whose dead entry was found in the lineage's state
    confirm: bool = False  # prefix_changed across conversations: only if the region's text is alike
    miss_micros: int | None = None
    write_micros: int | None = None
    expires: int | None = None  # µs: a write's end of life

    def __post_init__(self) -> None:
        self.cum = self.fp.cumulative()
        total, size = self.input_tokens + self.read + self.write, sum(self.fp.sizes) or 1
        self.est = [total * running // size for running in accumulate(self.fp.sizes)]

    @property
    def depth(self) -> int:
        """How many regions its cacheable prefix spans: to its last mark, or all (automatic)."""
        if self.fp.explicit:
            return self.fp.marks[-1] + 1 if self.fp.marks else 0
        return len(self.fp.blocks)

    def cached_depths(self) -> list[int]:
        """The prefixes (depths) the provider holds after this call."""
        if not self.settled:
            return []
        if self.fp.explicit:
            if self.read + self.write == 0:
                return []
            return [mark + 1 for mark in self.fp.marks if self.est[mark] >= self.minimum or mark == self.fp.marks[-1]]
        least = max(self.minimum, 1)
        return [depth for depth, tokens in enumerate(self.est[:len(self.cum)], 1) if tokens >= least]


@dataclass(slots=True)
class CacheEntry:
    """A prefix in a lineage's cache: alive until this clock (µs), written by this call."""

    alive_until: int
    writer: str


@dataclass
class Lineage:
    """The state of one lineage's cache while its timeline is replayed. Carried from batch to batch
    (`workbench.insight.carried`): what a later call can still be judged against is kept, the rest
    pruned (`prune`); a dead entry pruned is found again in the store (`expire_older`)."""

    entries: dict[int, CacheEntry] = field(default_factory=dict)
    by_prefix: dict[int, Judged] = field(default_factory=dict)  # prefix hash -> latest call that sent it
    by_block: dict[tuple[int, int], Judged] = field(default_factory=dict)  # (index, region hash) -> latest
    by_lead: dict[str, Judged] = field(default_factory=dict)  # the lead's shape -> latest call
    runs: dict[str | None, list[Judged]] = field(default_factory=dict)  # each run's calls, in clock order
    last: tuple[int, int, str] | None = None  # the order key of the latest call replayed
    ttl_us: int = 0  # the longest entry life among the calls replayed
    since: int | None = None  # µs: every call of a run from this clock on is in `runs`, or was let go
    let_go: bool = False  # some runs' calls were let go (`prune`): a batch's run not in `runs` may be stored
    # the latest call whose prefixes and regions `prune` let go: a key not in `by_prefix` or `by_block`
    # may have a stored call, at or before it
    horizon: tuple[int, int, str] | None = None

    def replay(self, calls: list[Judged]) -> None:
        for call in sorted(calls, key=order):
            if call.judge and call.settled and call.fp.blocks:
                _judge(self, call)
            self._enter(call)
            self.index(call)

    def _enter(self, call: Judged) -> None:
        ttl = call.fp.ttl_s * _US
        for depth in call.cached_depths():
            key = call.cum[depth - 1]
            entry = self.entries.get(key)
            if entry is None or entry.alive_until < call.clock:
                # a new entry; a write after its end of life is a new entry too
                self.entries[key] = CacheEntry(call.clock + ttl, call.call_id)
                call.written.append(key)
            else:
                entry.alive_until = call.clock + ttl
            call.keys.append(key)
        if call.keys:
            call.keys = [call.keys[0], call.keys[-1]] if len(call.keys) > 1 else call.keys

    def index(self, call: Judged) -> None:
        """Make `call` the latest of its prefixes, regions, lead shape and run."""
        self.by_prefix.update(dict.fromkeys(call.cum, call))
        lead = call.fp.lead
        self.by_block.update(dict.fromkeys(enumerate(call.fp.blocks[lead:], lead), call))
        self.by_lead[call.fp.kinds[:lead] + str(len(call.fp.blocks) > lead)] = call
        self.runs.setdefault(call.run_id, []).append(call)
        self.last = max(self.last, order(call)) if self.last is not None else order(call)
        self.ttl_us = max(self.ttl_us, call.fp.ttl_s * _US)

    def prune(self) -> None:
        """Forget what no later call can be judged against: calls and entries more than the longest
        life before the latest call (a prefix_changed compares within a life; an entry dead that long
        is looked up in the store by the call that made it), the calls of all but the RUNS_KEPT
        runs with the latest calls (read back from the store when their run goes on), and the
        prefixes and regions whose latest call is not among the CALLS_KEPT latest (read back when a
        later call may be compared with them). Every call kept is judged no more."""
        if self.last is None:
            return
        since = self.last[0] - self.ttl_us
        self.since = since if self.since is None else max(self.since, since)
        self.entries = {key: entry for key, entry in self.entries.items() if entry.alive_until >= since}
        self.by_prefix = {key: call for key, call in self.by_prefix.items() if call.clock >= since}
        self.by_block = {key: call for key, call in self.by_block.items() if call.clock >= since}
        self.by_lead = {key: call for key, call in self.by_lead.items() if call.clock >= since}
        held = {id(call): call for call in (*self.by_prefix.values(), *self.by_block.values())}
        if len(held) > CALLS_KEPT:  # the lead shapes are few: their latest calls stay
            # a sort, not `heapq`: the held calls come nearly in order, which the sort runs through
            # (~4,800 held calls of a suite's drains: 1.1 ms; heapq.nlargest 7.0, nsmallest 2.2)
            cut = sorted(map(order, held.values()), reverse=True)[CALLS_KEPT]
            self.by_prefix = {key: call for key, call in self.by_prefix.items() if order(call) > cut}
            self.by_block = {key: call for key, call in self.by_block.items() if order(call) > cut}
            self.horizon = cut if self.horizon is None else max(self.horizon, cut)
        runs = {}
        for run, calls in self.runs.items():
            kept = latest(calls, since)
            if kept:
                runs[run] = kept
                for call in kept:
                    call.judge = False
        # calls outside any run are one group per lineage, a cache life of it at most: always kept
        ranked = sorted((run for run in runs if run is not None), key=lambda run: order(runs[run][-1]), reverse=True)
        for run in ranked[RUNS_KEPT:]:
            del runs[run]
            self.let_go = True
        self.runs = runs


def latest(calls: list[Judged], since: int) -> list[Judged]:
    """A run's calls (in clock order) a later call of it can be compared with: from `since` on, and
    the latest RUN_LOOKBACK with each lead (a compaction looks back no further)."""
    seen: dict[tuple[int, ...], int] = defaultdict(int)
    kept = []
    for call in reversed(calls):
        lead = tuple(call.fp.blocks[:call.fp.lead])
        seen[lead] += 1
        if call.clock >= since and seen[lead] <= RUN_LOOKBACK:
            kept.append(call)
    kept.reverse()
    return kept


def order(call: Judged) -> tuple[int, int, str]:
    """Where a call sits on its lineage's timeline."""
    return call.clock, call.started, call.call_id


def _own_verdict(call: Judged) -> str | None:
    """The verdict a call has whatever was sent before it (hit, not_requested, below_minimum), if any."""
    if call.read > 0:
        return HIT
    if call.fp.explicit and call.depth == 0:
        return NOT_REQUESTED
    if call.write == 0 and call.est[call.depth - 1] < call.minimum:
        return BELOW
    return None


def compared_keys(call: Judged, entries: dict[int, CacheEntry]) -> tuple[list[int], list[tuple[int, int]]]:
    """The prefixes and regions whose latest call a call of the batch may be compared with (a
    prefix_changed's candidates, besides its lead shape's), judged after `entries`: none when its
    verdict is its own, or an entry for its prefix makes it unexplained or expired (the batch's
    calls renew entries or add them, never remove one)."""
    if not (call.judge and call.settled and call.fp.blocks) or _own_verdict(call) is not None:
        return [], []
    prefixes, blocks = _looked_up(call, call.depth)
    if any(key in entries for key in prefixes):
        return [], []
    return prefixes, blocks


def _looked_up(call: Judged, depth: int) -> tuple[list[int], list[tuple[int, int]]]:
    return call.cum[:depth], [(index, call.fp.blocks[index]) for index in range(call.fp.lead, depth)]


def _judge(state: Lineage, call: Judged) -> None:
    depth = call.depth
    call.verdict = _own_verdict(call)
    if call.verdict == HIT:
        call.entry_call = _deepest(state, call, len(call.cum), alive=True)[1]
        return
    if call.verdict is None:
        if (found := _deepest(state, call, depth, alive=True)[1]) is not None:
            call.verdict, call.entry_call = UNEXPLAINED, found
        elif (dead := _deepest(state, call, depth, alive=False))[1] is not None:
            call.verdict, (call.found, call.entry_call) = EXPIRED, dead
        elif not _changed(state, call, depth):
            call.verdict = COLD
    _price(call, depth)


def older_wanted(call: Judged) -> list[int]:
    """The prefixes of a judged miss deeper than any entry its lineage's state held: an entry for
    one of them, made before what the state holds, would make it expired."""
    if call.verdict not in (COLD, CHANGED, EXPIRED):
        return []
    return call.cum[call.found + 1:call.depth]


def expire_older(call: Judged, older: dict[int, str]) -> None:
    """Expired after all: the deepest of `older_wanted` that an entry the state no longer holds was
    made for (`older`: prefix hash -> the call that made its latest entry)."""
    for index in range(call.depth - 1, call.found, -1):
        writer = older.get(call.cum[index])
        if writer is not None:
            call.verdict, call.entry_call, call.found = EXPIRED, writer, index
            call.compared, call.region, call.confirm = None, None, False
            return


def _deepest(state: Lineage, call: Judged, depth: int, alive: bool) -> tuple[int, str | None]:
    """The index and writer of the deepest entry for a prefix of `call` up to `depth`, alive (or
    dead) then; (-1, None) when there is none."""
    for index in range(min(depth, len(call.cum)) - 1, -1, -1):
        entry = state.entries.get(call.cum[index])
        if entry is not None and (entry.alive_until >= call.clock) == alive:
            return index, entry.writer
    return -1, None


def _shared(one: Judged, other: Judged) -> int:
    shared = 0
    for mine, theirs in zip(one.fp.blocks, other.fp.blocks):
        if mine != theirs:
            break
        shared += 1
    return shared


def _changed(state: Lineage, call: Judged, depth: int) -> bool:
    """Find the earlier call, within the life of its entries, that this one differs from in part;
    True (and the verdict set) when there is one."""
    since = call.clock - call.fp.ttl_s * _US
    prefixes, blocks = _looked_up(call, depth)
    candidates = {id(other): other for other in (
        *(state.by_prefix.get(key) for key in prefixes),
        *(state.by_block.get(key) for key in blocks),
        state.by_lead.get(call.fp.kinds[:call.fp.lead] + str(len(call.fp.blocks) > call.fp.lead)),
    ) if other is not None and other is not call and other.clock >= since and other.keys}
    best, best_key = None, None
    for other in candidates.values():
        shared = _shared(call, other)
        if shared >= depth or shared >= len(other.fp.blocks) or other.fp.kinds[shared:shared + 1] != call.fp.kinds[shared]:
            continue  # the same prefix (not a change), or one only appends to the other
        later = any(mine == theirs for mine, theirs in zip(call.fp.blocks[shared + 1:depth], other.fp.blocks[shared + 1:]))
        in_lead = shared < call.fp.lead
        if not (later or in_lead):
            continue  # another conversation: its messages are its own, not a change of this one's
        key = (other.run_id == call.run_id and call.run_id is not None, later, shared, other.clock)
        if best_key is None or key > best_key:
            best, best_key = other, key
    if best is None:
        return False
    call.verdict, call.compared, call.entry_call = CHANGED, best, best.call_id
    call.region = _shared(call, best)
    # across conversations with nothing after it in common, a changed lead region counts only when
    # its text is nearly the same (checked on the bodies)
    call.confirm = not best_key[1]
    return True


def _price(call: Judged, depth: int) -> None:
    if call.spec is None or call.cost_micros is None:
        return
    total = call.input_tokens + call.read + call.write
    prefix = min(total, call.read + call.write if call.write else (call.est[depth - 1] if depth else 0))
    hit = Usage(input_tokens=total - prefix, cache_read_tokens=prefix, output_tokens=call.output_tokens)
    call.miss_micros = call.cost_micros - price_with(call.spec, hit).cost_micros


def price_write(call: Judged) -> None:
    """What the call's cache write cost, and when it expires unless read."""
    if call.write and call.spec is not None:
        written = Usage(cache_write_tokens=call.write, cache_write_1h_tokens=call.write_1h)
        call.write_micros = price_with(call.spec, written).cost_micros
    if call.write:
        call.expires = call.clock + call.fp.ttl_s * _US


__all__ = ["Judged", "Lineage", "VERDICTS", "compared_keys", "expire_older", "latest", "minimum_tokens", "older_wanted", "order", "price_write"]
