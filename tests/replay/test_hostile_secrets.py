"""`workbench cassettes check` finds every secret the recorder masks, in a cassette that plain vcrpy
recorded (nothing scrubbed) from a hostile provider on 127.0.0.1 that echoes what it was sent: a
credential echoed by value (Bearer after a tab, the password of a Basic header, x-api-key in a
stream), a key as the model name or in the URL path, in a binary upload, in gzip and zstd bodies; a
body too big to decompress and scan is named too. The same calls recorded through Workbench leave a
cassette the check passes."""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys

import httpx
import vcr

import workbench
from fixtures.hostile import serve_hostile
from workbench.replay.check import check_cassette

ECHOED = "cnryEcho" + "d9c2b1a7"  # shaped like no key: only its value, sent as a credential, tells
KEY = "sk-" + "proj-" + "Xq3vT7bN" + "w9LkZp2R" + "yF4hJ6sD" + "8gA1cV5m"


def _calls(client, base: str) -> list[str]:
    """Make every leaking call; what `cassettes check` must say of each, in order."""
    body = {"model": "wbt-gpt", "messages": [{"role": "user", "content": "hi"}]}
    url = f"{base}/v1/chat/completions"
    basic = base64.b64encode(f"someone:{ECHOED}".encode()).decode()
    client.post(url, json=body, headers={"authorization": f"Bearer\t{ECHOED}"})
    client.post(url, json=body, headers={"authorization": f"Basic {basic}"})
    client.post(url, json={**body, "stream": True}, headers={"x-api-key": ECHOED})
    client.post(url, json={**body, "model": KEY})
    client.post(f"{base}/v1/{KEY}/chat/completions", json=body)
    client.post(f"{base}/v1/files", files={"file": ("key.bin", b"\xff\xfe\x00" + KEY.encode() + b"\x80")})
    client.post(url, content=gzip.compress(json.dumps({**body, "model": KEY}).encode()),
                headers={"content-encoding": "gzip", "content-type": "application/json"})
    client.post(f"{base}/v1/{KEY}/responses", json=body, headers={"x-answer-in": "zstd"})
    client.post(url, content=gzip.compress(b" " * (65 * 1024 * 1024), compresslevel=1),
                headers={"content-encoding": "gzip", "content-type": "application/json"})
    return ["response body: a credential the request sent", "response body: a credential the request sent",
            "response body: a credential the request sent", "request body: API key", "request uri: path: API key",
            "request body: API key", "request body: API key", "response body: API key",
            "request body: over 64 MB once decompressed"]


def test_cassettes_check_reports_every_secret_a_plain_vcrpy_recording_holds(tmp_path):
    path = tmp_path / "hostile.yaml"
    with serve_hostile() as address, vcr.VCR(serializer="yaml", record_mode="all").use_cassette(str(path)):
        with httpx.Client() as client:
            expected = _calls(client, f"http://{address}")

    findings = check_cassette(path).secrets
    for index, finding in enumerate(expected):
        mine = [found for found in findings if found.startswith(f"interaction {index}: ")]
        assert any(finding in found for found in mine), (index, finding, mine)
    result = subprocess.run([sys.executable, "-m", "workbench", "cassettes", "check", str(path)],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert result.returncode == 2 and "WB_CASSETTE_SECRET" in result.stderr


def test_the_same_calls_recorded_through_workbench_pass_the_check(tmp_path, store):
    path = tmp_path / "scrubbed.json"
    with serve_hostile() as address:
        client = workbench.http_client(cassette=path, mode="record")
        _calls(client, f"http://{address}")
        client.close()
    assert check_cassette(path).secrets == []
    assert KEY[8:40] not in path.read_text() and ECHOED not in path.read_text()
