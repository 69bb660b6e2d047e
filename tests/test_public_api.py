"""The public API is explicit: every name in `workbench.__all__` resolves, and the list is pinned."""

from __future__ import annotations

import subprocess
import sys

import workbench

PINNED = [
    "Agent", "AgentResult", "AnthropicProvider", "AsyncHttpxRecordingTransport", "AsyncRecordingTransport",
    "AsyncReplayTransport", "Billed", "Budget", "Call", "Cassette", "Compaction", "Gateway",
    "HttpxRecordingTransport", "OpenAIProvider", "RecordingTransport", "ReplayTransport", "RetryPolicy", "Run",
    "Tool", "Usage", "WorkbenchError", "assert_suite", "async_http_client", "async_httpx_client", "billed_of",
    "budget_scope", "cassette", "configure", "define_eval", "define_prompt", "event", "flush", "http_client", "httpx_client",
    "instrument", "llm", "llm_async", "register_model", "run", "tool", "uninstrument",
]


def test_all_is_pinned():
    assert sorted(workbench.__all__) == sorted(PINNED)


def test_every_exported_name_resolves():
    for name in workbench.__all__:
        assert getattr(workbench, name) is not None, name


def test_importing_workbench_loads_no_sdk_and_no_database():
    code = "import sys, workbench; print(sorted(m for m in ('openai', 'anthropic', 'duckdb', 'polars') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]"
