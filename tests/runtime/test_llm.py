"""llm(): plain text, structured output through `respond`, one repair turn, truncation, refusal,
model resolution — each failure with its exact bill in the store."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from runtime_support import CLAUDE, GPT, bodies
from workbench.capture import billed_of, run
from workbench.demo.fake_provider import Reply
from workbench.errors import WorkbenchError
from workbench.runtime import Gateway, TextPrompt, llm, llm_async


class Answer(BaseModel):
    city: str
    population: int


class Prompt:
    """A prompt as the evals layer defines it: any object with these attributes."""

    id, version, hash, model = "capital", "2", "wb1:abc", None
    system = "You answer geography questions."

    def render(self, vars):
        return f"What is the capital of {vars['country']}?"


def test_text_answer_is_recorded_under_an_llm_run_with_the_prompt(anthropic_gateway, fake, store):
    fake.script("Paris")
    assert llm(anthropic_gateway, Prompt(), {"country": "France"}) == "Paris"
    row = store.run(name="capital")
    assert (row["kind"], row["status"], row["prompt_id"], row["prompt_version"]) == ("llm", "ok", "capital", "2")
    [call] = store.calls(row["run_id"])
    assert (call["prompt_hash"], call["wire"], call["model_requested"]) == ("wb1:abc", "anthropic.messages", CLAUDE)
    body = fake.requests[0].json
    assert body["system"][0]["text"] == "You answer geography questions."
    assert body["messages"][0]["content"][0]["text"] == "What is the capital of France?"


def test_structured_output_through_one_respond_tool(openai_gateway, fake):
    fake.script(Reply(tool_calls=[("respond", {"city": "Paris", "population": 2_100_000})]))
    answer = llm(openai_gateway, "Capital of {{country}}?", {"country": "France"}, output=Answer)
    assert answer == Answer(city="Paris", population=2_100_000)
    body = fake.requests[0].json
    assert [tool["function"]["name"] for tool in body["tools"]] == ["respond"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "respond"}}
    assert body["tools"][0]["function"]["parameters"]["required"] == ["city", "population"]


def test_one_repair_turn_fixes_a_wrong_shape(anthropic_gateway, fake):
    fake.script(Reply(tool_calls=[("respond", {"city": "Paris"})]),
                Reply(tool_calls=[("respond", {"city": "Paris", "population": 2})]))
    assert llm(anthropic_gateway, Prompt(), {"country": "France"}, output=Answer).population == 2
    repair = fake.requests[1].json["messages"]
    assert [message["role"] for message in repair] == ["user", "assistant", "user"]
    result = repair[2]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True and "population" in result["content"]


def test_output_invalid_after_the_repair_turn_with_its_bill(anthropic_gateway, fake, store):
    fake.script(Reply(tool_calls=[("respond", {"city": "Paris"})]), Reply(text="It is Paris."))
    with pytest.raises(WorkbenchError) as caught:
        llm(anthropic_gateway, Prompt(), {"country": "France"}, output=Answer)
    assert caught.value.code == "WB_LLM_OUTPUT_INVALID"
    row = store.assert_bill_exact(store.run(name="capital")["run_id"], billed_of(caught.value))
    assert (row["status"], row["error_code"], row["billed_calls"]) == ("failed", "WB_LLM_OUTPUT_INVALID", 2)


def test_truncation_is_checked_before_validating(openai_gateway, fake, store):
    fake.script(Reply(tool_calls=[("respond", {"city": "Paris", "population": 1})], stop_reason="length"))
    with pytest.raises(WorkbenchError) as caught:
        llm(openai_gateway, "Capital?", output=Answer, max_tokens=50)
    assert caught.value.code == "WB_LLM_TRUNCATED" and "50 tokens" in caught.value.cause
    assert len(fake.requests) == 1  # a cut answer is not repaired
    store.assert_bill_exact(store.run(name="llm")["run_id"], billed_of(caught.value))


def test_a_long_text_hits_the_ceiling_honestly(anthropic_gateway, fake):
    fake.script("word " * 200)
    with pytest.raises(WorkbenchError) as caught:
        llm(anthropic_gateway, "Talk.", max_tokens=20)
    assert caught.value.code == "WB_LLM_TRUNCATED"
    assert billed_of(caught.value).output_tokens == 20


@pytest.mark.parametrize("gateway_name, reply", [
    ("openai_gateway", Reply(refusal="I can't help with that.")),
    ("anthropic_gateway", Reply(text="I can't help with that.", stop_reason="refusal")),
])
def test_refusal(request, fake, store, gateway_name, reply):
    gateway = request.getfixturevalue(gateway_name)
    fake.script(reply)
    with pytest.raises(WorkbenchError) as caught:
        llm(gateway, "Something bad", output=Answer)
    assert caught.value.code == "WB_LLM_REFUSED" and "can't help" in caught.value.cause
    row = store.assert_bill_exact(store.run(name="llm")["run_id"], billed_of(caught.value))
    assert row["error_code"] == "WB_LLM_REFUSED" and row["billed_calls"] == 1


def test_model_resolves_from_call_then_prompt_then_default(store, fake, anthropic_gateway):
    gateway = Gateway(anthropic_gateway.providers, default_model=None, retry=anthropic_gateway.retry)
    with pytest.raises(WorkbenchError) as caught:
        llm(gateway, "Hi")
    assert caught.value.code == "WB_MODEL_UNRESOLVED"
    with pytest.raises(WorkbenchError) as caught:
        llm(gateway, "Hi", model="claude-nope")
    assert caught.value.code == "WB_MODEL_UNKNOWN"
    with pytest.raises(WorkbenchError) as caught:
        llm(gateway, "Hi", model=GPT)  # registered, but no provider of this gateway lists it
    assert caught.value.code == "WB_MODEL_UNKNOWN" and "no provider" in caught.value.cause
    assert fake.requests == []  # nothing was sent
    assert billed_of(caught.value) is None
    failed = store.rows("SELECT error_code, billed_calls FROM runs WHERE status = 'failed' ORDER BY started_at")
    assert failed == [{"error_code": "WB_MODEL_UNRESOLVED", "billed_calls": None},
                      {"error_code": "WB_MODEL_UNKNOWN", "billed_calls": None},
                      {"error_code": "WB_MODEL_UNKNOWN", "billed_calls": None}]  # no call, no bill
    fake.script("from the prompt", "from the call")
    assert llm(gateway, TextPrompt("Hi", model=CLAUDE)) == "from the prompt"
    assert llm(gateway, TextPrompt("Hi", model="claude-nope"), model=CLAUDE) == "from the call"
    assert [body["model"] for body in bodies(fake)] == [CLAUDE, CLAUDE]


def test_an_unfilled_slot_is_a_render_error(anthropic_gateway, fake):
    with pytest.raises(WorkbenchError) as caught:
        llm(anthropic_gateway, "Capital of {{country}}?")
    assert caught.value.code == "WB_PROMPT_RENDER" and "country" in caught.value.cause
    assert fake.requests == []


def test_async_llm_nests_its_bill_in_the_enclosing_run(anthropic_gateway, fake, store):
    fake.script("a", "b")

    async def main():
        async with run("batch") as outer:
            await asyncio.gather(llm_async(anthropic_gateway, "one"), llm_async(anthropic_gateway, "two"))
            return outer

    outer = asyncio.run(main())
    assert outer.billed.calls == 2
    assert store.run(outer.run_id)["billed_calls"] == 2
    assert {row["parent_run_id"] for row in store.rows("SELECT * FROM runs WHERE kind = 'llm'")} == {outer.run_id}


def test_sync_llm_inside_a_running_loop(anthropic_gateway, fake):
    fake.script("from a thread")

    async def main():
        return llm(anthropic_gateway, "hi")

    assert asyncio.run(main()) == "from a thread"
