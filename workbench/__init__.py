"""Workbench: record, replay, evaluate and audit LLM calls.

The public API is below; each name is imported on first use, so `import workbench` stays cheap and
the SDKs and DuckDB load only when something needs them."""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "WorkbenchError": "workbench.errors",
    "register_model": "workbench.models",
    "Usage": "workbench.models",
    "Call": "workbench.wire",
    "run": "workbench.capture",
    "Run": "workbench.capture",
    "Billed": "workbench.capture",
    "billed_of": "workbench.capture",
    "event": "workbench.capture",
    "flush": "workbench.capture",
    "configure": "workbench.capture",
    "instrument": "workbench.capture",
    "uninstrument": "workbench.capture",
    "http_client": "workbench.replay.clients",
    "async_http_client": "workbench.replay.clients",
    "httpx_client": "workbench.replay.clients",
    "async_httpx_client": "workbench.replay.clients",
    "Cassette": "workbench.replay.session",
    "cassette": "workbench.replay.ambient",
    "Gateway": "workbench.runtime",
    "OpenAIProvider": "workbench.runtime",
    "AnthropicProvider": "workbench.runtime",
    "RetryPolicy": "workbench.runtime",
    "llm": "workbench.runtime",
    "llm_async": "workbench.runtime",
    "Agent": "workbench.runtime",
    "AgentResult": "workbench.runtime",
    "Budget": "workbench.runtime",
    "budget_scope": "workbench.runtime",
    "Compaction": "workbench.runtime",
    "tool": "workbench.runtime",
    "Tool": "workbench.runtime",
    "define_prompt": "workbench.evaluate",
    "define_eval": "workbench.evaluate",
    "assert_suite": "workbench.evaluate",
    "ReplayTransport": "workbench.replay.clients",
    "AsyncReplayTransport": "workbench.replay.clients",
    "RecordingTransport": "workbench.capture",
    "AsyncRecordingTransport": "workbench.capture",
    "HttpxRecordingTransport": "workbench.capture",
    "AsyncHttpxRecordingTransport": "workbench.capture",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
