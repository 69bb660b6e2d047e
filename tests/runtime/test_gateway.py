"""The gateway: retries with full jitter and retry-after, never on other 4xx; fallback across
providers of the same model only; budgets that refuse before the call."""

from __future__ import annotations

import asyncio

import pytest

from runtime_support import CLAUDE, GPT
from workbench.capture import billed_of, run
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, Reply
from workbench.errors import WorkbenchError
from workbench.runtime import (
    AnthropicProvider, Budget, Gateway, ModelRequest, OpenAIProvider, RetryPolicy, budget_scope, llm, llm_async,
)
from workbench.runtime.messages import UserMessage


def test_retries_529_then_succeeds_over_real_http(store, fake_provider, fake_url, retry, sleeps):
    gateway = Gateway([AnthropicProvider(fake_url, "sk-ant-test", [CLAUDE])], CLAUDE, retry=retry)
    fake_provider.script(Reply(status=529), Reply(status=529), "finally")
    assert llm(gateway, "hi") == "finally"
    assert len(fake_provider.requests) == 3
    assert sleeps == [0.5 * 0.5, 0.5 * 1.0]  # full jitter: random() x min(max, base x 2**attempt)
    row = store.run(name="llm")
    calls = store.calls(row["run_id"])
    assert [call["http_status"] for call in calls] == [529, 529, 200]
    assert row["billed_calls"] == 1  # the errors were not billed
    retries = store.events(row["run_id"], "gateway.retry")
    assert [event["status"] for event in retries] == [529, 529]


def test_retry_after_is_honoured_up_to_its_ceiling(store, fake, sleeps):
    async def sleep(delay):
        sleeps.append(delay)

    policy = RetryPolicy(max_retries=3, retry_after_max_s=10, sleep=sleep, random=lambda: 1.0)
    gateway = Gateway([OpenAIProvider("http://openai.test/v1", "k", [GPT], transport=AsyncFakeTransport(fake))],
                      GPT, retry=policy)
    fake.script(Reply(status=429, retry_after=3), Reply(status=503, retry_after=120), Reply(status=408), "ok")
    assert llm(gateway, "hi") == "ok"
    assert sleeps == [3.0, 1.0, 2.0]  # 120 s is past the ceiling: the jittered delay instead


@pytest.mark.parametrize("status", [400, 401, 422])
def test_other_4xx_are_never_retried(store, anthropic_gateway, fake, sleeps, status):
    fake.script(Reply(status=status, error_message="bad request"), "never reached")
    with pytest.raises(WorkbenchError) as caught:
        llm(anthropic_gateway, "hi")
    assert caught.value.code == "WB_PROVIDER_ERROR" and f"HTTP {status}" in caught.value.cause
    assert len(fake.requests) == 1 and sleeps == []
    row = store.assert_bill_exact(store.run(name="llm")["run_id"], billed_of(caught.value))
    assert (row["error_code"], row["billed_calls"], row["billed_cost_micros"]) == ("WB_PROVIDER_ERROR", 0, 0)


def test_transport_errors_are_retried_and_spent_retries_are_a_provider_error(store, anthropic_gateway, fake, sleeps):
    fake.script(Reply(text="cut", cut_after_events=1), Reply(status=500), Reply(status=502))
    with pytest.raises(WorkbenchError) as caught:
        llm(anthropic_gateway, "hi")
    assert caught.value.code == "WB_PROVIDER_ERROR" and "after 3 attempts" in caught.value.cause
    assert len(sleeps) == 2
    row = store.assert_bill_exact(store.run(name="llm")["run_id"], billed_of(caught.value))
    assert (row["billed_calls"], row["billed_unsettled"]) == (0, 1)  # the cut call: counted, not estimated


def test_fallback_to_another_provider_of_the_same_model(store, retry, sleeps):
    primary, backup, other = FakeProvider(), FakeProvider(), FakeProvider()
    gateway = Gateway([
        OpenAIProvider("http://other.test/v1", "k", [GPT], name="other", transport=AsyncFakeTransport(other)),
        AnthropicProvider("http://primary.test", "k", [CLAUDE], name="primary", transport=AsyncFakeTransport(primary)),
        OpenAIProvider("http://backup.test/v1", "k", ["claude-*"], name="backup", transport=AsyncFakeTransport(backup)),
    ], CLAUDE, retry=retry)
    primary.script(*[Reply(status=500)] * 3)
    backup.script("from the backup")

    async def main():
        async with run("fallback"):
            request = ModelRequest(model=CLAUDE, messages=[UserMessage(("hi",))], max_tokens=100)
            return await gateway.complete(request)

    completion = asyncio.run(main())
    assert (completion.text, completion.provider, completion.model) == ("from the backup", "backup", CLAUDE)
    assert len(primary.requests) == 3 and len(backup.requests) == 1 and other.requests == []
    assert backup.requests[0].json["messages"] == [{"role": "user", "content": "hi"}]  # its own wire
    row = store.run(name="fallback")
    assert [call["provider"] for call in store.calls(row["run_id"])] == ["primary.test"] * 3 + ["backup.test"]
    [switch] = store.events(row["run_id"], "gateway.fallback")
    assert (switch["from_provider"], switch["to_provider"]) == ("primary", "backup")


def test_no_fallback_after_a_request_error(store, retry):
    primary, backup = FakeProvider(), FakeProvider()
    gateway = Gateway([
        AnthropicProvider("http://primary.test", "k", [CLAUDE], transport=AsyncFakeTransport(primary)),
        AnthropicProvider("http://backup.test", "k", [CLAUDE], transport=AsyncFakeTransport(backup)),
    ], CLAUDE, retry=retry)
    primary.script(Reply(status=400, error_message="messages: malformed"))
    with pytest.raises(WorkbenchError, match="malformed"):
        llm(gateway, "hi")
    assert backup.requests == []


def test_a_cost_per_call_budget_refuses_before_anything_is_sent(anthropic_gateway, fake, store):
    with pytest.raises(WorkbenchError) as caught:
        llm(anthropic_gateway, "hi", max_tokens=1000, budget=Budget(cost_per_call_micros=1_000_000))
    error = caught.value
    assert error.code == "WB_BUDGET_EXCEEDED" and "cost per call" in error.cause
    assert fake.requests == [] and billed_of(error) is None
    assert store.run(name="llm")["error_code"] == "WB_BUDGET_EXCEEDED"


def test_the_gateway_budget_is_each_runs_default(store, fake):
    gateway = Gateway([AnthropicProvider("http://a.test", "k", [CLAUDE], transport=AsyncFakeTransport(fake))],
                      CLAUDE, budget=Budget(tokens_per_run=500))
    with pytest.raises(WorkbenchError, match="tokens per run"):
        llm(gateway, "hi", max_tokens=600)
    fake.script("fits")
    assert llm(gateway, "hi", max_tokens=100) == "fits"
    assert llm(gateway, "hi", max_tokens=600, budget=Budget(tokens_per_run=5000)) == "echo: hi"


def test_concurrent_calls_reserve_before_they_send(anthropic_gateway, fake, store):
    """Two calls start together; the budget holds one worst case: debit-then-check refuses the
    second while the first is still in flight, so the fake sees one request, and after the first
    settles its unused reservation is released."""
    fake.script(Reply(text="slow", delay_s=0.2))
    worst = 2 * 1024  # far above one call's actual usage, below two worst cases

    async def main():
        with budget_scope(Budget(tokens_per_run=worst)) as ledger:
            results = await asyncio.gather(
                llm_async(anthropic_gateway, "first", max_tokens=1000),
                llm_async(anthropic_gateway, "second", max_tokens=1000),
                return_exceptions=True,
            )
            return results, ledger

    results, ledger = asyncio.run(main())
    assert results[0] == "slow"
    assert isinstance(results[1], WorkbenchError) and results[1].code == "WB_BUDGET_EXCEEDED"
    assert "held by calls in flight" in results[1].cause
    assert len(fake.requests) == 1
    assert ledger.reserved_tokens == 0 and 0 < ledger.spent_tokens < 100  # actual usage, not the worst case
