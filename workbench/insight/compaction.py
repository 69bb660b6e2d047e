"""Compactions inferred from raw traffic, for any agent, whether it reports them or not.

Two calls of one run in one lineage, A then B, with the same lead (tool list and system blocks), are
a compaction when the history shrank and something took the place of the earlier turns:
- B's regions are fewer bytes than A's;
- at least two of A's messages are gone from B;
- B has a message that A did not, placed before every message B kept from A (the summary; an agent
  that only drops old turns, a sliding window, keeps no such message);
- and B kept some of A's messages, or the new message holds the text another call of the run wrote
  between A and B: that call produced the summary (its cost is the summary's cost).

A is the latest earlier call of the run with the same lead that shares a message with B (or, when
B kept none, the latest with more messages), among the last 64 with that lead; calls made outside
any run are one group per lineage. A compaction the agent reported (`agent.compact`) in
the same run between A and B is the same event: the traffic fills in its calls, never a second row.
The cache writes B paid are what the new prefix cost to cache again.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass

from workbench.insight.prefix import ASSISTANT
from workbench.insight.verdicts import RUN_LOOKBACK, Judged

# how far a reported event may sit outside the A..B window on the application's clock
_SLACK_US = 2_000_000
_SUMMARY_PROBE = 120  # characters of a candidate summary looked for in the next request


@dataclass(slots=True)
class Inferred:
    before: Judged
    after: Judged
    removed: int  # A's messages no longer in B
    kept: int  # A's messages B kept
    summarised_turns: int  # assistant messages among the removed
    kept_turns: int
    summary_call_id: str | None = None
    summary_cost_micros: int | None = None
    summary_model: str | None = None
    summary_currency: str | None = None  # its cost's


def _messages(call: Judged) -> list[int]:
    return call.fp.blocks[call.fp.lead:]


def infer(run_calls: list[Judged], texts: Mapping[str, str | None],
          outputs: list[tuple[int, str, str, int | None, str | None, str | None]]) -> list[Inferred]:
    """Compactions among one run's calls of one lineage (`run_calls`, any order). `texts`: the
    request text of the calls being judged, by call id; `outputs`: (start µs, call id, output text,
    cost, model, currency) of the run's calls, where a summary may come from."""
    ordered = sorted(run_calls, key=lambda c: (c.clock, c.started, c.call_id))
    sources = _Sources(outputs)
    # each call's lead and set of messages, made once a run: the walk back for every later call
    # compares them (made per step, they were most of the inference)
    leads = [(call.fp.lead, call.fp.blocks[:call.fp.lead]) for call in ordered]
    messages = [set(_messages(call)) for call in ordered]
    found = []
    for position, after in enumerate(ordered):
        if not after.judge or not after.fp.blocks:
            continue
        before = _predecessor(ordered, leads, messages, position)
        if before is None:
            continue
        event = _compared(before, after, texts, sources)
        if event is not None:
            found.append(event)
    return found


def _predecessor(ordered: list[Judged], leads: list[tuple[int, list[int]]], messages: list[set[int]],
                 position: int) -> Judged | None:
    """A among the calls before `position` (walked back in place: a run's calls outside any run are
    a cache life of a lineage's traffic, too many to copy for every call)."""
    lead, mine = leads[position], messages[position]
    fallback = None
    looked = 0
    for index in range(position - 1, -1, -1):
        if leads[index] != lead:
            continue
        looked += 1
        if looked > RUN_LOOKBACK:
            break
        if not mine.isdisjoint(messages[index]):
            return ordered[index]
        if fallback is None and len(_messages(ordered[index])) > len(mine):
            fallback = ordered[index]
    return fallback


class _Sources:
    """The run's outputs in start order, each with the probe a summary of it would show in a request:
    sorted and probed once per run, not once per candidate compaction."""

    def __init__(self, outputs: list[tuple[int, str, str, int | None, str | None, str | None]]) -> None:
        self.rows = sorted(outputs)
        self.starts = [row[0] for row in self.rows]
        probes = [(output or "").strip()[:_SUMMARY_PROBE] for _, _, output, *_ in self.rows]
        self.probes = [json.dumps(probe)[1:-1] if len(probe) >= 16 else None for probe in probes]

    def between(self, first: int, last: int):
        """(output row, probe) of the outputs started in [first, last], latest first."""
        for index in reversed(range(bisect_left(self.starts, first), bisect_right(self.starts, last))):
            yield self.rows[index], self.probes[index]


def _compared(before: Judged, after: Judged, texts: Mapping[str, str | None], outputs: _Sources) -> Inferred | None:
    old, new = _messages(before), _messages(after)
    if sum(after.fp.sizes) >= sum(before.fp.sizes):
        return None
    old_set = set(old)
    kept_at = [index for index, block in enumerate(new) if block in old_set]
    kept_set = {new[index] for index in kept_at}
    removed = [index for index, block in enumerate(old) if block not in kept_set]
    if len(removed) < 2:
        return None
    first_kept = kept_at[0] if kept_at else len(new)
    if not any(block not in old_set for block in new[:first_kept]):
        return None  # nothing took the earlier turns' place: a sliding window, not a summary
    event = Inferred(before, after, removed=len(removed), kept=len(kept_at),
                     summarised_turns=sum(before.fp.kinds[before.fp.lead + index] == ASSISTANT for index in removed),
                     kept_turns=sum(after.fp.kinds[after.fp.lead + index] == ASSISTANT for index in kept_at))
    _find_summary(event, texts.get(after.call_id), outputs)  # read only for a candidate
    if not kept_at and event.summary_call_id is None:
        return None  # B shares nothing with A and holds no summary of it: another conversation
    return event


def _find_summary(event: Inferred, text: str | None, outputs: _Sources) -> None:
    if not text:
        return
    for (_, call_id, _, cost, model, currency), probe in outputs.between(event.before.started, event.after.started):
        if call_id == event.after.call_id:
            continue
        if probe is not None and probe in text:
            event.summary_call_id, event.summary_cost_micros, event.summary_model = call_id, cost, model
            event.summary_currency = currency
            return


def matches(event: Inferred, occurred_us: int) -> bool:
    """Whether a reported compaction at `occurred_us` (the application's clock) is this one."""
    return event.before.started - _SLACK_US <= occurred_us <= event.after.started + _SLACK_US


__all__ = ["Inferred", "infer", "matches"]
