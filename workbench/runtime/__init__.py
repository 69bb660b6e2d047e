"""The native runtime: a gateway over two wire formats, `llm()` (and `llm_stream()`), `Agent` with
tools, budgets, prompt-cache marks, auto-compaction, checkpoints and signed transcripts. Every call
goes through capture, so it is observed like any other client's: each turn is an `agent.turn` event,
each compaction an `agent.compact` event and a `compactions` row, each turn boundary a `checkpoints`
row, and every error raised after a call started carries the run's bill (and, for an agent, its
signed transcript)."""

from __future__ import annotations

from workbench.runtime.agent import Agent, AgentResult
from workbench.runtime.budget import Budget, budget_scope
from workbench.runtime.checkpoint import CheckpointInfo
from workbench.runtime.compaction import Compaction, CompactionInfo
from workbench.runtime.gateway import ContextOverflowError, Gateway, RetryPolicy
from workbench.runtime.llm import CallInfo, llm, llm_async
from workbench.runtime.loop import TurnInfo
from workbench.runtime.messages import Completion, Document, Image, ModelRequest, ToolSpec, ToolUse
from workbench.runtime.options import Limits
from workbench.runtime.prompt import PromptLike, TextPrompt, prompt_fences
from workbench.runtime.providers import AnthropicProvider, OpenAIProvider, Provider
from workbench.runtime.response_cache import ResponseCache, acting_for
from workbench.runtime.stream import LlmStream, StreamChunk, llm_stream
from workbench.runtime.tools import Tool, tool
from workbench.runtime.transcript import transcript_of

__all__ = [
    "Agent", "AgentResult", "AnthropicProvider", "Budget", "CallInfo", "CheckpointInfo", "Compaction",
    "CompactionInfo", "Completion", "ContextOverflowError", "Document", "Gateway", "Image", "Limits", "LlmStream",
    "ModelRequest", "OpenAIProvider", "PromptLike", "Provider", "ResponseCache", "RetryPolicy", "StreamChunk",
    "TextPrompt", "Tool", "ToolSpec", "ToolUse", "TurnInfo", "acting_for", "budget_scope", "llm", "llm_async",
    "llm_stream", "prompt_fences", "tool", "transcript_of",
]
