"""The compaction inference's walk back from each call to its predecessor (A), on random runs: the
same events as the rule written plainly (`_plain_predecessor`, what `infer` walked until its lead and
message sets were made once a run), and a call's request text read only when it is a candidate."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workbench.insight import compaction
from workbench.insight.prefix import Fingerprint
from workbench.insight.verdicts import RUN_LOOKBACK, Judged

SUMMARY = "Summary of the conversation so far: the customer asked twice where the order is."


def _plain_predecessor(ordered: list[Judged], position: int, after: Judged) -> Judged | None:
    """The module's docstring's rule, step by step: the latest earlier call with the same lead that
    shares a message with B, else the latest with more messages, among the last 64 with that lead."""
    same_lead = [call for call in ordered[:position] if call.fp.lead == after.fp.lead
                 and call.fp.blocks[:call.fp.lead] == after.fp.blocks[:after.fp.lead]][-RUN_LOOKBACK:]
    mine = after.fp.blocks[after.fp.lead:]
    for call in reversed(same_lead):
        if set(mine) & set(call.fp.blocks[call.fp.lead:]):
            return call
    return next((call for call in reversed(same_lead) if len(call.fp.blocks) - call.fp.lead > len(set(mine))), None)


def _plain_infer(run_calls, texts, outputs):
    ordered = sorted(run_calls, key=lambda c: (c.clock, c.started, c.call_id))
    sources = compaction._Sources(outputs)
    found = []
    for position, after in enumerate(ordered):
        if after.judge and after.fp.blocks and (before := _plain_predecessor(ordered, position, after)) is not None:
            event = compaction._compared(before, after, texts, sources)
            if event is not None:
                found.append(event)
    return found


@st.composite
def runs(draw):
    """A run's calls: a lead of one of two system prompts (or none), messages from a small alphabet
    (so calls share some), sizes that grow or shrink, some calls already judged."""
    count = draw(st.integers(1, 70))  # past RUN_LOOKBACK (64) at times
    calls = []
    for index in range(count):
        lead = draw(st.sampled_from([[], [11], [12], [11, 13]]))
        messages = draw(st.lists(st.integers(1, 12), max_size=8))
        kinds = "s" * len(lead) + "".join(draw(st.sampled_from("ua")) for _ in messages)
        sizes = [draw(st.integers(1, 400)) for _ in lead + messages]
        fp = Fingerprint(blocks=lead + messages, sizes=sizes, kinds=kinds, lead=len(lead))
        calls.append(Judged(call_id=f"c{index:03d}", run_id="run", clock=draw(st.integers(0, 50)) * 1_000_000,
                            started=index * 1_000_000, settled=True, input_tokens=sum(sizes), read=0, write=0,
                            write_1h=0, output_tokens=10, cost_micros=100, spec=None, minimum=0, fp=fp,
                            judge=draw(st.booleans())))
    return calls


class _Texts(dict):
    """Request texts that note which calls' were read."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def _events(found) -> list[tuple]:
    return [(e.before.call_id, e.after.call_id, e.removed, e.kept, e.summarised_turns, e.kept_turns,
             e.summary_call_id, e.summary_cost_micros, e.summary_model, e.summary_currency) for e in found]


@given(runs(), st.randoms(use_true_random=False))
def test_the_walk_finds_what_the_plain_rule_finds(calls, random):
    texts = {call.call_id: (SUMMARY if random.random() < 0.3 else "no summary here") for call in calls}
    outputs = [(call.started, call.call_id, SUMMARY if random.random() < 0.2 else "an answer", 7, "m", "EUR")
               for call in calls]
    random.shuffle(calls)  # any order
    assert _events(compaction.infer(calls, _Texts(texts), outputs)) == _events(_plain_infer(calls, texts, outputs))


@given(runs())
def test_a_request_text_is_read_only_for_a_candidate_compaction(calls):
    texts = _Texts({call.call_id: SUMMARY for call in calls})
    compaction.infer(calls, texts, [])
    # a candidate's history shrank since its predecessor: only then is its text read (kilobytes, for
    # every call of a batch when it was read first)
    ordered = sorted(calls, key=lambda c: (c.clock, c.started, c.call_id))
    shrunk = {after.call_id for position, after in enumerate(ordered)
              if after.judge and after.fp.blocks and (before := _plain_predecessor(ordered, position, after))
              and sum(after.fp.sizes) < sum(before.fp.sizes)}
    assert texts.read <= shrunk
