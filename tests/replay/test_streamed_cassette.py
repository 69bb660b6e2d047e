"""A large JSON cassette replays from the file one interaction at a time: the same recordings, the
same answers, the same refusals of a broken file as a cassette read whole, and never the whole file
in memory (a 100,000-case suite's cassette is 250 MB)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport
from workbench.errors import WorkbenchError
from workbench.replay import session
from workbench.replay.cassette import (
    Interaction, RecordedRequest, RecordedResponse, StreamedInteractions, load_cassette, parse_cassette_with_meta,
    stream_cassette, write_cassette,
)
from workbench.replay.matcher import CassetteIndex
from workbench.replay.scrub import scrub
from workbench.replay.session import Cassette

CORPUS = Path(__file__).parents[1] / "fixtures" / "corpus"
URL = "http://fake.test/v1/chat/completions"


@pytest.fixture
def streamed(monkeypatch):
    """Every replayed JSON cassette is streamed, however small."""
    monkeypatch.setattr(session, "STREAM_FROM_BYTES", 0)


def _corpus_as_json(tmp_path: Path) -> list[Path]:
    """The corpus's readable cassettes, written as Workbench writes JSON (binary bodies, non-ASCII text)."""
    written = []
    for index, source in enumerate(sorted(path for path in CORPUS.rglob("*.y*ml"))):
        try:
            interactions = load_cassette(source)
        except WorkbenchError:
            continue  # the one unsafe file of the corpus is refused either way
        target = tmp_path / f"{index}.json"
        write_cassette(target, interactions, {"note": source.name})
        written.append(target)
    assert len(written) >= 90
    return written


def test_every_corpus_cassette_streams_to_the_same_recordings_and_meta(tmp_path):
    for path in _corpus_as_json(tmp_path):
        whole, meta = parse_cassette_with_meta(path.read_bytes(), str(path))
        seen = []
        streamed_meta = stream_cassette(path, lambda index, interaction, span: seen.append((index, interaction, span)))
        assert [interaction for _, interaction, _ in seen] == whole, path
        assert [index for index, _, _ in seen] == list(range(len(whole)))
        assert streamed_meta == meta
        lazy = StreamedInteractions(path, scrub)
        assert list(lazy) == [scrub(interaction) for interaction in whole]
        with path.open("rb") as handle:  # each span is exactly the interaction's bytes in the file
            data = handle.read()
        for index, _, (start, end) in seen:
            assert json.loads(data[start:end])["request"]["uri"] == whole[index].request.uri


def test_a_parsed_body_with_an_integer_past_64_bits_streams_to_the_same_recording(tmp_path):
    """pydantic-ai's cassettes hold bodies as JSON mappings: an integer past 64 bits in one is served
    as written, streamed or read whole (orjson would read it as a float, without an error)."""
    big = [2**64 + 1, -(2**63) - 1]
    document = {"interactions": [{
        "request": {"method": "POST", "uri": URL, "headers": {"content-type": ["application/json"]},
                    "parsed_body": {"model": "wbt-gpt", "seed": big[0]}},
        "response": {"status": {"code": 200, "message": "OK"}, "headers": {"content-type": ["application/json"]},
                     "parsed_body": {"id": "x", "values": big}},
    }]}
    path = tmp_path / "big.json"
    path.write_text(json.dumps(document))
    whole = load_cassette(path)
    assert json.loads(whole[0].response.body)["values"] == big
    assert list(StreamedInteractions(path, scrub)) == [scrub(interaction) for interaction in whole]


def _send(path, mode, provider, *texts):
    client = workbench.http_client(cassette=path, mode=mode, transport=FakeTransport(provider))
    answers = [client.post(URL, json={"model": "wbt-gpt", "messages": [{"role": "user", "content": text}]}).json()
               ["choices"][0]["message"]["content"] for text in texts]
    client.close()
    return answers


def test_a_streamed_cassette_replays_what_was_recorded_in_order_without_the_network(tmp_path, streamed):
    path = tmp_path / "c.json"
    texts = ["alpha", "bëta ✓", "alpha", "gamma"]
    recorded = _send(path, "record", FakeProvider(), *texts)
    unreachable = FakeProvider(echo_chars=2)  # would answer differently, were it asked
    assert _send(path, "replay", unreachable, *texts) == recorded
    assert unreachable.requests == []
    cassette = Cassette(path, "replay")
    assert isinstance(cassette.index.interactions, StreamedInteractions)
    assert cassette.index.hashes == CassetteIndex([scrub(item) for item in load_cassette(path)]).hashes


def test_a_miss_in_a_streamed_cassette_names_the_closest_recording(tmp_path, streamed):
    path = tmp_path / "c.json"
    _send(path, "record", FakeProvider(), "the weather in Paris", "something else")
    client = workbench.http_client(cassette=path, mode="replay", transport=FakeTransport(FakeProvider()))
    response = client.post(URL, json={"model": "wbt-gpt", "messages": [{"role": "user", "content": "the weather in Rome"}]})
    client.close()
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "WB_REPLAY_MISS" in message and "Paris" in message and "Rome" in message


def test_a_streamed_cassette_keeps_reading_the_file_it_indexed_when_another_process_replaces_it(tmp_path, streamed):
    path = tmp_path / "c.json"
    recorded = _send(path, "record", FakeProvider(), "alpha")
    cassette = Cassette(path, "replay")
    write_cassette(path, [])  # replaced (a new file) while the session replays
    client = workbench.http_client(cassette=cassette, transport=FakeTransport(FakeProvider()))
    answer = client.post(URL, json={"model": "wbt-gpt", "messages": [{"role": "user", "content": "alpha"}]}).json()
    client.close()
    assert answer["choices"][0]["message"]["content"] == recorded[0]


def _interaction(index: int) -> Interaction:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"ticket {index} " + "x" * 2000}]})
    return Interaction(request=RecordedRequest(uri=URL, headers={"content-type": ["application/json"]}, body=body.encode()),
                       response=RecordedResponse(status=200, headers={"content-type": ["application/json"]},
                                                 body=json.dumps({"id": f"r{index}", "text": "y" * 2000}).encode()))


def test_a_large_cassette_is_replayed_without_holding_it_in_memory(tmp_path):
    path = tmp_path / "large.json"
    write_cassette(path, [_interaction(index) for index in range(4000)])  # 18 MB: past the streaming size
    size = path.stat().st_size
    assert size >= session.STREAM_FROM_BYTES
    tracemalloc.start()
    try:
        cassette = Cassette(path, "replay")
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(cassette.index.interactions, StreamedInteractions)
    # while reading: a chunk of text and one interaction (4.5 MB); then the index alone, no body
    assert peak < size / 3 and held < size / 10
    assert cassette.index.interactions[3999] == scrub(load_cassette(path)[3999])
    assert cassette.index.interactions[3999].request.body == _interaction(3999).request.body


@pytest.mark.parametrize("broken", [
    lambda text: text[: len(text) // 2],  # cut short
    lambda text: text.replace('"uri"', '"url"', 1),  # an interaction without its request's URI
    lambda text: text.replace('"interactions"', '"recordings"'),
    lambda text: text + "trailing",
])
def test_a_broken_streamed_cassette_is_refused_as_the_whole_one_is(tmp_path, streamed, broken):
    path = tmp_path / "c.json"
    _send(path, "record", FakeProvider(), "alpha", "beta")
    path.write_text(broken(path.read_text()))
    with pytest.raises(WorkbenchError) as whole:
        parse_cassette_with_meta(path.read_bytes(), str(path))
    with pytest.raises(WorkbenchError) as streamed_error:
        Cassette(path, "replay")
    assert streamed_error.value.code == whole.value.code == "WB_CASSETTE_INVALID"
    assert str(path) in streamed_error.value.cause
