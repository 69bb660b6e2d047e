"""Crafted traffic with a known answer: a fake provider whose clock the test moves, and the calls
that put the prompt cache in each state a verdict names."""

from __future__ import annotations

import anthropic

import workbench
from workbench.demo.fake_provider import FakeProvider

MODEL = "wbt-claude-cache"  # min cacheable prefix 1024 tokens (tests/insight/conftest.py)
# about 1,500 tokens at the fake provider's 4 bytes a token: above the minimum
DOCS = "Workbench records every LLM call with its exact cost and replays it offline. " * 80
SHORT = "You answer in one word."  # far under the minimum


class Clock:
    """The fake provider's clock: starts at a fixed instant, moves only when told."""

    def __init__(self, start: float = 1_760_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def provider(clock: Clock) -> FakeProvider:
    """Anthropic-like caching: entries live 5 minutes from their last use, prefixes under 1,024
    tokens are not cached, and the clock is the test's."""
    return FakeProvider(clock=clock, cache_ttl_s=300, anthropic_min_cache_tokens=1024)


def claude(fake_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake_url, api_key="test-key", max_retries=0,
                               http_client=workbench.http_client())


def ask(client: anthropic.Anthropic, question: str, system: str | None = DOCS, marked: bool = True, **extra):
    blocks = [{"type": "text", "text": system, **({"cache_control": {"type": "ephemeral"}} if marked else {})}] \
        if system is not None else []
    return client.messages.create(model=MODEL, max_tokens=50, system=blocks,
                                  messages=[{"role": "user", "content": question}], **extra)
