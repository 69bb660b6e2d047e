"""Nothing secret reaches a cassette: keys in headers, cookies and query parameters, response
cookies and organization ids. A body hook masks PII and still matches on replay. Bodies are stored
decoded, and replay without their content-encoding."""

from __future__ import annotations

import gzip
import json
import re

import brotli
import httpx2
import pytest

import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport, Reply

CANARY = "sk-" + "CANARY0123456789abcdefghij"  # in pieces: no whole key stands in the tree
URL = "http://fake.test/v1/chat/completions"
BODY = {"model": "wbt-gpt", "messages": [{"role": "user", "content": "hello"}]}


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_secrets_never_reach_the_cassette_file(tmp_path, suffix):
    path = tmp_path / f"c.{suffix}"
    provider = FakeProvider().script(Reply(text="hi", headers={
        "set-cookie": "__cf_bm=" + CANARY + "; path=/; HttpOnly", "openai-organization": f"org-{CANARY}",
        "openai-project": f"proj_{CANARY}", "anthropic-organization-id": f"org-{CANARY}",
        "x-request-id": "req_kept"}))
    client = workbench.http_client(cassette=path, mode="record", transport=FakeTransport(provider))
    response = client.post(f"{URL}?key={CANARY}&api-version=2024-10-21", json=BODY, headers={
        "authorization": f"Bearer {CANARY}", "x-api-key": CANARY, "api-key": CANARY,
        "cookie": "session=" + CANARY + "; _cfuvid=" + CANARY})
    assert response.headers["openai-organization"] == f"org-{CANARY}"  # the application still sees it
    client.close()
    sent = provider.requests[0]
    assert sent.headers["authorization"] == f"Bearer {CANARY}"  # the provider got the real key

    text = path.read_text()
    assert "CANARY" not in text
    [interaction] = workbench.Cassette(path, mode="replay").index.interactions
    request_headers = {name.lower() for name in interaction.request.headers}
    response_headers = {name.lower() for name in interaction.response.headers}
    assert not request_headers & {"authorization", "x-api-key", "api-key", "cookie"}
    assert not response_headers & {"set-cookie", "openai-organization", "openai-project", "anthropic-organization-id"}
    assert "x-request-id" in response_headers  # only the secrets go
    assert "api-version=2024-10-21" in interaction.request.uri and "key=" in interaction.request.uri

    # it replays with another key: the key is neither stored nor matched on
    replay = workbench.http_client(cassette=path, mode="replay")
    again = replay.post(f"{URL}?key=sk-other", json=BODY, headers={"authorization": "Bearer sk-other"})
    assert again.json()["choices"][0]["message"]["content"] == "hi"


EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


def mask_emails(text: str) -> str:
    return EMAIL.sub("<email>", text)


def _ask(client, email):
    body = {"model": "wbt-gpt", "messages": [{"role": "user", "content": f"Write to {email} about the order"}]}
    return client.post(URL, json=body)


def test_a_body_hook_masks_pii_and_the_masked_cassette_still_matches(tmp_path):
    path = tmp_path / "c.json"
    provider = FakeProvider()
    client = workbench.http_client(cassette=path, mode="record", body_hook=mask_emails,
                                   transport=FakeTransport(provider))
    recorded = _ask(client, "alice@example.com")
    assert "alice@example.com" in recorded.text  # the caller gets the real answer
    assert "alice@example.com" in provider.requests[0].body.decode()  # the provider gets the real request
    text = path.read_text()
    assert "alice@example.com" not in text and "<email>" in text

    replay = workbench.http_client(cassette=path, mode="replay", body_hook=mask_emails)
    assert _ask(replay, "alice@example.com").status_code == 200
    # without the hook the live request is not masked, so it does not match the masked recording
    unhooked = workbench.Cassette(path, mode="replay")
    assert _ask(unhooked.http_client(), "alice@example.com").headers["x-workbench-error"] == "WB_REPLAY_MISS"


@pytest.mark.parametrize(("encoding", "compress"), [("gzip", gzip.compress), ("br", brotli.compress)])
def test_bodies_are_stored_decoded_and_replay_without_the_encoding(tmp_path, encoding, compress):
    payload = {"id": "chatcmpl-1", "object": "chat.completion", "model": "wbt-gpt",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "compressed hello"},
                            "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}

    def server(request):
        data = compress(json.dumps(payload).encode())
        return httpx2.Response(200, headers={"content-type": "application/json", "content-encoding": encoding,
                                             "content-length": str(len(data))}, content=data)

    path = tmp_path / "c.json"
    client = workbench.http_client(cassette=path, mode="record", transport=httpx2.MockTransport(server))
    assert client.post(URL, json=BODY).json() == payload
    client.close()

    [stored] = json.loads(path.read_text())["interactions"]
    assert json.loads(stored["response"]["body"]["string"]) == payload  # plain text in the file
    assert not {"content-encoding", "content-length"} & {name.lower() for name in stored["response"]["headers"]}

    replayed = workbench.http_client(cassette=path, mode="replay").post(URL, json=BODY)
    assert "content-encoding" not in replayed.headers
    assert replayed.json() == payload
