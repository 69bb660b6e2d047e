"""The small parts, without a store: cache-mark placement, tool schemas, prompts, ledgers."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from workbench.errors import WorkbenchError
from workbench.runtime import AnthropicProvider, Budget, ModelRequest, OpenAIProvider, TextPrompt, ToolSpec, tool
from workbench.runtime.budget import budget_scope, reserve
from workbench.runtime.caching import mark_anthropic
from workbench.runtime.messages import AssistantMessage, ToolResult, ToolResults, ToolUse, UserMessage
from workbench.runtime.tools import Tool

TOOLS = [ToolSpec("a", "A.", {"type": "object"}), ToolSpec("b", "B.", {"type": "object"})]


def conversation(turns: int) -> list:
    messages = [UserMessage(("task",))]
    for n in range(turns):
        use = ToolUse(f"t{n}", "a", "{}")
        messages += [AssistantMessage(None, (use,)), ToolResults((ToolResult(f"t{n}", "a", f"r{n}"),))]
    return messages


def marked(body: dict) -> list[dict]:
    blocks = [*body.get("tools", []), *body.get("system", [])]
    for message in body["messages"]:
        blocks += message["content"]
    return [block for block in blocks if "cache_control" in block]


def test_marks_the_stable_system_block_and_the_last_two_tails():
    request = ModelRequest("m", conversation(3), system="stable", system_dynamic="per run", tools=TOOLS)
    body = AnthropicProvider("http://x", "k", ["m"]).body(request)
    assert marked(body) == [body["system"][0], body["messages"][-3]["content"][-1], body["messages"][-1]["content"][-1]]
    assert "cache_control" not in body["system"][1]


def test_without_stable_system_text_the_tools_carry_the_first_mark():
    request = ModelRequest("m", conversation(0), system="", system_dynamic="per run", tools=TOOLS)
    body = AnthropicProvider("http://x", "k", ["m"]).body(request)
    assert marked(body) == [body["tools"][-1], body["messages"][0]["content"][0]]
    assert body["system"] == [{"type": "text", "text": "per run"}]  # the dynamic part is never marked


def test_never_more_than_four_marks_and_never_on_an_empty_block():
    body = {"system": [{"type": "text", "text": ""}], "tools": [],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": ""}]}]}
    assert mark_anthropic(body, stable_system=True) == 1
    assert "cache_control" in body["messages"][0]["content"][0]
    assert "cache_control" not in body["messages"][0]["content"][1] and "cache_control" not in body["system"][0]
    for turns in range(6):
        request = ModelRequest("m", conversation(turns), system="s", tools=TOOLS)
        assert 1 <= len(marked(AnthropicProvider("http://x", "k", ["m"]).body(request))) <= 4


def test_no_marks_when_caching_is_off_and_none_ever_for_openai():
    request = ModelRequest("m", conversation(2), system="s", tools=TOOLS, cache=False)
    assert marked(AnthropicProvider("http://x", "k", ["m"]).body(request)) == []
    request.cache = True
    assert "cache_control" not in str(OpenAIProvider("http://x/v1", "k", ["m"]).body(request))


class Search(BaseModel):
    query: str = Field(description="what to look for")
    limit: int = 5


def test_tool_schemas_come_from_type_hints():
    def lookup(city: str, days: int = 3, units: str | None = None) -> str:
        """Forecast for a city."""
        return ""

    spec = Tool.from_function(lookup).spec
    assert (spec.name, spec.description) == ("lookup", "Forecast for a city.")
    assert spec.schema["required"] == ["city"] and set(spec.schema["properties"]) == {"city", "days", "units"}

    @tool(name="web_search")
    def search(args: Search) -> list[str]:
        """Search the web."""
        return [args.query] * args.limit

    assert search.name == "web_search" and search.takes_model
    assert search.spec.schema["properties"]["query"]["description"] == "what to look for"


def test_text_prompt_renders_its_slots():
    assert TextPrompt("Hi {{ name }}, {{name}}!").render({"name": "Ada"}) == "Hi Ada, Ada!"
    with pytest.raises(WorkbenchError, match="WB_PROMPT_RENDER"):
        TextPrompt("Hi {{name}}").render({})


def test_a_refused_reservation_takes_nothing_from_any_ledger():
    with budget_scope(Budget(tokens_per_run=1000)) as outer:
        with budget_scope(Budget(tokens_per_run=300)) as inner:
            first = reserve(200, 0, "first")
            with pytest.raises(WorkbenchError) as caught:
                reserve(200, 0, "second")
            assert "100 tokens left of 300" in caught.value.cause and "200 tokens held" in caught.value.cause
            assert (outer.reserved_tokens, inner.reserved_tokens) == (200, 200)
            first.settle(50, 7)
            assert (outer.spent_tokens, outer.reserved_tokens, inner.spent_micros) == (50, 0, 7)
            reserve(250, 0, "third").release()
    assert inner.reserved_tokens == 0 and outer.reserved_tokens == 0
