"""A recording session saves its cassette again and again as it grows, joining the file from the
interactions it already encoded instead of encoding them all at every save: the file is still the
one a whole write gives (byte for byte), scrubbed, loadable by vcrpy, replaced atomically at every
save, so a recording killed midway keeps every interaction saved so far."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import vcr.serializers.jsonserializer

import workbench
from workbench.replay.cassette import load_cassette_with_meta, write_cassette

KEY = "sk-" + "proj-recordlong0123456789abcdefghijklmnop"  # in pieces: no whole key in the tree


def _record(path, fake_url: str, prompts: list[str]) -> None:
    client = workbench.http_client(cassette=path, mode="record")
    for prompt in prompts:
        body = {"model": "wbt-gpt", "messages": [{"role": "user", "content": f"{prompt} (my key is {KEY})"}]}
        response = client.post(f"{fake_url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"})
        assert response.status_code == 200
    client.close()


def _prompts(path) -> list[str]:
    return [json.loads(item["request"]["body"])["messages"][0]["content"].split(" (")[0]
            for item in json.loads(path.read_bytes())["interactions"]]


def test_a_cassette_saved_as_it_grows_is_the_file_one_whole_write_gives(tmp_path, fake_url):
    path = tmp_path / "long.json"
    _record(path, fake_url, [f"first session {n}" for n in range(30)])
    _record(path, fake_url, [f"second session {n}" for n in range(12)])  # a new session appends to the file

    assert _prompts(path) == [f"first session {n}" for n in range(30)] + [f"second session {n}" for n in range(12)]
    text = path.read_bytes()
    assert KEY.encode() not in text and KEY[-12:].encode() not in text
    interactions, meta = load_cassette_with_meta(path)
    whole = tmp_path / "whole.json"
    write_cassette(whole, interactions, {key: value for key, value in meta.items() if key != "format"})
    assert text == whole.read_bytes()
    assert len(vcr.serializers.jsonserializer.deserialize(text.decode())["interactions"]) == 42


WORKER = textwrap.dedent("""
    import os, signal, sys
    import workbench

    path, url, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = workbench.http_client(cassette=path, mode="record")
    for n in range(count):
        body = {"model": "wbt-gpt", "messages": [{"role": "user", "content": f"request {n} ({sys.argv[4]})"}]}
        assert client.post(url + "/v1/chat/completions", json=body,
                           headers={"authorization": "Bearer " + sys.argv[4]}).status_code == 200
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no exit hook: what is on disk is what was saved
""")


def test_a_recording_killed_midway_keeps_every_interaction_saved_so_far(tmp_path, fake_url):
    path = tmp_path / "killed.json"
    env = {**os.environ, "WORKBENCH_DB": str(tmp_path / "wb.duckdb"), "WORKBENCH_CAPTURE": "false"}
    worker = subprocess.run([sys.executable, "-c", WORKER, str(path), fake_url, "40", KEY], env=env,
                            capture_output=True, timeout=300)
    assert worker.returncode == -signal.SIGKILL, worker.stderr.decode()

    assert _prompts(path) == [f"request {n}" for n in range(40)]  # a small cassette is saved at every record
    assert KEY.encode() not in path.read_bytes()
    assert len(vcr.serializers.jsonserializer.deserialize(path.read_text())["interactions"]) == 40
