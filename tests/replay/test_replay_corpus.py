"""Every interaction of every corpus cassette (110 files recorded by six other projects, vcrpy
layouts old and new, gzip bodies, parsed_body mappings) replays through Workbench's transport, in
file order, and the replayed response parses to the same Call as the raw file interaction does."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

import workbench
from workbench.replay.clients import ReplayTransport
from workbench.replay.session import Cassette
from workbench.errors import WorkbenchError
from workbench.replay.cassette import load_cassette
from workbench.wire import Exchange, parse_exchange
from workbench.wire.decode import decode_body

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
FILES = sorted(str(path.relative_to(CORPUS)) for path in CORPUS.glob("*/*.yaml"))
UNSAFE = "DataDog__dd-trace-py/tests__cassettes__anthropic__anthropic_v1_messages_beta_true_post_1913e018.yaml"
FIELDS = ("wire", "stream", "http_status", "model_served", "stop_reason", "settled", "error_type", "input_tokens",
          "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens", "cache_write_1h_tokens")


class _NoNetwork(httpx2.BaseTransport):
    def handle_request(self, request):
        raise AssertionError(f"replay reached the network: {request.method} {request.url}")


def _fields(call) -> dict:
    flat = call.flat()
    return {**{name: flat[name] for name in FIELDS}, "tool_calls": len(call.tool_calls)}


def _header(headers: dict[str, list[str]], name: str) -> str:
    return ", ".join(v for key, values in headers.items() if key.lower() == name for v in values)


def test_the_corpus_is_all_there_and_only_the_unsafe_file_is_refused():
    assert len(FILES) == 110 and UNSAFE in FILES
    with pytest.raises(WorkbenchError) as refused:
        workbench.http_client(cassette=CORPUS / UNSAFE, mode="replay")
    assert refused.value.code == "WB_CASSETTE_INVALID"


@pytest.mark.parametrize("name", [name for name in FILES if name != UNSAFE])
def test_corpus_cassette_replays_to_the_same_calls(name):
    path = CORPUS / name
    raw = load_cassette(path)  # the file as it is: encoded bodies, every header
    # the replay transport under a plain httpx2 client (capture is tested elsewhere; here it only costs time)
    client = httpx2.Client(transport=ReplayTransport(Cassette(path, mode="replay"), inner=_NoNetwork()))
    for index, interaction in enumerate(raw):
        request = interaction.request
        content_type = _header(request.headers, "content-type") or "application/json"
        body = decode_body(request.body, _header(request.headers, "content-encoding"))
        response = client.request(request.method, request.uri, content=body or None,
                                  headers={"content-type": content_type})
        assert response.headers.get("x-workbench-error") is None, response.text
        # recorded order: the i-th request gets the i-th response, byte for byte (decoded)
        expected_body = decode_body(interaction.response.body, _header(interaction.response.headers, "content-encoding"))
        assert response.content == expected_body, f"interaction {index}"
        replayed = parse_exchange(Exchange(
            method=request.method, url=request.uri, request_headers=dict(response.request.headers),
            request_body=body, status=response.status_code, response_headers=dict(response.headers),
            response_body=response.content,
        ))
        original = parse_exchange(interaction.exchange())
        assert _fields(replayed) == _fields(original), f"interaction {index}"
    client.close()


def test_identical_requests_replay_in_recorded_order(tmp_path):
    """Three recordings of one request (a retry storm) come back in file order."""
    from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse, write_cassette

    body = b'{"model":"wbt-gpt","messages":[{"role":"user","content":"same"}]}'
    responses = [(429, b'{"error":{"message":"slow down","type":"requests"}}'),
                 (500, b'{"error":{"message":"oops","type":"server_error"}}'),
                 (200, b'{"id":"chatcmpl-3","choices":[]}')]
    path = tmp_path / "storm.json"
    write_cassette(path, [Interaction(
        request=RecordedRequest(uri="https://api.openai.com/v1/chat/completions", body=body),
        response=RecordedResponse(status=status, headers={"content-type": ["application/json"]}, body=content),
    ) for status, content in responses])
    client = workbench.http_client(cassette=path, mode="replay")
    got = [client.post("https://api.openai.com/v1/chat/completions", content=body) for _ in range(3)]
    assert [(r.status_code, r.content) for r in got] == responses
