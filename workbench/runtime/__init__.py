"""The native runtime: a gateway over two wire formats, `llm()`, `Agent` with tools, budgets,
prompt-cache marks and auto-compaction. Every call goes through capture, so it is observed like
any other client's: each turn is an `agent.turn` event, each compaction an `agent.compact` event
and a `compactions` row, and every error raised after a call started carries the run's bill."""

from __future__ import annotations

from workbench.runtime.agent import Agent, AgentResult, TurnInfo
from workbench.runtime.budget import Budget, budget_scope
from workbench.runtime.compaction import Compaction, CompactionInfo
from workbench.runtime.gateway import ContextOverflowError, Gateway, RetryPolicy
from workbench.runtime.llm import llm, llm_async
from workbench.runtime.messages import Completion, ModelRequest, ToolSpec, ToolUse
from workbench.runtime.prompt import PromptLike, TextPrompt
from workbench.runtime.providers import AnthropicProvider, OpenAIProvider, Provider
from workbench.runtime.tools import Tool, tool

__all__ = [
    "Agent", "AgentResult", "AnthropicProvider", "Budget", "Compaction", "CompactionInfo", "Completion",
    "ContextOverflowError", "Gateway", "ModelRequest", "OpenAIProvider", "PromptLike", "Provider",
    "RetryPolicy", "TextPrompt", "Tool", "ToolSpec", "ToolUse", "TurnInfo", "budget_scope", "llm",
    "llm_async", "tool",
]
