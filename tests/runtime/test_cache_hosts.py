"""Prompt caching per host, as the rule table says: OpenAI takes the caller's session as
`prompt_cache_key` (hashed past 64 characters), OpenRouter as an `x-session-id` header (and its
Anthropic models get cache marks on the chat wire), Anthropic marks and sends the session nowhere,
any other host gets neither."""

from __future__ import annotations

import hashlib

import pytest

import workbench
from runtime_support import CLAUDE, GPT
from workbench.demo.fake_provider import AsyncFakeTransport, Reply
from workbench.errors import WorkbenchError
from workbench.runtime import Agent, AnthropicProvider, Gateway, OpenAIProvider, llm
from workbench.runtime.caching import PROMPT_CACHE_RULES

OR_CLAUDE = "anthropic/claude-test"
OR_OTHER = "google/gemini-test"


@pytest.fixture
def openrouter_models(store):
    for model in (OR_CLAUDE, OR_OTHER):
        workbench.register_model(id=model, provider="openrouter", context_window=100_000, max_output=4096, input=100,
                                 output=500, source="test", as_of="2026-01-01")


def gateway(fake, base_url: str, models: list[str], cls=OpenAIProvider) -> Gateway:
    return Gateway([cls(base_url, "k", models, transport=AsyncFakeTransport(fake))], models[0])


def test_openai_gets_the_session_as_prompt_cache_key_and_no_marks(store, fake):
    fake.script("a", "b")
    direct = gateway(fake, "https://api.openai.com/v1", [GPT])
    llm(direct, "Hi", prompt_cache={"session": "kb:org-1"})
    long_key = "tenant:" + "x" * 80
    llm(direct, "Hi", prompt_cache={"session": long_key})
    first, second = (request.json for request in fake.requests)
    assert first["prompt_cache_key"] == "kb:org-1" and "cache_control" not in fake.requests[0].body.decode()
    assert second["prompt_cache_key"] == "h:" + hashlib.sha256(long_key.encode()).hexdigest()[:62]
    assert len(second["prompt_cache_key"]) == 64
    assert "x-session-id" not in fake.requests[0].headers


def test_openrouter_gets_the_session_header_and_marks_only_for_anthropic_models(openrouter_models, fake):
    fake.script(Reply(tool_calls=[("lookup", {"q": "a"})]), "done", "plain")
    router = gateway(fake, "https://openrouter.ai/api/v1", [OR_CLAUDE, OR_OTHER])

    def lookup(q: str) -> str:
        """Look it up."""
        return f"found {q}"

    Agent(router, "Find it.", [lookup], prompt_cache={"session": "kb:org-1"}, model=OR_CLAUDE).run(
        system_dynamic="Today.")
    llm(router, "Hi", model=OR_OTHER, prompt_cache={"session": "kb:org-1"})
    turn1, turn2, other = fake.requests
    assert turn1.headers["x-session-id"] == "kb:org-1" and other.headers["x-session-id"] == "kb:org-1"
    assert "prompt_cache_key" not in turn1.json
    messages = turn2.json["messages"]
    marked = [(index, part) for index, message in enumerate(messages) if isinstance(message["content"], list)
              for part in message["content"] if "cache_control" in part]
    # two breakpoints: the stable system part (none here: no stable system) and the tail
    assert [index for index, _ in marked] == [len(messages) - 1]
    assert messages[-1]["role"] == "tool" and marked[0][1]["text"] == "found a"
    assert "cache_control" not in other.body.decode()  # implicit caching elsewhere: a mark is a paid write


def test_anthropic_and_other_hosts_send_the_session_nowhere(store, fake):
    fake.script("a", "b")
    llm(gateway(fake, "http://proxy.test", [CLAUDE], AnthropicProvider), "Hi", prompt_cache={"session": "s1"})
    llm(gateway(fake, "http://vllm.internal/v1", [GPT]), "Hi", prompt_cache={"session": "s1"})
    for request in fake.requests:
        assert "s1" not in request.body.decode() and "x-session-id" not in request.headers
    assert "cache_control" in fake.requests[0].body.decode()  # any host speaking the Messages wire is marked


def test_a_session_header_must_be_printable_ascii(openrouter_models, fake):
    router = gateway(fake, "https://openrouter.ai/api/v1", [OR_OTHER])
    for session in ("tab\there", "é" * 3, "x" * 257):
        with pytest.raises(WorkbenchError) as caught:
            llm(router, "Hi", prompt_cache={"session": session})
        assert caught.value.code == "WB_RUNTIME_OPTION_INVALID"
    with pytest.raises(WorkbenchError, match="WB_RUNTIME_OPTION_INVALID"):
        llm(router, "Hi", prompt_cache={"session": ""})
    assert fake.requests == []


def test_the_rule_table_is_first_match():
    assert [(rule.host, rule.model_prefix, rule.marks, rule.session) for rule in PROMPT_CACHE_RULES] == [
        (None, None, "anthropic", "nowhere"), ("openrouter.ai", "anthropic/", "tail", "header"),
        ("openrouter.ai", None, "none", "header"), ("api.openai.com", None, "none", "body"),
        (None, None, "none", "nowhere")]
