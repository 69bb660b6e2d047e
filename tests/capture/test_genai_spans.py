"""The attribute styles `workbench collect` reads: which spans are model calls, and the four disjoint
usage counters each style's figures become (every style counts cached input inside its input)."""

from __future__ import annotations

import pytest

from workbench.capture.genai_spans import SpanProblem, is_call, provider_name, usage_of

CASES = {
    "current semantic conventions": {
        "gen_ai.usage.input_tokens": 1700, "gen_ai.usage.cache_read.input_tokens": 200,
        "gen_ai.usage.cache_creation.input_tokens": 500, "gen_ai.usage.output_tokens": 100,
        "gen_ai.usage.reasoning.output_tokens": 30},
    "older gen_ai names": {
        "gen_ai.usage.prompt_tokens": 1700, "gen_ai.usage.cache_read_input_tokens": 200,
        "gen_ai.usage.cache_creation_input_tokens": 500, "gen_ai.usage.completion_tokens": 100,
        "gen_ai.usage.reasoning_tokens": 30},
    "OpenLLMetry llm.usage": {
        "llm.usage.prompt_tokens": 1700, "llm.usage.cache_read_input_tokens": 200,
        "llm.usage.cache_creation_input_tokens": 500, "llm.usage.completion_tokens": 100,
        "gen_ai.usage.reasoning_tokens": 30},
    "OpenInference": {
        "llm.token_count.prompt": 1700, "llm.token_count.prompt_details.cache_read": 200,
        "llm.token_count.prompt_details.cache_write": 500, "llm.token_count.completion": 100,
        "llm.token_count.completion_details.reasoning": 30},
}


@pytest.mark.parametrize("style", CASES)
def test_every_style_counts_cached_input_inside_its_input(style):
    usage = usage_of(CASES[style])
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens,
            usage.reasoning_tokens) == (1000, 200, 500, 100, 30)


def test_an_input_smaller_than_its_cache_counters_is_taken_as_uncached():
    # an exporter that copied Anthropic's own input_tokens (uncached) into gen_ai.usage.input_tokens
    usage = usage_of({"gen_ai.usage.input_tokens": 12, "gen_ai.usage.cache_read.input_tokens": 4000,
                      "gen_ai.usage.output_tokens": 9})
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (12, 4000, 9)


def test_counts_sent_as_text_or_whole_doubles_are_read_and_anything_else_refused():
    assert usage_of({"gen_ai.usage.input_tokens": "40", "gen_ai.usage.output_tokens": 2.0}).input_tokens == 40
    assert usage_of({"gen_ai.request.model": "m"}) is None
    for bad in (-1, 2.5, "many", True, 2**62):
        with pytest.raises(SpanProblem, match="is not a token count"):
            usage_of({"gen_ai.usage.input_tokens": bad})


def test_only_model_calls_are_calls():
    assert is_call({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})
    assert is_call({"llm.request.type": "chat", "gen_ai.request.model": "m"})
    assert is_call({"openinference.span.kind": "LLM", "llm.model_name": "m"})
    assert is_call({"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 3})
    # an agent's or a chain's span that sums its calls' usage, a tool's span, a span without a model
    assert not is_call({"gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": "m",
                        "gen_ai.usage.input_tokens": 3})
    assert not is_call({"openinference.span.kind": "CHAIN", "llm.model_name": "m", "llm.token_count.prompt": 3})
    assert not is_call({"gen_ai.operation.name": "execute_tool", "gen_ai.request.model": "m"})
    assert not is_call({"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 3})


def test_provider_names_of_the_conventions_are_workbench_s():
    assert [provider_name(name) for name in ("Anthropic", "openai", "gcp.gemini", "azure.ai.openai", None)] == [
        "anthropic", "openai", "google", "azure", "unknown"]
