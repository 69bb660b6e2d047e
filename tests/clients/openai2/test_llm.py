"""Simon Willison's `llm`, as its docs drive it from Python: a model declared in
`extra-openai-models.yaml` (its `api_base` the fake provider) and fetched with `llm.get_model` /
`llm.get_async_model`, prompted with and without streaming, recorded by `workbench.instrument()`
(llm builds its own openai client). The store must hold exactly what the fake provider served, each
call once, with exact counters and cost; a recorded cassette replays every call offline with the
same answers."""

from __future__ import annotations

import asyncio

import pytest
from fixtures.capture_store import check_live, check_replay
from fixtures.client_env import require

llm = require("llm")

PROMPT = "Say hello"


@pytest.fixture
def llm_home(tmp_path, monkeypatch):
    """llm's user folder, where its extra-openai-models.yaml lives; the key from the environment."""
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (tmp_path / "llm").mkdir()
    return tmp_path / "llm"


def _driver(home):
    def drive(url: str) -> list[str]:
        """prompt streamed (llm's default) and not, sync and async. Returns what the app saw."""
        (home / "extra-openai-models.yaml").write_text(
            f"- model_id: wbt-gpt\n  model_name: wbt-gpt\n  api_base: {url}/v1\n")
        model = llm.get_model("wbt-gpt")
        streamed = model.prompt(PROMPT)
        chunks = list(streamed)
        assert len(chunks) > 1  # streamed chunk by chunk
        seen = ["".join(chunks), model.prompt(PROMPT, stream=False).text()]

        async def go():
            amodel = llm.get_async_model("wbt-gpt")
            seen.append(await amodel.prompt(PROMPT, stream=False).text())
            seen.append("".join([chunk async for chunk in amodel.prompt(PROMPT)]))

        asyncio.run(go())
        return seen

    return drive


def test_every_llm_call_is_recorded_once_with_exact_usage_and_cost(instrumented, llm_home):
    check_live(_driver(llm_home), "echo: Say hello")


def test_llm_replays_offline_from_a_recorded_cassette(instrumented, llm_home, tmp_path):
    check_replay(_driver(llm_home), tmp_path / "llm.json")
