"""The parts of insight that ingestion runs for every batch, on crafted calls: which earlier call a
compaction's summary is credited to, and the prefix hashes a batch's calls are judged by."""

from __future__ import annotations

import json

from workbench.insight import compaction as compact
from workbench.insight.prefix import Fingerprint
from workbench.insight.verdicts import Judged

SECOND = 1_000_000


def _call(call_id: str, started: int, blocks: list[int], kinds: str, judge: bool) -> Judged:
    fp = Fingerprint(blocks=blocks, sizes=[400] * len(blocks), kinds=kinds, lead=1, base=1)
    return Judged(call_id=call_id, run_id="run-1", clock=started, started=started, settled=True, input_tokens=100 * len(blocks),
                  read=0, write=0, write_1h=0, output_tokens=50, cost_micros=1000, spec=None, minimum=0, fp=fp,
                  judge=judge)


def _summarised(outputs: list[tuple[int, str, str, int | None, str | None, str | None]], quoted: list[str]) -> str | None:
    """The summary call the compaction from A (six messages) to B (a new message, then A's last two)
    is credited with, when B's request quotes `quoted`."""
    before = _call("A", 10 * SECOND, [1, 11, 12, 13, 14, 15, 16], "suauaua", judge=False)
    after = _call("B", 20 * SECOND, [1, 99, 15, 16], "suua", judge=True)
    text = json.dumps({"messages": [{"role": "user", "content": " ".join(quoted)}]})
    events = compact.infer([after, before], {"B": text}, outputs)
    assert [(event.before.call_id, event.after.call_id, event.removed, event.kept) for event in events] == [("A", "B", 4, 2)]
    return events[0].summary_call_id


EARLY = "An old summary of another conversation, long before A was sent."
INSIDE = "The user asked where their order is; the agent answered it ships on Monday."
LATER = "A later answer in the window, which B does not quote at all, not a word."


def test_a_summary_is_credited_to_the_latest_call_between_a_and_b_whose_output_b_quotes():
    outputs = [(5 * SECOND, "early", EARLY, 7, "m", "USD"), (12 * SECOND, "inside", INSIDE, 9, "m", "USD"),
               (15 * SECOND, "later", LATER, 11, "m", "USD"), (20 * SECOND, "B", INSIDE, 13, "m", "USD")]
    # B quotes an output from before A and one between A and B: only the one between counts; B itself never
    assert _summarised(outputs, [EARLY, INSIDE]) == "inside"
    # two quoted outputs between A and B: the latest
    assert _summarised(outputs, [INSIDE, LATER]) == "later"
    # an output at A's own start and one at B's own start are inside the window (B itself excluded)
    assert _summarised([(10 * SECOND, "at-a", INSIDE, 1, "m", "USD"), (20 * SECOND, "B", LATER, 1, "m", "USD")], [INSIDE, LATER]) == "at-a"
    # nothing quoted: no summary, and B kept two of A's messages, so still a compaction
    assert _summarised(outputs, ["something else entirely, sixteen chars"]) is None


def test_prefix_hashes_follow_the_regions_not_the_fingerprint_object():
    first = Fingerprint(blocks=[1, 2, 3])
    same = Fingerprint(blocks=[1, 2, 3])
    changed = Fingerprint(blocks=[1, 5, 3])
    hashes = first.cumulative()
    assert len(hashes) == 3 and len(set(hashes)) == 3
    assert same.cumulative() == hashes
    # a changed region changes the prefix hash at its depth and every one after it, never before
    assert changed.cumulative()[0] == hashes[0]
    assert all(mine != theirs for mine, theirs in zip(changed.cumulative()[1:], hashes[1:]))
    # a fingerprint grown after its hashes were asked for gets the longer prefix's hashes
    first.blocks.append(4)
    grown = first.cumulative()
    assert grown[:3] == hashes and len(grown) == 4
    # the list handed out is the caller's: changing it changes no later answer
    grown.clear()
    assert first.cumulative()[:3] == hashes
