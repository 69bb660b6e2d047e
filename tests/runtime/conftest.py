"""Runtime fixtures: an isolated store per test, the fake's models registered, gateways over the
fake (in-process here; over real HTTP through `fake_url` in the tests that need a socket)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime_support import CLAUDE, GPT, SMALL, Store, register_models
from workbench.capture import configure
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider
from workbench.runtime import AnthropicProvider, Gateway, OpenAIProvider, RetryPolicy


@pytest.fixture
def store(tmp_path: Path) -> Store:
    configure(db=tmp_path / "wb.duckdb")
    register_models()
    return Store(tmp_path / "wb.duckdb")


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def retry(sleeps: list[float]) -> RetryPolicy:
    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    return RetryPolicy(max_retries=2, sleep=sleep, random=lambda: 0.5)


@pytest.fixture
def fake() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def anthropic_gateway(store, fake, retry) -> Gateway:
    """In-process: Anthropic Messages wire for claude-test and claude-small."""
    provider = AnthropicProvider("http://anthropic.test", "sk-ant-test", [CLAUDE, SMALL],
                                 transport=AsyncFakeTransport(fake))
    return Gateway([provider], default_model=CLAUDE, retry=retry)


@pytest.fixture
def openai_gateway(store, fake, retry) -> Gateway:
    provider = OpenAIProvider("http://openai.test/v1", "sk-test", [GPT], transport=AsyncFakeTransport(fake))
    return Gateway([provider], default_model=GPT, retry=retry)
