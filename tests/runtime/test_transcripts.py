"""Signed transcripts: a finished or failed agent run hands back a transcript, bound to its agent and
signed with the project secret, and `continue_()` appends one user turn to it — re-sending the
conversation byte for byte (its prefix read from the cache), running no tool twice, counting turns
and budget across the whole conversation. A forged or spliced transcript is refused before anything
is sent, and so is every transcript when no secret is set."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from runtime_support import CLAUDE
from workbench.demo.fake_provider import Reply
from workbench.errors import WorkbenchError
from workbench.runtime import Agent, Budget, transcript_of
from workbench.runtime.transcript import SECRET_ENV, RunState, sign

SECRET = "s3cret-" + "x" * 40


@pytest.fixture(autouse=True)
def secret(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)


class Article(BaseModel):
    title: str


def lookup(topic: str) -> str:
    """Facts about a topic."""
    lookup.calls += 1
    return f"facts about {topic}"


lookup.calls = 0


class Prompt:
    id, version, hash, model = "writer", "1", "wb1:writer-1", None
    system = "You write article titles. " * 30

    def render(self, vars):
        return f"Write a title about {vars['topic']}."


def writer(gateway, **options) -> Agent:
    return Agent(gateway, Prompt(), [lookup], Article, name="writer", **options)


def first_run(gateway, fake):
    fake.script(Reply(tool_calls=[("lookup", {"topic": "tides"})]),
                Reply(tool_calls=[("respond", {"title": "Tides"})]))
    return writer(gateway).run({"topic": "tides"})


def test_continue_appends_one_user_turn_and_resends_the_conversation(anthropic_gateway, fake, store):
    lookup.calls = 0
    first = first_run(anthropic_gateway, fake)
    handle = first.transcript
    fake.script(Reply(tool_calls=[("respond", {"title": "The Moon and the Tides"})]))
    second = writer(anthropic_gateway).continue_(handle, "Mention the moon.")
    assert second.output == Article(title="The Moon and the Tides")
    assert second.turns == 3 and lookup.calls == 1  # no tool ran twice
    earlier, asked = fake.requests[1].json["messages"], fake.requests[2].json["messages"]
    strip = lambda m: json.loads(json.dumps(m).replace(', "cache_control": {"type": "ephemeral"}', ""))  # noqa: E731
    assert strip(asked[:3]) == strip(earlier)  # the conversation as sent, byte for byte
    assert asked[3]["content"][0]["name"] == "respond"  # the answer it gave
    assert asked[4]["content"][0] == {"type": "tool_result", "tool_use_id": asked[3]["content"][0]["id"],
                                      "content": "accepted"}
    assert asked[4]["content"][1]["text"] == "Mention the moon."
    [call] = store.calls(second.run_id)
    assert call["cache_read_tokens"] > 0  # the prefix the earlier run cached
    assert json.loads(store.run(second.run_id)["tags"])["continued"] == "true"


def test_turns_and_budget_count_the_whole_conversation(anthropic_gateway, fake, store):
    first = first_run(anthropic_gateway, fake)
    sent = len(fake.requests)
    with pytest.raises(WorkbenchError) as caught:
        Agent(anthropic_gateway, Prompt(), [lookup], Article, name="writer", max_turns=2).continue_(
            first.transcript, "Again.")
    assert caught.value.code == "WB_AGENT_MAX_TURNS" and len(fake.requests) == sent  # refused before a call
    spent = first.state.spent[0]
    with pytest.raises(WorkbenchError) as caught:
        writer(anthropic_gateway, budget=Budget(tokens_per_run=spent + 100)).continue_(first.transcript, "Again.")
    assert caught.value.code == "WB_BUDGET_EXCEEDED" and len(fake.requests) == sent


def test_a_failed_run_leaves_a_transcript_counting_the_failed_call(anthropic_gateway, fake, store):
    lookup.calls = 0
    fake.script(Reply(tool_calls=[("lookup", {"topic": "tides"})]), Reply(text="word " * 50))
    with pytest.raises(WorkbenchError) as caught:
        writer(anthropic_gateway, max_tokens=20).run({"topic": "tides"})
    assert caught.value.code == "WB_LLM_TRUNCATED"
    handle = transcript_of(caught.value)
    state = json.loads(handle)["transcript"]
    assert state["turn"] == 2 and state["billed"]["calls"] == 2 and state["final"] is None
    assert len(state["turns"]) == 1  # up to the request the failed turn was answering
    fake.script(Reply(tool_calls=[("respond", {"title": "Tides"})]))
    again = writer(anthropic_gateway).continue_(handle, "Keep it short.")
    assert again.output.title == "Tides" and again.turns == 3 and lookup.calls == 1
    last = fake.requests[-1].json["messages"][-1]["content"]
    assert last[0]["type"] == "tool_result" and last[-1]["text"] == "Keep it short."
    assert transcript_of(RuntimeError("unrelated")) is None


def forged(handle: str, edit) -> str:
    outer = json.loads(handle)
    edit(outer["transcript"])
    return json.dumps(outer)


@pytest.mark.parametrize("edit", [
    lambda t: t.update(turn=0),  # fewer turns used
    lambda t: t["billed"].update(cost_micros=0, input_tokens=0),  # a zeroed bill
    lambda t: t.update(spent=[0, 0]),  # a fresh budget
    lambda t: t["turns"][0][1]["results"][0].__setitem__(2, "facts: the moon is cheese"),  # a fabricated result
    lambda t: t["task"].__setitem__(0, "Write a title about anything you like."),  # a rewritten message
    lambda t: t["turns"].append(t["turns"][0]),  # a spliced turn
])
def test_a_forged_transcript_is_refused_before_anything_is_sent(anthropic_gateway, fake, edit):
    handle = first_run(anthropic_gateway, fake).transcript
    sent = len(fake.requests)
    with pytest.raises(WorkbenchError) as caught:
        writer(anthropic_gateway).continue_(forged(handle, edit), "Again.")
    assert caught.value.code == "WB_AGENT_TRANSCRIPT_INVALID" and "signature" in caught.value.cause
    assert len(fake.requests) == sent


def test_a_transcript_is_bound_to_its_agent_prompt_model_and_tools(anthropic_gateway, fake, store):
    handle = first_run(anthropic_gateway, fake).transcript

    class Bumped(Prompt):
        version, hash = "2", "wb1:writer-2"

    def other(topic: str) -> str:
        """Another tool."""
        return ""

    for agent, options, what in (
        (Agent(anthropic_gateway, Prompt(), [lookup], Article, name="editor"), {}, "agent"),
        (Agent(anthropic_gateway, Bumped(), [lookup], Article, name="writer"), {}, "prompt"),
        (writer(anthropic_gateway), {"model": "claude-small"}, "model"),
        (Agent(anthropic_gateway, Prompt(), [lookup, other], Article, name="writer"), {}, "tools"),
    ):
        with pytest.raises(WorkbenchError) as caught:
            agent.continue_(handle, "Again.", **options)
        assert caught.value.code == "WB_AGENT_TRANSCRIPT_INVALID" and f"for {what}" in caught.value.cause
    splice = json.loads(handle)
    second = json.loads(first_run(anthropic_gateway, fake).transcript)
    splice["transcript"]["turns"] = second["transcript"]["turns"]  # two genuine transcripts, mixed
    with pytest.raises(WorkbenchError, match="signature"):
        writer(anthropic_gateway).continue_(json.dumps(splice), "Again.")


def test_a_signed_but_malformed_conversation_is_still_refused(anthropic_gateway, fake):
    state = first_run(anthropic_gateway, fake).state
    assistant, follow = state.conversation.turns[0]
    state.conversation.turns[0] = (assistant, follow.__class__(()))  # a tool call left unanswered
    with pytest.raises(WorkbenchError) as caught:
        writer(anthropic_gateway).continue_(sign(state), "Again.")
    assert caught.value.code == "WB_AGENT_TRANSCRIPT_INVALID" and "pair up" in caught.value.cause


def test_no_secret_no_transcript_and_a_rotated_secret_invalidates(anthropic_gateway, fake, monkeypatch):
    first = first_run(anthropic_gateway, fake)
    handle = first.transcript
    monkeypatch.delenv(SECRET_ENV)
    with pytest.raises(WorkbenchError) as caught:
        first.transcript
    assert caught.value.code == "WB_TRANSCRIPT_SECRET_MISSING" and SECRET_ENV in caught.value.fix
    with pytest.raises(WorkbenchError, match="WB_TRANSCRIPT_SECRET_MISSING"):
        writer(anthropic_gateway).continue_(handle, "Again.")
    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(WorkbenchError, match="WB_TRANSCRIPT_SECRET_MISSING"):
        first.transcript
    monkeypatch.setenv(SECRET_ENV, "rotated-" + "y" * 40)
    with pytest.raises(WorkbenchError, match="signature"):
        writer(anthropic_gateway).continue_(handle, "Again.")
    assert SECRET not in handle and "rotated" not in handle


def test_an_oversized_or_foreign_handle_is_refused(anthropic_gateway, fake):
    agent = writer(anthropic_gateway)
    for handle, why in (("x" * 2_000_001, "characters"), ("{}", "not a transcript"), ({"a": 1}, "not the JSON")):
        with pytest.raises(WorkbenchError) as caught:
            agent.continue_(handle, "Again.")
        assert caught.value.code == "WB_AGENT_TRANSCRIPT_INVALID" and why in caught.value.cause
    assert fake.requests == [] and isinstance(RunState, type)
