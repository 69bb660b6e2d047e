"""Budget rows: an answer without usage is charged an estimate to the ledger (never zero) while the
bill counts it unsettled; `tokens_in` bounds one call's input before it is sent; every numeric
option is screened where it is declared, with a WB_ code."""

from __future__ import annotations

import asyncio
import math

import pytest

from runtime_support import GPT
from workbench.demo.fake_provider import Reply
from workbench.errors import WorkbenchError
from workbench.models import Usage, price_with, registry
from workbench.runtime import (
    Agent, Budget, Compaction, Limits, ResponseCache, RetryPolicy, budget_scope, llm, llm_async,
)


def test_a_usage_less_answer_is_charged_an_estimate_while_the_bill_counts_it_unsettled(openai_gateway, fake, store):
    fake.script(Reply(text="an answer of some length", usage_reported=False))

    async def main():
        with budget_scope(Budget(tokens_per_run=10_000)) as ledger:
            await llm_async(openai_gateway, "Hi there", max_tokens=100)
            return ledger

    ledger = asyncio.run(main())
    row = store.run(name="llm")
    assert (row["billed_calls"], row["billed_unsettled"], row["billed_cost_micros"]) == (0, 1, 0)
    body = fake.requests[0].body
    input_estimate = math.ceil(len(body) / 4) + 1  # the reservation's input worst case
    output_estimate = math.ceil(len("an answer of some length") / 4)
    assert ledger.reserved_tokens == 0
    assert ledger.spent_tokens == input_estimate + output_estimate > 0
    estimate = Usage(input_tokens=input_estimate, output_tokens=output_estimate)
    assert ledger.spent_micros == price_with(registry.get(GPT), estimate).cost_micros > 0


def test_tokens_in_refuses_a_call_whose_input_is_over_it_before_it_is_sent(anthropic_gateway, fake, store):
    with pytest.raises(WorkbenchError) as caught:
        llm(anthropic_gateway, "word " * 400, budget=Budget(tokens_in=100))
    error = caught.value
    assert error.code == "WB_BUDGET_EXCEEDED" and "tokens in" in error.cause and "100" in error.cause
    assert fake.requests == []
    fake.script("fits")
    assert llm(anthropic_gateway, "short", budget=Budget(tokens_in=100)) == "fits"


def test_tokens_in_on_the_gateway_bounds_every_call(anthropic_gateway, fake):
    anthropic_gateway.budget = Budget(tokens_in=50)
    with pytest.raises(WorkbenchError, match="tokens in"):
        Agent(anthropic_gateway, "word " * 300).run()
    assert fake.requests == []


NAN = float("nan")


@pytest.mark.parametrize("make, name", [
    (lambda g: Agent(g, "Hi", max_tokens=NAN), "max_tokens"),
    (lambda g: Agent(g, "Hi", max_tokens=True), "max_tokens"),
    (lambda g: Agent(g, "Hi", max_turns=0), "max_turns"),
    (lambda g: Agent(g, "Hi", max_turns=2.5), "max_turns"),
    (lambda g: Agent(g, "Hi", max_tool_result_chars=-1), "max_tool_result_chars"),
    (lambda g: Agent(g, "Hi", max_repeated_tool_calls=1), "max_repeated_tool_calls"),
    (lambda g: Agent(g, "Hi", deadline_s=NAN), "deadline_s"),
    (lambda g: Agent(g, "Hi", deadline_s=0), "deadline_s"),
    (lambda g: Agent(g, "Hi", temperature=NAN), "temperature"),
    (lambda g: Agent(g, "Hi", compact="sometimes"), "compact"),
    (lambda g: Budget(tokens_per_run=NAN), "Budget.tokens_per_run"),
    (lambda g: Budget(cost_per_call_micros=0), "Budget.cost_per_call_micros"),
    (lambda g: Budget(tokens_in=1.5), "Budget.tokens_in"),
    (lambda g: Budget(tokens=5), "Budget.tokens"),
    (lambda g: Compaction(at=NAN), "Compaction.at"),
    (lambda g: Compaction(at=1.5), "Compaction.at"),
    (lambda g: Compaction(keep_turns=0), "Compaction.keep_turns"),
    (lambda g: Compaction(max_summary_tokens=NAN), "Compaction.max_summary_tokens"),
    (lambda g: Limits(max_turns=NAN), "limits.max_turns"),
    (lambda g: RetryPolicy(max_retries=NAN), "RetryPolicy.max_retries"),
    (lambda g: RetryPolicy(base_delay_s=NAN), "RetryPolicy.base_delay_s"),
    (lambda g: ResponseCache(max_entries=0), "ResponseCache.max_entries"),
])
def test_every_numeric_option_is_screened_at_declaration(anthropic_gateway, fake, make, name):
    with pytest.raises(WorkbenchError) as caught:
        make(anthropic_gateway)
    assert caught.value.code == "WB_RUNTIME_OPTION_INVALID" and caught.value.cause.startswith(name)
    assert fake.requests == []
