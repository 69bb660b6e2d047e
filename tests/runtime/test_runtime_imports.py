"""`workbench.runtime` imports what a caller uses: an eval that needs a provider and `llm` does not
load the agent, its loop, compaction, checkpoints, tools and transcripts; every public name still
resolves, and `llm` is the function whichever module was imported first."""

from __future__ import annotations

import subprocess
import sys

import pytest

import workbench.runtime as runtime

AGENT_ONLY = ("agent", "loop", "compaction", "checkpoint", "tools", "transcript", "stream")


def _loaded_after(code: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def test_an_eval_path_does_not_import_the_agent_machinery():
    loaded = _loaded_after("from workbench.runtime import OpenAIProvider, AnthropicProvider, llm, llm_async\n"
                           "import workbench.runtime.prompt, workbench.runtime.gateway")
    assert "workbench.runtime.providers" in loaded
    assert not {f"workbench.runtime.{name}" for name in AGENT_ONLY} & loaded


def test_every_public_name_resolves_to_what_its_module_defines():
    import importlib

    for name in runtime.__all__:
        value = getattr(runtime, name)
        home = importlib.import_module(value.__module__)
        assert getattr(home, name) is value, name
    assert set(runtime.__all__) <= set(dir(runtime))


def test_llm_is_the_function_even_when_its_module_is_imported_first():
    loaded = subprocess.run(
        [sys.executable, "-c", "import workbench.runtime.llm\nfrom workbench.runtime import llm, Agent\n"
                               "print(callable(llm) and llm.__name__, Agent.__name__)"],
        capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == ["llm", "Agent"]


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="Agnet"):
        runtime.Agnet  # noqa: B018 - a misspelt name
