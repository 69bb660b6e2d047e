"""A cassette Workbench writes is a vcrpy cassette: plain vcrpy replays it (JSON, matched on
method, path and body) with a plain httpx2 / httpx client, and loads the YAML flavour too."""

from __future__ import annotations

import json

import httpx
import httpx2
import pytest
import vcr

import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport, Reply

CHAT = ("http://fake.test/v1/chat/completions",
        {"model": "wbt-gpt", "messages": [{"role": "user", "content": "What is 2+2?"}]})
STREAM = ("http://fake.test/v1/messages",
          {"model": "wbt-claude", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "Hi"}]})


def _record(path) -> list[httpx2.Response]:
    provider = FakeProvider().script(Reply(text="4", usage={"input_tokens": 12, "output_tokens": 1}),
                                     Reply(text="Hello from a stream"))
    client = workbench.http_client(cassette=path, mode="record", transport=FakeTransport(provider))
    responses = [client.post(url, json=body) for url, body in (CHAT, STREAM)]
    client.close()
    assert len(provider.requests) == 2
    return responses


def _vcr(serializer: str) -> vcr.VCR:
    return vcr.VCR(serializer=serializer, match_on=["method", "path", "body"], record_mode="none")


@pytest.mark.parametrize("client_cls", [httpx2.Client, httpx.Client], ids=["httpx2", "httpx"])
def test_workbench_json_cassette_replays_under_plain_vcrpy(tmp_path, client_cls):
    path = tmp_path / "wb.json"
    recorded = _record(path)
    assert json.loads(path.read_text())["interactions"][0]["request"]["method"] == "POST"
    with _vcr("json").use_cassette(str(path)) as cassette:
        with client_cls() as client:  # no server anywhere: fake.test does not resolve
            replayed = [client.post(url, json=body) for url, body in (CHAT, STREAM)]
        assert cassette.play_count == 2 and cassette.all_played
    assert [(r.status_code, r.content) for r in replayed] == [(r.status_code, r.content) for r in recorded]
    assert replayed[0].json()["choices"][0]["message"]["content"] == "4"
    assert "Hello from a stream" in "".join(
        event["delta"].get("text", "") for line in replayed[1].text.splitlines() if line.startswith("data: ")
        for event in [json.loads(line[6:])] if event["type"] == "content_block_delta")


def test_workbench_yaml_cassette_loads_and_replays_in_vcrpy(tmp_path):
    path = tmp_path / "wb.yaml"
    recorded = _record(path)
    assert path.read_text().startswith("interactions:")
    with _vcr("yaml").use_cassette(str(path)) as cassette:
        assert len(cassette.data) == 2
        with httpx2.Client() as client:
            replayed = [client.post(url, json=body) for url, body in (CHAT, STREAM)]
    assert [(r.status_code, r.content) for r in replayed] == [(r.status_code, r.content) for r in recorded]


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_binary_body_is_kept_byte_for_byte_and_vcrpy_reads_the_yaml_one(tmp_path, suffix):
    from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse, load_cassette, write_cassette

    image = b"\x89PNG\r\n\x1a\n\x00\xff\xfe"
    path = tmp_path / f"binary{suffix}"
    write_cassette(path, [Interaction(request=RecordedRequest(method="GET", uri="http://fake.test/logo.png"),
                                      response=RecordedResponse(status=200, body=image))])
    assert load_cassette(path)[0].response.body == image
    if suffix == ".yaml":
        with vcr.VCR(record_mode="none").use_cassette(str(path)) as cassette:
            assert cassette.responses[0]["body"]["string"] == image
