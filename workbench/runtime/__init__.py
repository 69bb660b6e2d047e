"""The native runtime: a gateway over two wire formats, `llm()` (and `llm_stream()`), `Agent` with
tools, budgets, prompt-cache marks, auto-compaction, checkpoints and signed transcripts. Every call
goes through capture, so it is observed like any other client's: each turn is an `agent.turn` event,
each compaction an `agent.compact` event and a `compactions` row, each turn boundary a `checkpoints`
row, and every error raised after a call started carries the run's bill (and, for an agent, its
signed transcript)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# `llm` is also a submodule's name: bound here, so that importing that submodule first never leaves
# the module where the function belongs
from workbench.runtime.llm import CallInfo, llm, llm_async

if TYPE_CHECKING:  # for type checkers and readers; at run time each name is imported at its first use
    from workbench.runtime.agent import Agent, AgentResult
    from workbench.runtime.budget import Budget, budget_scope
    from workbench.runtime.checkpoint import CheckpointInfo
    from workbench.runtime.compaction import Compaction, CompactionInfo
    from workbench.runtime.gateway import ContextOverflowError, Gateway, RetryPolicy
    from workbench.runtime.loop import TurnInfo
    from workbench.runtime.messages import Completion, Document, Image, ModelRequest, ToolSpec, ToolUse
    from workbench.runtime.options import Limits
    from workbench.runtime.prompt import PromptLike, TextPrompt, prompt_fences
    from workbench.runtime.providers import AnthropicProvider, OpenAIProvider, Provider
    from workbench.runtime.response_cache import ResponseCache, acting_for
    from workbench.runtime.stream import LlmStream, StreamChunk, llm_stream
    from workbench.runtime.tools import Tool, tool
    from workbench.runtime.transcript import transcript_of

# each public name and the module that defines it: a command that needs `llm` or a provider (an eval)
# does not import the agent, its loop, compaction, checkpoints and transcripts
_HOME = {name: f"workbench.runtime.{module}" for module, names in {
    'agent': ['Agent', 'AgentResult'],
    'budget': ['Budget', 'budget_scope'],
    'checkpoint': ['CheckpointInfo'],
    'compaction': ['Compaction', 'CompactionInfo'],
    'gateway': ['ContextOverflowError', 'Gateway', 'RetryPolicy'],
    'loop': ['TurnInfo'],
    'messages': ['Completion', 'Document', 'Image', 'ModelRequest', 'ToolSpec', 'ToolUse'],
    'options': ['Limits'],
    'prompt': ['PromptLike', 'TextPrompt', 'prompt_fences'],
    'providers': ['AnthropicProvider', 'OpenAIProvider', 'Provider'],
    'response_cache': ['ResponseCache', 'acting_for'],
    'stream': ['LlmStream', 'StreamChunk', 'llm_stream'],
    'tools': ['Tool', 'tool'],
    'transcript': ['transcript_of'],
}.items() for name in names}


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'workbench.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next look-up is a plain one
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])


__all__ = [
    "Agent", "AgentResult", "AnthropicProvider", "Budget", "CallInfo", "CheckpointInfo", "Compaction",
    "CompactionInfo", "Completion", "ContextOverflowError", "Document", "Gateway", "Image", "Limits", "LlmStream",
    "ModelRequest", "OpenAIProvider", "PromptLike", "Provider", "ResponseCache", "RetryPolicy", "StreamChunk",
    "TextPrompt", "Tool", "ToolSpec", "ToolUse", "TurnInfo", "acting_for", "budget_scope", "llm", "llm_async",
    "llm_stream", "prompt_fences", "tool", "transcript_of",
]
