"""Record mode never drops a call: a stream its client stopped reading is written to the cassette as
far as the client read it, marked abandoned, and replays as it was received (the same events, the
call recorded as abandoned again); a stream stopped once its usage was final replays settled."""

from __future__ import annotations

import json

import anthropic
import pytest
from workbench.demo.fake_server import serve

import workbench
from workbench.demo.fake_provider import FakeProvider, Reply
from workbench.replay.transport import ABANDONED_HEADER

MESSAGES = [{"role": "user", "content": "hello"}]


def _events_until(cassette, mode, url, last: str, question: str) -> list[str]:
    client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0,
                                 http_client=workbench.http_client(cassette=cassette, mode=mode))
    seen = []
    stream = client.messages.create(model="wbt-claude", max_tokens=500, stream=True,
                                    messages=[{"role": "user", "content": question}])
    for event in stream:
        seen.append(event.model_dump_json())
        if event.type == last:
            break
    stream.close()
    return seen


def _session(cassette, mode, url) -> list[list[str]]:
    return [_events_until(cassette, mode, url, "message_stop", "whole"),
            _events_until(cassette, mode, url, "message_delta", "until the bill"),
            _events_until(cassette, mode, url, "content_block_delta", "abandoned")]


def test_abandoned_streams_are_recorded_marked_and_replay_as_received(tmp_path, store):
    cassette = tmp_path / "streams.json"
    provider = FakeProvider()
    provider.script(*[Reply(text="one two three four five six seven") for _ in range(3)])
    with serve(provider) as url:
        live = _session(cassette, "record", url)
    assert len(provider.requests) == 3
    recorded = json.loads(cassette.read_text())["interactions"]
    assert len(recorded) == 3  # none dropped
    marks = [response["response"]["headers"].get(ABANDONED_HEADER) for response in recorded]
    assert marks == [None, None, ["abandoned"]]
    assert b"message_stop" not in recorded[2]["response"]["body"]["string"].encode()

    replayed = _session(cassette, "replay", "http://127.0.0.1:9")  # nothing listens: replay only
    assert replayed == live
    rows = store.calls()
    assert [(row["replayed"], row["settled"], row["error_type"]) for row in rows] == [
        (False, True, None), (False, True, None), (False, False, "stream_abandoned"),
        (True, True, None), (True, True, None), (True, False, "stream_abandoned")]
    assert [row["cost_micros"] for row in rows[3:]] == [row["cost_micros"] for row in rows[:3]]


def test_a_replayed_abandoned_stream_read_to_its_recorded_end_is_still_abandoned(tmp_path, store):
    cassette = tmp_path / "streams.json"
    provider = FakeProvider().script(Reply(text="one two three four five six seven"))
    with serve(provider) as url:
        _events_until(cassette, "record", url, "content_block_delta", "abandoned")
    # a reader that reads everything the cassette holds, as a client that does not stop would
    _events_until(cassette, "replay", "http://127.0.0.1:9", "never", "abandoned")
    assert [(row["replayed"], row["error_type"]) for row in store.calls()] == [
        (False, "stream_abandoned"), (True, "stream_abandoned")]


@pytest.mark.parametrize("header", [ABANDONED_HEADER, ABANDONED_HEADER.upper()])
def test_the_mark_never_reaches_the_client(tmp_path, store, header):
    cassette = tmp_path / "streams.json"
    provider = FakeProvider().script(Reply(text="one two three four five six seven"))
    with serve(provider) as url:
        _events_until(cassette, "record", url, "content_block_delta", "abandoned")
    data = json.loads(cassette.read_text())
    headers = data["interactions"][0]["response"]["headers"]
    headers[header] = headers.pop(ABANDONED_HEADER)
    cassette.write_text(json.dumps(data))
    client = anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key="sk-ant-test", max_retries=0,
                                 http_client=workbench.http_client(cassette=cassette, mode="replay"))
    raw = client.messages.with_raw_response.create(model="wbt-claude", max_tokens=500, stream=True,
                                                   messages=[{"role": "user", "content": "abandoned"}])
    assert ABANDONED_HEADER not in {name.lower() for name in raw.headers}
    raw.parse().close()
    assert store.calls()[-1]["error_type"] == "stream_abandoned"
