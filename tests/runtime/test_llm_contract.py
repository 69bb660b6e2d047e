"""llm()'s contract rows: context overflow has its own code; prompt caching is off until asked for;
on_call sees every provider call; a streamed call yields unvalidated text then a validated value;
secrets are refused from the variables; the redactor sees everything before the provider does."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel, SecretStr

from runtime_support import CLAUDE, GPT
from workbench.capture import billed_of
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, Reply
from workbench.errors import WorkbenchError
from workbench.runtime import (
    AnthropicProvider, Budget, Gateway, OpenAIProvider, StreamChunk, TextPrompt, llm, llm_async, llm_stream,
)


class Answer(BaseModel):
    city: str
    population: int


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_context_overflow_is_its_own_code_never_a_provider_error(store, retry, sleeps, provider):
    model = CLAUDE if provider == "anthropic" else GPT
    fake = FakeProvider(context_window={model: 50})
    cls = AnthropicProvider if provider == "anthropic" else OpenAIProvider
    url = "http://x.test" if provider == "anthropic" else "http://x.test/v1"
    gateway = Gateway([cls(url, "k", [model], transport=AsyncFakeTransport(fake))], model, retry=retry)
    with pytest.raises(WorkbenchError) as caught:
        llm(gateway, "word " * 400)
    assert caught.value.code == "WB_LLM_CONTEXT_OVERFLOW" and "context window" in caught.value.cause
    assert len(fake.requests) == 1 and sleeps == []  # never retried: the same bytes get the same refusal
    row = store.run(name="llm")
    assert (row["error_code"], row["billed_calls"]) == ("WB_LLM_CONTEXT_OVERFLOW", 0)


def test_prompt_caching_is_off_by_default_and_on_when_asked(anthropic_gateway, fake, store):
    prompt = TextPrompt("Summarise {{text}}", system="You summarise. " * 50)
    fake.script("one", "two", "three")
    llm(anthropic_gateway, prompt, {"text": "a"})
    llm(anthropic_gateway, prompt, {"text": "b"}, prompt_cache="auto")
    llm(anthropic_gateway, prompt, {"text": "c"}, prompt_cache="auto")
    off, first, second = fake.requests
    assert "cache_control" not in off.body.decode()
    assert first.json["system"][0]["cache_control"] == {"type": "ephemeral"}
    calls = store.rows("SELECT cache_read_tokens, cache_write_tokens FROM calls ORDER BY started_at")
    assert (calls[0]["cache_read_tokens"], calls[0]["cache_write_tokens"]) == (0, 0)  # nothing written, no premium
    assert calls[2]["cache_read_tokens"] > 0  # the opted-in calls share the system block


def test_on_call_sees_each_provider_call_with_its_attempt_and_the_run(anthropic_gateway, fake, store):
    seen = []
    fake.script(Reply(tool_calls=[("respond", {"city": "Paris"})]),
                Reply(tool_calls=[("respond", {"city": "Paris", "population": 2})]))
    llm(anthropic_gateway, "Capital?", output=Answer, on_call=seen.append)
    assert [info.attempt for info in seen] == [1, 2]
    assert seen[0].repair_of is None and "population" in seen[1].repair_of
    calls = store.calls(store.run(name="llm")["run_id"])
    assert [info.cost_micros for info in seen] == [call["cost_micros"] for call in calls]
    assert [info.usage.output_tokens for info in seen] == [call["output_tokens"] for call in calls]
    assert (seen[0].run.calls, seen[1].run.calls) == (1, 2)  # the run so far, this call included
    assert seen[1].run.cost_micros == sum(call["cost_micros"] for call in calls)
    assert seen[0].provider == "anthropic.test" and seen[0].model == CLAUDE


def test_an_on_call_that_raises_fails_the_call(anthropic_gateway, fake):
    def broken(info):
        raise RuntimeError("observer down")

    fake.script("hi")
    with pytest.raises(RuntimeError, match="observer down"):
        llm(anthropic_gateway, "Hi", on_call=broken)


def test_a_prose_answer_with_a_fenced_json_block_parses(openai_gateway, fake):
    fake.script('Here you go:\n```json\n{"city": "Oslo", "population": 700000}\n```')
    assert llm(openai_gateway, "Capital of Norway?", output=Answer) == Answer(city="Oslo", population=700000)
    assert len(fake.requests) == 1  # no repair turn was needed


@pytest.mark.parametrize("gateway_name", ["anthropic_gateway", "openai_gateway"])
def test_a_stream_yields_unvalidated_text_then_a_validated_value(request, fake, store, gateway_name):
    gateway = request.getfixturevalue(gateway_name)
    answer = '{"city": "Lima", "population": 10000000}'
    fake.script(answer)
    chunks = list(llm_stream(gateway, "Capital of Peru? Answer in JSON.", output=Answer))
    texts = [chunk.text for chunk in chunks if chunk.type == "text"]
    assert len(texts) > 1 and "".join(texts) == answer  # increments, as the model wrote them
    assert chunks[-1] == StreamChunk("done", answer, Answer(city="Lima", population=10_000_000))
    body = fake.requests[0].json
    assert body["stream"] is True and "tools" not in body  # no respond tool: nothing would stream
    row = store.assert_bill_exact(store.run(name="llm")["run_id"])
    assert (row["status"], row["billed_calls"], row["billed_unsettled"]) == ("ok", 1, 0)


def test_a_stream_that_does_not_validate_is_stream_invalid_with_no_repair(anthropic_gateway, fake, store):
    fake.script("Lima, about ten million people.")

    async def main():
        texts = []
        with pytest.raises(WorkbenchError) as caught:
            async for chunk in llm_stream(anthropic_gateway, "Capital of Peru?", output=Answer):
                texts.append(chunk.text)
        return texts, caught.value

    texts, error = asyncio.run(main())
    assert "".join(texts) == "Lima, about ten million people."  # the consumer saw every token first
    assert error.code == "WB_LLM_STREAM_INVALID" and "llm(" in error.fix
    assert len(fake.requests) == 1
    row = store.assert_bill_exact(store.run(name="llm")["run_id"], billed_of(error))
    assert (row["error_code"], row["billed_calls"]) == ("WB_LLM_STREAM_INVALID", 1)


def test_a_stream_left_early_is_cut_and_releases_its_reservation(anthropic_gateway, fake, store):
    fake.script("word " * 300)

    async def main():
        from workbench.runtime import budget_scope

        with budget_scope(Budget(tokens_per_run=100_000)) as ledger:
            async for chunk in llm_stream(anthropic_gateway, "Talk.", max_tokens=2000):
                break  # the first chunk is enough
            return ledger

    ledger = asyncio.run(main())
    assert ledger.reserved_tokens == 0 and ledger.spent_tokens == 0
    row = store.run(name="llm")
    assert (row["status"], row["error_code"], row["billed_calls"], row["billed_unsettled"]) == (
        "failed", "WB_ABORTED", 0, 1)


def test_a_secret_typed_variable_is_refused_with_its_own_code(anthropic_gateway, fake):
    for variables in ({"key": SecretStr("sk-very-secret")}, {"user": {"token": SecretStr("t0k3n")}}):
        with pytest.raises(WorkbenchError) as caught:
            llm(anthropic_gateway, "Use {{key}} {{user}}", {"key": "x", "user": "y", **variables})
        assert caught.value.code == "WB_PROMPT_SECRET" and "SecretStr" in caught.value.cause
        assert "sk-very-secret" not in str(caught.value) and "t0k3n" not in str(caught.value)
    assert fake.requests == []


def test_the_redactor_sees_the_prompt_and_system_before_the_provider(store, fake):
    def redact(text: str) -> str:
        return text.replace("Ada Lovelace", "[name]")

    gateway = Gateway([AnthropicProvider("http://a.test", "k", [CLAUDE], transport=AsyncFakeTransport(fake))],
                      CLAUDE, redact=redact)
    fake.script("ok")
    llm(gateway, TextPrompt("Write to {{who}}.", system="Never name Ada Lovelace."), {"who": "Ada Lovelace"})
    body = fake.requests[0].body.decode()
    assert "Ada Lovelace" not in body and body.count("[name]") == 2
    row = store.run(name="llm")
    [span] = store.rows("SELECT attributes FROM spans WHERE span_id = ?", row["span_id"])
    assert json.loads(span["attributes"])["workbench.redacted"] is True


def test_llm_options_are_screened_before_anything_is_sent(anthropic_gateway, fake):
    for options in ({"max_tokens": float("nan")}, {"max_tokens": 0}, {"max_tokens": True},
                    {"temperature": float("nan")}, {"temperature": 3}, {"seed": 1.5}):
        with pytest.raises(WorkbenchError) as caught:
            llm(anthropic_gateway, "Hi", **options)
        assert caught.value.code == "WB_RUNTIME_OPTION_INVALID" and next(iter(options)) in caught.value.cause
    assert fake.requests == []


def test_async_llm_with_on_call_coroutine(anthropic_gateway, fake):
    seen = []

    async def on_call(info):
        seen.append(info.attempt)

    fake.script("hi")
    assert asyncio.run(llm_async(anthropic_gateway, "Hi", on_call=on_call)) == "hi"
    assert seen == [1]
