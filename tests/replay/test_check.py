"""`workbench cassettes check`: a clean cassette passes; a leaked key or bearer token fails with
WB_CASSETTE_SECRET (exit 2); interactions the last replay run never played are listed as stale."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport

URL = "https://api.openai.com/v1/chat/completions"


def check(path) -> subprocess.CompletedProcess:
    # the environment carries WORKBENCH_DB (set by the store fixture): where replay runs leave their records
    result = subprocess.run([sys.executable, "-m", "workbench", "cassettes", "check", str(path)],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ))
    # the console wraps long lines (long tmp paths): compare with whitespace collapsed
    result.stdout, result.stderr = " ".join(result.stdout.split()), " ".join(result.stderr.split())
    return result


def _body(text: str) -> dict:
    return {"model": "wbt-gpt", "messages": [{"role": "user", "content": text}]}


def _record(path, *texts):
    client = workbench.http_client(cassette=path, mode="record", transport=FakeTransport(FakeProvider()))
    for text in texts:
        client.post(URL, json=_body(text), headers={"authorization": "Bearer " + "sk-" + "proj-abcdefghijklmnopqrstuvwx"})
    client.close()


def _raw_cassette(path, request_headers: dict, request_body: str) -> None:
    """A cassette written by hand (as another tool would), not through Workbench's scrubbing."""
    path.write_text(json.dumps({"version": 1, "interactions": [{
        "request": {"method": "POST", "uri": URL, "body": request_body, "headers": request_headers},
        "response": {"status": {"code": 200, "message": "OK"}, "headers": {"content-type": ["application/json"]},
                     "body": {"string": "{\"id\": \"chatcmpl-1\", \"choices\": []}"}},
    }]}))


def test_a_clean_cassette_passes(tmp_path):
    path = tmp_path / "clean.json"
    _record(path, "hello", "again")
    result = check(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 interactions" in result.stdout and "0 with problems" in result.stdout


@pytest.mark.parametrize(("headers", "body", "finding"), [
    ({"content-type": ["application/json"]}, json.dumps({"api_key": "sk-" + "proj-LEAKEDabcdefghijklmnop1234"}),
     "api key"),
    ({"x-forwarded-auth": ["Bearer " + "eyJhbGciOiJIUzI1NiJ9.leaked.token"]}, json.dumps(_body("hi")), "bearer token"),
    ({"authorization": ["Bearer " + "some-opaque-value-123456"]}, json.dumps(_body("hi")), "authorization"),
], ids=["sk-key-in-body", "bearer-in-custom-header", "authorization-header"])
def test_a_leaked_secret_fails_with_wb_cassette_secret(tmp_path, headers, body, finding):
    path = tmp_path / "leaky.json"
    _raw_cassette(path, headers, body)
    result = check(path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "WB_CASSETTE_SECRET" in result.stderr
    assert finding in (result.stdout + result.stderr).lower()


def test_a_folder_is_checked_file_by_file(tmp_path):
    _record(tmp_path / "a.json", "one")
    _raw_cassette(tmp_path / "b.json", {}, json.dumps({"key": "sk-" + "ant-LEAKEDabcdefghijklmnop1234"}))
    result = check(tmp_path)
    assert result.returncode == 2
    assert "2 cassettes, 1 with problems" in result.stdout and "b.json" in result.stderr


def _replay(path, *texts):
    client = workbench.http_client(cassette=path, mode="replay")
    for text in texts:
        assert client.post(URL, json=_body(text)).status_code == 200
    client.close()  # the replay run leaves its record of what was played


def test_stale_recordings_are_listed_after_a_partial_replay(tmp_path):
    path = tmp_path / "c.json"
    _record(path, "zero", "one", "two")
    assert "stale:" not in check(path).stdout  # no replay run yet
    _replay(path, "one")
    result = check(path)
    assert result.returncode == 0
    assert "stale: interactions [0, 2]" in result.stdout


def test_interactions_played_by_several_clients_of_one_run_are_not_stale(tmp_path):
    """A test suite makes one client (one cassette session) per test; the run played them all."""
    path = tmp_path / "c.json"
    _record(path, "zero", "one", "two")
    _replay(path, "zero")
    _replay(path, "one", "two")
    result = check(path)
    assert result.returncode == 0 and "stale:" not in result.stdout, result.stdout
