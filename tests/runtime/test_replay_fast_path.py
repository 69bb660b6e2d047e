"""The replay fast path: a runtime provider's call is answered from the cassette's index without
httpx2's request and response machinery, and must leave EXACTLY what the full path leaves: the same
call rows (bodies, redaction, bills), spans, span events, runs and eval results, the same cassette
behaviour (recorded order, retries, a missing recording's WB_REPLAY_MISS), the same errors. Each
scenario is recorded once from the fake provider over 127.0.0.1, then replayed twice into fresh
stores: through the fast path, and through the full path (the replay transport with its fast path
switched off: `fast_path=False`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx2
import pytest
from opentelemetry import context as otel_context
from pydantic import BaseModel

from runtime_support import CLAUDE, GPT, Store, register_models
from workbench.capture import configure, recorder
from workbench.demo.fake_provider import Reply
from workbench.errors import WorkbenchError
from workbench.evaluate import define_eval, define_prompt, exact
from workbench.evaluate.gate import evaluate
from workbench.evaluate.runner import Network
from workbench.replay.clients import AsyncReplayTransport
from workbench.replay.session import Cassette
from workbench.runtime import AnthropicProvider, Gateway, OpenAIProvider, RetryPolicy, llm_async
from workbench.runtime.messages import ModelRequest, UserMessage

OPENAI_KEY = "sk-" + "proj-fastpath0123456789abcdefghijklmnop"  # in pieces: no whole key in the tree
ANTHROPIC_KEY = "sk-" + "ant-api03-fastpath0123456789abcdefghij"
VOLATILE = {"started_at", "ended_at", "first_byte_at", "start_time", "end_time", "time", "occurred_at",
            "ingested_at", "created_at", "process_lock", "latency_ms"}


class Verdict(BaseModel):
    label: str


async def _no_sleep(delay: float) -> None:
    pass


def _gateway(base_url: str, transport) -> Gateway:
    return Gateway(
        [OpenAIProvider(f"{base_url}/v1", OPENAI_KEY, [GPT], transport=transport),
         AnthropicProvider(base_url, ANTHROPIC_KEY, [CLAUDE], transport=transport)],
        default_model=GPT, retry=RetryPolicy(max_retries=2, sleep=_no_sleep, random=lambda: 0.5),
    )


def _script(fake) -> None:
    fake.script(
        "plain text answer",
        Reply(tool_calls=[("respond", {"label": "spam"})]),
        Reply(status=429, retry_after=0),  # retried: the 200 behind it answers
        "after the retry",
        Reply(status=400, error_message=f"your key {OPENAI_KEY} is not valid here"),  # echoed: masked
        "an anthropic answer",
        Reply(text="a streamed answer"),
        Reply(text="a body cut half way", cut_after_events=1),  # handed to the full path, which raises the cut
        "after the cut",
    )


async def _scenario(gateway: Gateway, replaying: bool = True) -> list:
    """Every kind of call, in order; what each returned or raised (as text). Replaying, one more
    request that was never recorded."""
    outcomes: list = []

    async def attempt(make):
        try:
            outcomes.append(repr(await make()))
        except WorkbenchError as exc:
            outcomes.append(f"{exc.code}: {exc.cause}")

    await attempt(lambda: llm_async(gateway, "Say {{x}}", {"x": "hello"}))
    await attempt(lambda: llm_async(gateway, "Classify {{x}}", {"x": "buy now"}, output=Verdict))
    await attempt(lambda: llm_async(gateway, "Retry {{x}}", {"x": "me"}))
    await attempt(lambda: llm_async(gateway, "Refused {{x}}", {"x": "me"}))
    await attempt(lambda: llm_async(gateway, "Claude {{x}}", {"x": "hi"}, model=CLAUDE))

    async def streamed():
        request = ModelRequest(model=GPT, messages=[UserMessage(("Stream it",))], max_tokens=64)
        return [part if isinstance(part, str) else part.text async for part in gateway.stream(request)]

    await attempt(streamed)
    await attempt(lambda: llm_async(gateway, "Cut {{x}}", {"x": "short"}))  # retried after the cut
    if replaying:
        await attempt(lambda: llm_async(gateway, "Never recorded {{x}}", {"x": "anywhere"}))
    return outcomes


def _run(gateway: Gateway, scenario) -> list:
    async def main():
        try:
            return await scenario(gateway)
        finally:
            await gateway.release_loop()

    return asyncio.run(main())


def _stored(store: Store) -> dict[str, list[dict]]:
    """Every row the scenario left, ids renamed by first appearance and times dropped, so two runs
    compare equal exactly when they recorded the same things."""
    tables = {
        "runs": "SELECT * FROM runs ORDER BY started_at, name",
        "run_tags": "SELECT t.* FROM run_tags t JOIN runs r USING (run_id) ORDER BY r.started_at, t.key",
        "calls": "SELECT * FROM calls ORDER BY started_at",
        "call_bodies": "SELECT b.* FROM call_bodies b JOIN calls c USING (call_id) ORDER BY c.started_at",
        "spans": "SELECT * FROM spans ORDER BY start_time, name",
        "span_events": "SELECT e.* FROM span_events e JOIN spans s USING (span_id) ORDER BY s.start_time, e.seq",
        "eval_runs": "SELECT * FROM eval_runs",
        "eval_results": "SELECT * FROM eval_results ORDER BY case_id",
        "eval_samples": "SELECT * FROM eval_samples ORDER BY case_id, epoch",
    }
    names: dict[str, str] = {}

    def renamed(value):
        if isinstance(value, str):
            for known, alias in names.items():
                value = value.replace(known, alias)
        return value

    rows = {table: store.rows(sql) for table, sql in tables.items()}
    for table in rows.values():
        for row in table:
            for column in sorted(row):
                if column in ("run_id", "call_id", "span_id", "trace_id", "parent_span_id", "parent_run_id",
                              "eval_run_id", "replay_session") and row[column] and row[column] not in names:
                    names[row[column]] = f"<{column}#{len(names)}>"
    return {name: [{column: renamed(value) for column, value in row.items() if column not in VOLATILE}
                   for row in table] for name, table in rows.items()}


@pytest.fixture
def counted_sends(monkeypatch) -> list[str]:
    """The requests that went through httpx2's client (the full path), by URL."""
    sent: list[str] = []
    original = httpx2.AsyncClient.send

    async def send(self, request, **kwargs):
        sent.append(str(request.url))
        return await original(self, request, **kwargs)

    monkeypatch.setattr(httpx2.AsyncClient, "send", send)
    return sent


def _replay(tmp_path: Path, cassette: Path, name: str, direct: bool, base_url: str):
    configure(db=tmp_path / f"{name}.duckdb")
    register_models()
    session = Cassette(cassette, "replay")
    transport = AsyncReplayTransport(session, httpx2.MockTransport(_refuse), fast_path=direct)
    outcomes = _run(_gateway(base_url, transport), _scenario)
    return outcomes, _stored(Store(tmp_path / f"{name}.duckdb")), session


def _refuse(request):
    raise AssertionError(f"network call in replay: {request.method} {request.url}")


def test_fast_path_stores_what_the_full_path_stores(tmp_path: Path, fake_provider, fake_url: str, counted_sends):
    cassette = tmp_path / "cassettes" / "scenario.json"
    configure(db=tmp_path / "record.duckdb")
    register_models()
    _script(fake_provider)
    recording = Cassette(cassette, "record")
    _run(_gateway(fake_url, AsyncReplayTransport(recording, httpx2.AsyncHTTPTransport())),
         lambda gateway: _scenario(gateway, replaying=False))
    recording.save()
    assert fake_provider.pending == 0  # every scripted answer was recorded

    counted_sends.clear()
    fast_outcomes, fast_rows, fast_session = _replay(tmp_path, cassette, "fast", True, "http://127.0.0.1:9")
    fast_sends = list(counted_sends)
    counted_sends.clear()
    full_outcomes, full_rows, full_session = _replay(tmp_path, cassette, "full", False, "http://127.0.0.1:9")

    # the fast path answered the plain calls itself: only the stream and the cut answer it handed
    # over went through the client; the full path sent all 10
    assert len(counted_sends) == 10
    assert len(fast_sends) == 2
    assert fast_outcomes[6] == repr("after the cut")
    assert fast_outcomes == full_outcomes
    assert fast_outcomes[0] == repr("plain text answer") and "after the retry" in fast_outcomes[2]
    assert fast_outcomes[3].startswith("WB_PROVIDER_ERROR") and fast_outcomes[-1].startswith("WB_PROVIDER_ERROR")
    assert "WB_REPLAY_MISS" in fast_outcomes[-1]
    for table, rows in full_rows.items():
        assert fast_rows[table] == rows, table
    calls = fast_rows["calls"]
    assert len(calls) == 10 and all(row["replayed"] for row in calls[:-1])
    assert (calls[-1]["replayed"], calls[-1]["http_status"]) == (False, 400)  # the miss: answered, never paid
    assert [row["error_type"] for row in calls if row["error_type"]] == [
        "requests", "invalid_request_error", "stream_cut", "WB_REPLAY_MISS"]
    # nothing secret kept, on either path: the key the 400 echoed is masked in the stored body
    stored = json.dumps(fast_rows, default=str)
    assert OPENAI_KEY not in stored and ANTHROPIC_KEY not in stored
    assert "your key" in stored
    # the same cassette behaviour: the same recordings played, the same miss kept
    assert fast_session.index.played == full_session.index.played
    assert [error.cause for error in fast_session.misses] == [error.cause for error in full_session.misses]
    assert len(fast_session.misses) == 1


@pytest.mark.parametrize("case", ["record mode", "filters", "capture off", "suppressed", "cookie kept", "auth",
                                  "closed client", "switched off"])
def test_fast_path_leaves_to_the_full_path(tmp_path: Path, case: str):
    """Where the fast path cannot answer exactly as the full path would, it declines (None) and
    the request is sent by the client as before."""
    configure(db=tmp_path / "wb.duckdb", **({"capture": False} if case == "capture off" else {}))
    session = Cassette(tmp_path / "c.json", "record" if case == "record mode" else "replay")
    if case == "filters":
        session.filters = type("Keep", (), {"request": lambda self, r: r, "response": lambda self, r: r})()
    transport = AsyncReplayTransport(session, httpx2.MockTransport(_refuse), fast_path=case != "switched off")
    client = httpx2.AsyncClient(auth=("user", "pass") if case == "auth" else None)
    if case == "cookie kept":
        client.cookies.set("session", "abc")
    url = httpx2.URL("http://127.0.0.1:9/v1/chat/completions")

    async def ask():
        if case == "closed client":
            await client.aclose()
        return await transport.answer_directly(client, "POST", url, b'{"model":"gpt-test"}', {})

    if case == "suppressed":  # OpenTelemetry's "do not record me", as an SDK's own exporter sets it
        token = otel_context.attach(otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            assert asyncio.run(ask()) is None
        finally:
            otel_context.detach(token)
    else:
        assert asyncio.run(ask()) is None
    assert session.misses == [] and not session.index.played  # nothing looked up, nothing taken
    assert recorder().settings.capture is (case != "capture off")


TICKETS = [("t1", "refund my order", "billing"), ("t2", "app crashes", "bug"), ("t3", "dark mode?", "other")]
CLASSIFIER = define_prompt("fastpath-classifier", "v1", system="Label the ticket.", template="{{ticket}}",
                           output=Verdict, model=GPT)


def _suite(tmp_path: Path, base_url: str, direct: bool):
    cases = [{"id": case_id, "vars": {"ticket": text}, "expected": {"label": label}} for case_id, text, label in TICKETS]

    def providers(transport):  # the eval's replay transport, made by the runner
        transport.fast_path = direct
        return [OpenAIProvider(f"{base_url}/v1", OPENAI_KEY, [GPT], transport=transport)]

    return define_eval(
        "fastpath", CLASSIFIER, cases, [exact("label")], cassette=tmp_path / "cassettes" / "fastpath.json",
        baseline=tmp_path / "fastpath.baseline.json", concurrency=1, epochs=2, providers=providers,
    )


def test_an_eval_replayed_through_the_fast_path_stores_the_same_results(tmp_path: Path, fake_provider, fake_url: str,
                                                                       counted_sends):
    """`workbench eval`'s own path: the same verdict, eval rows, calls and spans either way."""
    labels = ["billing", "billing", "bug", "other", "bug", "other"]  # some samples answer wrongly
    fake_provider.script(*(Reply(tool_calls=[("respond", {"label": label})]) for label in labels))
    configure(db=tmp_path / "record.duckdb")
    register_models()
    recorded = evaluate(_suite(tmp_path, fake_url, True), mode="record", record_baseline=True)
    assert recorded.exit_code == 0

    offline = Network(async_=lambda: httpx2.MockTransport(_refuse))
    outcomes, stored = {}, {}
    for name, direct in (("fast", True), ("full", False)):
        configure(db=tmp_path / f"{name}.duckdb")
        register_models()
        counted_sends.clear()
        outcome = evaluate(_suite(tmp_path, "http://127.0.0.1:9", direct), mode="replay", network=offline)
        outcomes[name] = (outcome.exit_code, outcome.eval_run.mean, len(counted_sends))
        stored[name] = _stored(Store(tmp_path / f"{name}.duckdb"))
    assert outcomes["fast"] == (0, recorded.eval_run.mean, 0)  # answered without the client, as recorded
    assert outcomes["full"] == (0, recorded.eval_run.mean, 6)
    assert 0 < recorded.eval_run.mean < 1
    for table, rows in stored["full"].items():
        assert stored["fast"][table] == rows, table
    assert len(stored["fast"]["eval_samples"]) == 6 and len(stored["fast"]["calls"]) == 6


def test_fast_path_keeps_no_client_alive_and_follows_its_headers(tmp_path: Path):
    """The merged request headers the fast path keeps for the next call are keyed on the headers
    themselves: a client whose headers change gets the new ones, and a client let go is freed."""
    import gc
    import weakref

    configure(db=tmp_path / "wb.duckdb")
    transport = AsyncReplayTransport(Cassette(tmp_path / "c.json", "replay"), httpx2.MockTransport(_refuse))
    client = httpx2.AsyncClient(headers={"x-team": "one"})
    url = httpx2.URL("http://127.0.0.1:9/v1/chat/completions")
    response = asyncio.run(transport.answer_directly(client, "POST", url, b'{"model":"gpt-test"}', {"x-call": "a"}))
    assert response.status_code == 400  # nothing recorded: the miss, answered directly
    assert transport._merged_headers(client, {"x-call": "a"})[1]["x-team"] == ["one"]
    client.headers["x-team"] = "two"
    merged, recorded = transport._merged_headers(client, {"x-call": "a"})
    assert (merged["x-team"], recorded["x-team"], recorded["x-call"]) == ("two", ["two"], ["a"])
    gone = weakref.ref(client)
    del client, response
    gc.collect()
    assert gone() is None
