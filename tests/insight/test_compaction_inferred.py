"""Compactions inferred from raw traffic: a real third-party agent framework that summarises its
history (LangChain's SummarizationMiddleware) driven against the fake provider over HTTP, and
Workbench's own agent, whose reported compactions the traffic must match, never count twice."""

from __future__ import annotations

import workbench
from workbench.demo.fake_provider import FakeProvider, FakeRequest, Reply
from workbench.runtime.compaction import INSTRUCTIONS

CONTEXT = " Here is what I read so far, explain it in its light. " + "Workbench records calls and replays them. " * 20
SUMMARY = "SESSION INTENT: learn how Workbench replays and gates. SUMMARY: replay, gates and cassettes were explained."


def summariser(request: FakeRequest) -> Reply | None:
    text = request.body.decode()
    if "Context Extraction Assistant" in text or INSTRUCTIONS in text:
        return Reply(text=SUMMARY)
    return None  # the fake provider's echo


def _langchain_chat(fake_url: str, fake_server, model_name: str = "gpt-4o-mini"):
    """A LangChain agent whose SummarizationMiddleware summarises its history once; its run."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    fake_server.provider = FakeProvider(responder=summariser)
    model = ChatOpenAI(model=model_name, base_url=f"{fake_url}/v1", api_key="test-key", max_retries=0,
                       http_client=workbench.http_client())
    agent = create_agent(model, tools=[], system_prompt="You explain Workbench briefly.",
                         middleware=[SummarizationMiddleware(model=model, trigger=("messages", 6), keep=("messages", 2))],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    with workbench.run("langchain-chat") as chat:
        for question in ("What is replay?", "What is a gate?", "What is a cassette?", "What is a baseline?",
                         "What is a span?"):
            agent.invoke({"messages": [{"role": "user", "content": question + CONTEXT}]}, config)
    workbench.flush()
    return chat


def test_langchain_summarization_middleware_is_an_inferred_compaction(store, fake_url, _fake_server):
    chat = _langchain_chat(fake_url, _fake_server)
    rows = store.rows("SELECT * FROM compactions")
    assert len(rows) == 1, rows
    event = rows[0]
    assert event["source"] == "inferred" and event["detected"] and event["outcome"] == "ok"
    summary = store.one("SELECT c.call_id, c.cost_micros, c.currency FROM calls c JOIN call_bodies b USING (call_id) "
                        "WHERE b.output_text = ?", [SUMMARY])
    assert event["summary_call_id"] == summary["call_id"] and event["cost_micros"] == summary["cost_micros"]
    assert event["summary_currency"] == summary["currency"] == "USD"
    before, after = (store.one("SELECT input_tokens + cache_read_tokens + cache_write_tokens AS total, started_at "
                               "FROM calls WHERE call_id = ?", [event[key]]) for key in ("before_call_id", "after_call_id"))
    assert event["tokens_before"] == before["total"] > event["tokens_after"] == after["total"]
    assert before["started_at"] < after["started_at"]

    # the app reports the same compaction later (another process's spool, a later batch): the
    # reported row takes the inferred one's place, with what the traffic showed
    from workbench.capture.recorder import recorder

    recorder().spool.append("compaction", {
        "compaction_id": "reported-1", "run_id": chat.run_id, "occurred_at": after["started_at"].isoformat(),
        "outcome": "ok", "tokens_before": 9000, "tokens_after": 2000, "model": "gpt-4o-mini", "cost_micros": 5})
    workbench.flush()
    rows = store.rows("SELECT * FROM compactions")
    assert [(row["compaction_id"], row["source"], row["detected"], row["tokens_before"]) for row in rows] == [
        ("reported-1", "reported", True, 9000)]
    assert (rows[0]["before_call_id"], rows[0]["after_call_id"], rows[0]["summary_call_id"],
            rows[0]["summary_currency"]) == (event["before_call_id"], event["after_call_id"], event["summary_call_id"],
                                             event["summary_currency"])


def test_a_summary_priced_in_euros_is_shown_in_euros(store, fake_url, _fake_server, monkeypatch):
    """A summary call priced in euros (a project's negotiated price): the compaction stores its
    currency at ingestion, and the Compaction page labels its cost in euros, in the headline and in
    the reported-and-inferred table (which called every amount dollars)."""
    from fixtures.dashboard_app import render
    from workbench.money import format_amount

    workbench.register_model(id="wbt-eur-chat", provider="openai", currency="EUR", input=250, output=1000,
                             context_window=128_000, max_output=4096, source="negotiated price", as_of="2025-01-01")
    _langchain_chat(fake_url, _fake_server, "wbt-eur-chat")
    [event] = store.rows("SELECT * FROM compactions")
    summary = store.one("SELECT currency, cost_micros FROM calls WHERE call_id = ?", [event["summary_call_id"]])
    assert event["summary_currency"] == summary["currency"] == "EUR" and event["cost_micros"] == summary["cost_micros"] > 0
    at = render(store.path, monkeypatch, "compaction.py")
    assert {metric.label: metric.value for metric in at.metric}["Summary cost"] == format_amount(event["cost_micros"], "EUR")
    sources = next(frame.value for frame in at.dataframe if "source" in frame.value.columns)
    assert list(sources["summary"]) == [format_amount(event["cost_micros"], "EUR")]


TASK = "Read the handbook page by page, then answer: what is the refund window?"
PAGES = 12


def handbook_reader(request: FakeRequest) -> Reply | None:
    """The model of an agent that reads pages until the last, then answers; it summarises when asked."""
    import json
    import re

    text = request.body.decode()
    if INSTRUCTIONS in text:
        return Reply(text="Summary: the pages read so far say refunds are allowed within 30 days.")
    pages = [int(number) for number in re.findall(r'page (\d+):', json.dumps(request.json))]
    page = 1 + max(pages, default=0)
    if page > PAGES:
        return Reply(text="Refunds are allowed within 30 days.")
    return Reply(tool_calls=[("fetch", {"page": page})])


def test_the_runtimes_reported_compactions_are_matched_never_counted_twice(store, fake_url, _fake_server, monkeypatch):
    from workbench.runtime import Agent, AnthropicProvider, Gateway

    workbench.register_model(id="wbt-claude-small", provider="anthropic", input=100, output=500, cache_read=10,
                             cache_write_5m=125, context_window=6000, max_output=4096, source="tests", as_of="2025-01-01")
    _fake_server.provider = FakeProvider(responder=handbook_reader, context_window={"wbt-claude-small": 6000})

    def fetch(page: int) -> str:
        """Fetch one page of the handbook."""
        return f"page {page}: " + "policy text " * 150

    gateway = Gateway([AnthropicProvider(fake_url, "test-key", ["wbt-*"])], default_model="wbt-claude-small")
    result = Agent(gateway, TASK, [fetch], max_turns=PAGES + 2, max_tokens=300, name="handbook-reader").run()
    workbench.flush()
    reported = [info for info in result.compactions if info.outcome == "ok"]
    assert reported  # the runtime compacted (and reported it)

    rows = store.rows("SELECT * FROM compactions WHERE outcome = 'ok' ORDER BY occurred_at")
    assert len(rows) == len(reported)  # one row per compaction: the traffic's inference folded into it
    assert all(row["source"] == "reported" and row["detected"] for row in rows)
    for row, info in zip(rows, reported):
        assert row["tokens_before"] == info.tokens_before and row["cost_micros"] == info.cost_micros
        summary = store.one("SELECT b.output_text, c.run_id FROM calls c JOIN call_bodies b USING (call_id) "
                            "WHERE c.call_id = ?", [row["summary_call_id"]])
        assert summary["output_text"].startswith("Summary:")
        after = store.one("SELECT cache_write_tokens, cache_write_micros FROM calls WHERE call_id = ?",
                          [row["after_call_id"]])
        assert row["recache_write_tokens"] == after["cache_write_tokens"]
        assert row["recache_cost_micros"] == after["cache_write_micros"]

    # the pages: the Compaction page counts them once, as reported and seen in the traffic; the Run
    # explorer lists the agent's turns
    from fixtures.dashboard_app import render as page

    at = page(store.path, monkeypatch, "compaction.py")
    sources = next(df.value for df in at.dataframe if "seen_in_traffic" in df.value.columns)
    assert list(sources["source"]) == ["reported"] and list(sources["compactions"]) == [len(reported)]
    assert list(sources["seen_in_traffic"]) == [len(reported)]
    at = page(store.path, monkeypatch, "run_explorer.py", run_id=result.run_id)
    turns = next(df.value for df in at.dataframe if "turn" in df.value.columns and "tool_names" in df.value.columns)
    assert list(turns["turn"]) == list(range(1, result.turns + 1))
