"""Failures are recorded too: HTTP errors (not settled, with their error type), retries (each attempt
its own row), a stream cut midway (`stream_cut`), a stream the caller abandons (`stream_abandoned`,
never drained), and a connection that never answered (`transport_error`)."""

from __future__ import annotations

import json
import socket
import threading
import time

import anthropic
import httpx2
import openai
import pytest
from fixtures.capture_store import expected_cost
from workbench.demo.fake_server import serve

import workbench
from workbench.demo.fake_provider import FakeProvider, FakeResponse, Reply

MESSAGES = [{"role": "user", "content": "hello"}]


def _openai(url: str, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=retries,
                         http_client=workbench.http_client())


def _anthropic(url: str, retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=retries,
                               http_client=workbench.http_client())


def _chat(url):
    return _openai(url).chat.completions.create(model="wbt-gpt", messages=MESSAGES)


def _responses(url):
    return _openai(url).responses.create(model="wbt-gpt", input="hello")


def _messages(url):
    return _anthropic(url).messages.create(model="wbt-claude", max_tokens=100, messages=MESSAGES)


@pytest.mark.parametrize(
    ("call", "status", "error_type", "exception"),
    [
        (_chat, 400, "invalid_request_error", openai.BadRequestError),
        (_chat, 429, "requests", openai.RateLimitError),
        (_chat, 500, "server_error", openai.InternalServerError),
        (_responses, 429, "requests", openai.RateLimitError),
        (_messages, 400, "invalid_request_error", anthropic.BadRequestError),
        (_messages, 429, "rate_limit_error", anthropic.RateLimitError),
        (_messages, 500, "api_error", anthropic.InternalServerError),
        (_messages, 529, "overloaded_error", anthropic.APIStatusError),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_http_error_recorded_not_settled(store, fake_provider, fake_url, call, status, error_type, exception):
    fake_provider.script(Reply(status=status, error_message=f"scripted {status}"))
    with workbench.run("errors") as run, pytest.raises(exception):
        call(fake_url)
    [row] = store.calls()
    assert row["http_status"] == status
    assert row["settled"] is False and row["error_type"] == error_type
    assert row["error_message"] == f"scripted {status}"
    assert row["cost_micros"] is None and row["output_tokens"] == 0
    assert row["run_id"] == run.run_id and row["request_id"] == "req_fake000001"
    # an answered error is not billed, nor counted as unsettled usage
    assert (run.billed.calls, run.billed.unsettled) == (0, 0)
    span = store.span(row["span_id"])
    assert span["status_code"] == "ERROR"
    attributes = json.loads(span["attributes"])
    assert attributes["error.type"] == error_type and attributes["http.response.status_code"] == status
    assert "gen_ai.usage.input_tokens" not in attributes


def test_overloaded_then_success_with_sdk_retries(store, fake_provider, fake_url):
    fake_provider.script(Reply(status=529, retry_after=0.01), Reply(status=529, retry_after=0.01), Reply(text="ok"))
    with workbench.run("retries") as run:
        message = _anthropic(fake_url, retries=2).messages.create(model="wbt-claude", max_tokens=50, messages=MESSAGES)
    assert message.content[0].text == "ok"
    rows = store.calls()
    assert [(row["http_status"], row["settled"], row["error_type"]) for row in rows] == [
        (529, False, "overloaded_error"), (529, False, "overloaded_error"), (200, True, None)]
    assert {row["run_id"] for row in rows} == {run.run_id}
    assert [row["request_id"] for row in rows] == ["req_fake000001", "req_fake000002", "req_fake000003"]
    usage = {name: rows[2][name] for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")}
    assert (run.billed.calls, run.billed.unsettled, run.billed.cost_micros) == (1, 0, expected_cost("wbt-claude", usage))
    # the three attempts are three spans inside the SDK's one span for the API call
    parents = {store.span(row["span_id"])["parent_span_id"] for row in rows}
    assert len(parents) == 1


def test_openai_429_then_success_with_sdk_retries(store, fake_provider, fake_url):
    fake_provider.script(Reply(status=429, retry_after=0.01), Reply(text="fine"))
    with workbench.run("retries") as run:
        completion = _openai(fake_url, retries=1).chat.completions.create(model="wbt-gpt", messages=MESSAGES)
    assert completion.choices[0].message.content == "fine"
    rows = store.calls()
    assert [(row["http_status"], row["settled"]) for row in rows] == [(429, False), (200, True)]
    assert run.billed.calls == 1 and run.billed.cost_micros == rows[1]["cost_micros"] > 0


def _chat_stream(url):
    stream = _openai(url).chat.completions.create(
        model="wbt-gpt", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    return [chunk for chunk in stream]


def _responses_stream(url):
    return list(_openai(url).responses.create(model="wbt-gpt", input="hello", stream=True))


def _messages_stream(url):
    with _anthropic(url).messages.stream(model="wbt-claude", max_tokens=100, messages=MESSAGES) as stream:
        return stream.get_final_message()


@pytest.mark.parametrize("call", [_chat_stream, _responses_stream, _messages_stream, _messages, _chat],
                         ids=lambda f: f.__name__)
def test_cut_midway_is_unsettled_stream_cut(store, fake_provider, fake_url, call):
    # a stream cut after 3 events; a JSON body cut in half behind its full content-length
    fake_provider.script(Reply(text="a long enough answer to be cut in the middle", cut_after_events=3))
    with workbench.run("cut") as run, pytest.raises((httpx2.HTTPError, openai.APIError, anthropic.APIError)):
        call(fake_url)
    [row] = store.calls()
    assert row["http_status"] == 200
    assert row["settled"] is False and row["error_type"] == "stream_cut"
    assert row["cost_micros"] is None and row["run_id"] == run.run_id
    assert (run.billed.calls, run.billed.unsettled) == (0, 1)
    assert store.one("SELECT billed_unsettled FROM runs WHERE run_id = ?", [run.run_id])["billed_unsettled"] == 1
    attributes = json.loads(store.span(row["span_id"])["attributes"])
    assert attributes["error.type"] == "stream_cut"


class SlowProvider(FakeProvider):
    """Streams one SSE event every `gap_s`, counting the events the server actually produced; the
    server stops when its write to a closed connection fails."""

    def __init__(self, gap_s: float) -> None:
        super().__init__()
        self.gap_s = gap_s
        self.produced = 0
        self.total = 0

    def handle(self, method, path, headers, body) -> FakeResponse:
        response = super().handle(method, path, headers, body)
        if response.is_stream:
            chunks = response.chunks
            self.total = len(chunks)

            def slowly():
                for chunk in chunks:
                    self.produced += 1
                    yield chunk
                    time.sleep(self.gap_s)

            response.chunks = slowly()  # the server only iterates it
        return response


def _abandon_chat(url):
    stream = _openai(url).chat.completions.create(
        model="wbt-gpt", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    for seen, _chunk in enumerate(stream, 1):
        if seen == 3:
            break
    stream.close()


def _abandon_messages(url):
    with _anthropic(url).messages.stream(model="wbt-claude", max_tokens=5000, messages=MESSAGES) as stream:
        for seen, _event in enumerate(stream, 1):
            if seen == 3:
                break  # leaving the block closes the stream


@pytest.mark.parametrize("abandon", [_abandon_chat, _abandon_messages], ids=lambda f: f.__name__)
def test_abandoned_stream_is_unsettled_and_never_drained(store, abandon):
    provider = SlowProvider(gap_s=0.01)
    provider.script(Reply(text=" ".join(f"word{i}" for i in range(300))))
    with serve(provider) as url:
        with workbench.run("abandon") as run:
            abandon(url)
        time.sleep(0.3)  # let the server notice the closed connection
        produced = provider.produced
    # the whole stream takes >= 300 x 10 ms = 3 s to produce; draining it would make the server
    # produce every event
    assert provider.total > 300
    assert produced < provider.total // 3, (produced, provider.total)
    [row] = store.calls()
    assert row["stream"] is True and row["settled"] is False
    assert row["error_type"] == "stream_abandoned"
    assert row["cost_micros"] is None and row["run_id"] == run.run_id
    assert (run.billed.calls, run.billed.unsettled) == (0, 1)


def test_connection_refused_is_transport_error(store):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with workbench.run("refused") as run, pytest.raises(openai.APIConnectionError):
        _chat(f"http://127.0.0.1:{port}")
    [row] = store.calls()
    assert row["http_status"] is None and row["settled"] is False and row["error_type"] == "transport_error"
    assert (run.billed.calls, run.billed.unsettled) == (0, 1)


def test_recording_runs_on_the_callers_thread_only_once(store, fake_provider, fake_url):
    """Reading a JSON body to its end and then closing the response records one row, not two."""
    fake_provider.script("one", "two")
    client = _openai(fake_url)
    threads = [threading.Thread(target=client.chat.completions.create,
                                kwargs={"model": "wbt-gpt", "messages": MESSAGES}) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(store.calls()) == 2
