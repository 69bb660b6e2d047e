"""Auto-compaction against the fake's honest token counts: a long tool loop compacts with exact
row values and keeps running; the summary call is the run's own cached request up to the cut plus one
instruction, or (when that does not fit the summary model) the turns as clipped text; a
context-overflow refusal gets one forced compaction, then WB_AGENT_CONTEXT_EXHAUSTED; a failed
summary keeps the run whole while it fits and waits to try again until it no longer does."""

from __future__ import annotations

import json
import math

import pytest

from runtime_support import SMALL, SMALL_WINDOW
from workbench.capture import billed_of
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, FakeRequest, Reply
from workbench.errors import WorkbenchError
from workbench.runtime import Agent, AnthropicProvider, Compaction, Gateway
from workbench.runtime.compaction import INSTRUCTIONS, SUMMARY_HEADER

MAX_TOKENS = 200
ROOM = SMALL_WINDOW - MAX_TOKENS
LIMIT = int(0.8 * ROOM)


def is_summary(request: FakeRequest) -> bool:
    last = request.json["messages"][-1]["content"]
    return any(block.get("text") == INSTRUCTIONS for block in last if isinstance(block, dict))


def scripted(final_after: int, summary: Reply | None = None, fake_window: int = SMALL_WINDOW) -> FakeProvider:
    """Agent turns call `fetch(page=n)` until `final_after` turns, then answer; summaries answer
    with `summary` (default: a good one)."""

    def respond(request: FakeRequest) -> Reply:
        if is_summary(request):
            return summary or Reply(text="SUMMARY: pages fetched so far, all fine.")
        pages = [block["input"]["page"] for message in request.json["messages"] if message["role"] == "assistant"
                 for block in message["content"] if block["type"] == "tool_use"]
        turn = 1 + max(pages, default=0)  # compaction drops turns, never the last one
        if turn > final_after:
            return Reply(text="done")
        return Reply(tool_calls=[("fetch", {"page": turn})])

    return FakeProvider(responder=respond, context_window={SMALL: fake_window})


def pages(size: int):
    def fetch(page: int) -> str:
        """Fetch one page."""
        return f"page {page}: " + "lorem ipsum " * (size // 12)

    return fetch


def gateway_for(fake: FakeProvider) -> Gateway:
    return Gateway([AnthropicProvider("http://small.test", "k", [SMALL], transport=AsyncFakeTransport(fake))], SMALL)


def agent_requests(fake: FakeProvider) -> list[FakeRequest]:
    return [r for r in fake.requests if not is_summary(r)]


def strip_marks(value):
    if isinstance(value, dict):
        return {k: strip_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_marks(v) for v in value]
    return value


def estimate(request: FakeRequest, ratio: float) -> int:
    return math.ceil(math.ceil(len(request.body) / 4) * ratio)


def test_a_long_tool_loop_compacts_with_exact_row_values_and_keeps_running(store):
    fake = scripted(final_after=14)
    infos = []
    agent = Agent(gateway_for(fake), "Read every page.", [pages(400)], max_turns=20, max_tokens=MAX_TOKENS,
                  on_compact=infos.append)
    result = agent.run()
    assert result.output == "done" and result.turns == 15
    rows = store.rows("SELECT * FROM compactions WHERE run_id = ? ORDER BY occurred_at", result.run_id)
    assert len(rows) >= 1 and len(rows) == len(infos) == len(result.compactions)
    first = rows[0]
    summary_index = next(i for i, r in enumerate(fake.requests) if is_summary(r))
    before, summary, after = fake.requests[summary_index - 1], fake.requests[summary_index], fake.requests[summary_index + 1]
    turn = summary_index + 1  # agent requests before the first summary, plus one
    summarised = turn - 1 - 4
    assert (first["turn"], first["outcome"], first["limit_tokens"], first["model"]) == (turn, "ok", LIMIT, SMALL)
    assert (first["summarised_turns"], first["kept_turns"]) == (summarised, 4)

    # the estimates are the request's bytes / 4, scaled by what the fake reported for the last one
    calls = [c for c in store.calls(result.run_id)]
    reported = calls[summary_index - 1]
    ratio = (reported["input_tokens"] + reported["cache_read_tokens"] + reported["cache_write_tokens"]) / math.ceil(len(before.body) / 4)
    assert first["tokens_after"] == estimate(after, ratio) < LIMIT < first["tokens_before"]
    previous = calls[summary_index - 2]
    ratio_before = sum(previous[k] for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens")) / math.ceil(
        len(fake.requests[summary_index - 2].body) / 4)
    assert estimate(before, ratio_before) <= LIMIT  # the turn before did not need one

    # the summary call is the run's own request up to the cut plus ONE instruction: same system,
    # tools and cache hint, so it reads the prefix the turn that ended at the cut cached
    old, asked = strip_marks(before.json), strip_marks(summary.json)
    cut = 1 + 2 * summarised
    assert asked["tools"] == old["tools"] and asked.get("system") == old.get("system")
    assert asked["messages"][:cut - 1] == old["messages"][:cut - 1]
    assert asked["messages"][cut - 1]["content"][:-1] == old["messages"][cut - 1]["content"]
    assert asked["messages"][cut - 1]["content"][-1] == {"type": "text", "text": INSTRUCTIONS}
    assert len(asked["messages"]) == cut and "tool_choice" not in asked
    assert asked["max_tokens"] == min(2048, MAX_TOKENS)  # the default summary size
    summary_call = calls[summary_index]
    assert summary_call["cache_read_tokens"] > 0  # the cached prefix, read back

    # ONE summary call, billed to the run, its cost and usage on the row and the hook
    assert first["cost_micros"] == summary_call["cost_micros"] > 0
    info = infos[0]
    assert (info.summary_input, info.clipped, info.omitted, info.compactions, info.trigger) == (
        "messages", 0, 0, 1, "threshold")
    assert (info.usage.cache_read_tokens, info.usage.output_tokens) == (
        summary_call["cache_read_tokens"], summary_call["output_tokens"])
    assert [item.compactions for item in infos] == list(range(1, len(infos) + 1))
    store.assert_bill_exact(result.run_id, result.billed)

    # system, tools and the kept turns are the same bytes; the summary joins the task message
    new = strip_marks(after.json)
    assert old.get("system") == new.get("system") and old["tools"] == new["tools"]
    kept_before = old["messages"][-(2 * 3):]  # turns turn-4 .. turn-2, sent before compaction
    assert new["messages"][1:1 + 2 * 3] == kept_before
    assert len(new["messages"]) == 1 + 2 * 4
    task = new["messages"][0]["content"]
    assert task[0]["text"] == "Read every page." and task[1]["text"].startswith(SUMMARY_HEADER)
    assert "SUMMARY: pages fetched" in task[1]["text"]
    # the provider's own count confirms the compacted request is far below the window
    assert calls[summary_index + 1]["input_tokens"] + calls[summary_index + 1]["cache_read_tokens"] + calls[summary_index + 1]["cache_write_tokens"] < LIMIT

    events = store.events(result.run_id, "agent.compact")
    assert events[0]["trigger"] == "threshold" and events[0]["tokens_before"] == first["tokens_before"]
    assert (events[0]["summary_input"], events[0]["compactions"], events[0]["cache_read_tokens"]) == (
        "messages", 1, summary_call["cache_read_tokens"])
    assert all(r.json is not None for r in fake.requests)
    assert all(c["http_status"] == 200 for c in calls)  # never refused by the provider


def test_an_overflow_refusal_gets_one_forced_compaction(store):
    fake = scripted(final_after=8, fake_window=900)  # the provider's real window is smaller than registered
    agent = Agent(gateway_for(fake), "Read every page.", [pages(400)], max_turns=12, max_tokens=MAX_TOKENS,
                  compact=Compaction(keep_turns=2))
    result = agent.run()
    assert result.output == "done"
    calls = store.calls(result.run_id)
    assert 400 in [c["http_status"] for c in calls]
    [event, *_] = store.events(result.run_id, "agent.compact")
    assert (event["trigger"], event["outcome"], event["kept_turns"]) == ("overflow", "ok", 2)
    store.assert_bill_exact(result.run_id, result.billed)


def test_nothing_left_to_summarise_is_context_exhausted_with_its_bill(store):
    fake = scripted(final_after=8, fake_window=1000)
    agent = Agent(gateway_for(fake), "Read every page.", [pages(4400)], max_turns=12, max_tokens=MAX_TOKENS,
                  compact=Compaction(keep_turns=1))
    with pytest.raises(WorkbenchError) as caught:
        agent.run()
    assert caught.value.code == "WB_AGENT_CONTEXT_EXHAUSTED" and "nothing older" in caught.value.cause
    row = store.assert_bill_exact(store.run(name="agent")["run_id"], billed_of(caught.value))
    assert (row["billed_calls"], row["error_code"]) == (1, "WB_AGENT_CONTEXT_EXHAUSTED")


def test_a_second_refusal_after_the_forced_compaction_is_context_exhausted(store):
    sizes = iter([100, 4400, 4400, 4400])

    def fetch(page: int) -> str:
        """Fetch one page."""
        return "x" * next(sizes)

    fake = scripted(final_after=8, fake_window=1000)
    agent = Agent(gateway_for(fake), "Read every page.", [fetch], max_turns=12, max_tokens=MAX_TOKENS,
                  compact=Compaction(keep_turns=1))
    with pytest.raises(WorkbenchError) as caught:
        agent.run()
    error = caught.value
    assert error.code == "WB_AGENT_CONTEXT_EXHAUSTED" and "still does not fit after 1 turn(s) were summarised" in error.cause
    run_id = store.run(name="agent")["run_id"]
    calls = store.calls(run_id)
    assert [c["http_status"] for c in calls] == [200, 200, 400, 200, 400]  # turn, turn, refused, summary, refused
    row = store.assert_bill_exact(run_id, billed_of(error))
    assert row["billed_calls"] == 3
    [compaction] = store.rows("SELECT * FROM compactions WHERE run_id = ?", run_id)
    assert (compaction["outcome"], compaction["summarised_turns"], compaction["cost_micros"]) == (
        "ok", 1, calls[3]["cost_micros"])


def test_a_failed_summary_keeps_the_run_whole_while_it_fits(store):
    fake = scripted(final_after=8, summary=Reply(text="half a summ", stop_reason="max_tokens"))
    agent = Agent(gateway_for(fake), "Read every page.", [pages(800)], max_turns=20, max_tokens=MAX_TOKENS)
    result = agent.run()
    assert result.output == "done"
    rows = store.rows("SELECT * FROM compactions WHERE run_id = ? ORDER BY occurred_at", result.run_id)
    # ONE billed attempt: the next one waits until the request no longer fits (it always did here)
    assert len(rows) == 1 and all(r["outcome"] == "failed" and r["summarised_turns"] == 0 for r in rows)
    assert len([r for r in fake.requests if is_summary(r)]) == 1
    summaries = [c for c, r in zip(store.calls(result.run_id), fake.requests) if is_summary(r)]
    assert [r["cost_micros"] for r in rows] == [c["cost_micros"] for c in summaries]
    assert all(r["tokens_after"] == r["tokens_before"] for r in rows)
    last = agent_requests(fake)[-1].json
    assert len(last["messages"]) == 1 + 2 * 8  # nothing was dropped
    store.assert_bill_exact(result.run_id, result.billed)


def test_a_failed_summary_is_tried_again_only_when_the_run_no_longer_fits(store):
    fake = scripted(final_after=30, summary=Reply(text="", stop_reason="end_turn"))
    infos = []
    agent = Agent(gateway_for(fake), "Read every page.", [pages(800)], max_turns=30, max_tokens=MAX_TOKENS,
                  on_compact=infos.append)
    with pytest.raises(WorkbenchError) as caught:
        agent.run()
    error = caught.value
    assert error.code == "WB_AGENT_CONTEXT_EXHAUSTED" and "the summary failed" in error.cause
    assert len([r for r in fake.requests if is_summary(r)]) == 2 == len(infos)
    first, second = infos
    assert first.tokens_before <= ROOM < second.tokens_before  # the retry waited for the overflow
    assert second.turn > first.turn + 1 and all(info.outcome == "failed" for info in infos)
    row = store.assert_bill_exact(store.run(name="agent")["run_id"], billed_of(error))
    assert row["billed_calls"] == len(fake.requests)


@pytest.mark.parametrize("narrow_window", [9_000, 5_000])
def test_turns_too_long_for_the_summary_model_are_sent_as_clipped_text(store, narrow_window):
    import workbench

    common = {"provider": "anthropic", "input": 300, "output": 1500, "source": "test", "as_of": "2026-01-01"}
    workbench.register_model(id="claude-wide", context_window=14_000, max_output=1024, **common)
    workbench.register_model(id="claude-narrow", context_window=narrow_window, max_output=1024, **common)
    fake = scripted(final_after=12)
    provider = AnthropicProvider("http://wide.test", "k", ["claude-wide", "claude-narrow"],
                                 transport=AsyncFakeTransport(fake))
    infos = []
    agent = Agent(Gateway([provider], "claude-wide"), "Read every page.", [pages(6000)], max_turns=20,
                  max_tokens=MAX_TOKENS, compact=Compaction(keep_turns=1, model="claude-narrow"),
                  on_compact=infos.append)
    result = agent.run()
    assert result.output == "done"
    info = infos[0]
    assert (info.outcome, info.summary_input, info.model) == ("ok", "text", "claude-narrow")
    if narrow_window == 9_000:  # clipping the oldest results is enough
        assert 1 <= info.clipped < info.summarised_turns and info.omitted == 0
    else:  # every result clipped, then the oldest left out; never a turn dropped
        assert info.clipped == info.summarised_turns and info.omitted >= 1
    [summary, *_] = [r for r in fake.requests if is_summary(r)]
    assert summary.json["model"] == "claude-narrow" and len(summary.json["messages"]) == 1
    text = summary.json["messages"][0]["content"][1]["text"]
    assert "characters clipped" in text and text.count("[turn ") == info.summarised_turns
    assert text.count("characters left out to fit]") == info.omitted
    assert summary.json["max_tokens"] == MAX_TOKENS
    # only the summary call's input was shortened: the run's kept turn went on as it was
    later = [r for r in fake.requests if not is_summary(r)][info.turn - 1]
    assert "characters clipped" not in later.body.decode()
