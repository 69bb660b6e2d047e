"""Record modes: `record` replays what exists and records only what is missing, `rerecord` records
everything again, `live` has no cassette at all, and WORKBENCH_RECORD_MODE picks the default."""

from __future__ import annotations

import json

import pytest

import workbench
from workbench.config import settings
from workbench.demo.fake_provider import FakeProvider, FakeTransport
from workbench.replay.session import Cassette

URL = "http://fake.test/v1/chat/completions"


def _body(text: str) -> dict:
    return {"model": "wbt-gpt", "messages": [{"role": "user", "content": text}]}


def _send(path, mode, provider, *texts):
    client = workbench.http_client(cassette=path, mode=mode, transport=FakeTransport(provider))
    answers = [client.post(URL, json=_body(text)).json()["choices"][0]["message"]["content"] for text in texts]
    client.close()
    return answers


def _seen(provider) -> list[str]:
    return [request.json["messages"][0]["content"] for request in provider.requests]


def _recorded(path) -> list[str]:
    return [json.loads(i["request"]["body"])["messages"][0]["content"] for i in json.loads(path.read_text())["interactions"]]


def test_record_replays_what_exists_and_records_only_what_is_missing(tmp_path):
    path = tmp_path / "c.json"
    first = FakeProvider()
    assert _send(path, "record", first, "alpha") == ["echo: alpha"]
    second = FakeProvider(echo_chars=3)  # answers differently, so a replayed answer is recognisable
    assert _send(path, "record", second, "alpha", "beta") == ["echo: alpha", "echo: bet"]
    assert _seen(second) == ["beta"]
    assert _recorded(path) == ["alpha", "beta"]


def test_record_records_a_second_identical_request_instead_of_repeating_the_first(tmp_path):
    path = tmp_path / "c.json"
    provider = FakeProvider()
    _send(path, "record", provider, "same", "same")
    assert _seen(provider) == ["same", "same"] and _recorded(path) == ["same", "same"]


def test_rerecord_records_everything_again(tmp_path):
    path = tmp_path / "c.json"
    _send(path, "record", FakeProvider(), "alpha", "old")
    provider = FakeProvider(echo_chars=3)
    assert _send(path, "rerecord", provider, "alpha", "beta") == ["echo: alp", "echo: bet"]
    assert _seen(provider) == ["alpha", "beta"]
    assert _recorded(path) == ["alpha", "beta"]  # the old recordings are gone
    assert _send(path, "replay", FakeProvider(), "alpha") == ["echo: alp"]


def test_live_makes_no_cassette_and_leaves_one_alone(tmp_path):
    path = tmp_path / "c.json"
    provider = FakeProvider()
    assert _send(path, "live", provider, "alpha") == ["echo: alpha"]
    assert _seen(provider) == ["alpha"] and not path.exists()
    _send(path, "record", FakeProvider(), "alpha")
    before = path.read_bytes()
    provider = FakeProvider()
    _send(path, "live", provider, "alpha", "beta")
    assert _seen(provider) == ["alpha", "beta"] and path.read_bytes() == before


def test_replay_without_a_cassette_is_a_miss_when_a_request_needs_it(tmp_path):
    path = tmp_path / "missing.json"
    cassette = Cassette(path, mode="replay")  # no request yet: no error (a suite may make no call)
    response = cassette.http_client().post(URL, json=_body("alpha"))
    assert response.headers["x-workbench-error"] == "WB_REPLAY_MISS"
    [miss] = cassette.misses
    assert "does not exist yet" in miss.cause and "WORKBENCH_RECORD_MODE=record" in miss.fix
    assert not path.exists()


@pytest.mark.parametrize("mode", ["record", "rerecord", "live", "replay"])
def test_workbench_record_mode_chooses_the_default(tmp_path, monkeypatch, mode):
    path = tmp_path / "c.json"
    _send(path, "record", FakeProvider(), "alpha")
    monkeypatch.setenv("WORKBENCH_RECORD_MODE", mode)
    settings.cache_clear()
    try:
        assert Cassette(path).mode == mode
        assert Cassette(path, mode="replay").mode == "replay"  # the call site wins
        provider = FakeProvider()
        _send(path, None, provider, "alpha")
        assert _seen(provider) == ([] if mode in ("record", "replay") else ["alpha"])
    finally:
        monkeypatch.delenv("WORKBENCH_RECORD_MODE")
        settings.cache_clear()


def test_an_unknown_mode_is_refused(tmp_path):
    with pytest.raises(workbench.WorkbenchError) as raised:
        Cassette(tmp_path / "c.json", mode="sometimes")
    assert raised.value.code == "WB_CONFIG_INVALID"
