"""What a call SENT as a credential is masked by value wherever it comes back: a hostile provider on
127.0.0.1 echoes every credential it received (Bearer with a space or a tab, x-api-key, api-key, a
query key, the user and password of user-info and of a Basic header) in its error bodies and in its
streamed text. The values are shaped like no known key, so only masking by value can catch them. A
key used as the model name or in the URL path, and keys in binary or compressed bodies, are kept
nowhere either."""

from __future__ import annotations

import base64
import gzip
import json
import logging

import anthropic
import duckdb
import httpx2
import openai
import pytest
import zstandard
from opentelemetry import trace

import workbench
from fixtures.hostile import serve_hostile

# no known key shape: only the values the request sent tell them apart (in pieces: none stands in the tree)
BEARER, TABBED, XKEY, AZURE = "cnryBear" + "er4e8d1f", "cnryTabb" + "ed5a7c3b", "cnryXKey" + "6b2f9e0a", "cnryAzur" + "e1d4c8b7"
QUERY, USER_PW, BASIC_PW = "cnryQuer" + "y3f6a2d9", "cnryUser" + "Pw8c1e4f", "cnryBasi" + "cPw2b7d6"
SENT = (BEARER, TABBED, XKEY, AZURE, QUERY, USER_PW, BASIC_PW)
# a key of a known shape, where none is expected: the model name, the URL path, a binary upload
SHAPED = "sk-" + "proj-" + "Xq3vT7bN" + "w9LkZp2R" + "yF4hJ6sD" + "8gA1cV5m"


def _kept_nowhere(store, tmp_path, caplog, values) -> None:
    """None of `values` in any text column of the store, any file under tmp_path (the store, its
    spools, cassettes) or any log line of Workbench's."""
    store.calls()  # flushes and ingests
    con = duckdb.connect(str(store.path), read_only=True)
    try:
        columns = con.execute("SELECT table_name, column_name FROM information_schema.columns "
                              "WHERE data_type LIKE 'VARCHAR%' AND table_schema = 'main'").fetchall()
        for table, column in columns:
            for value in values:
                hits = con.execute(f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS VARCHAR) LIKE ?',
                                   [f"%{value}%"]).fetchall()[0][0]
                assert hits == 0, (table, column, value)
    finally:
        con.close()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not [value for value in values if value.encode() in data], path
    ours = [record.getMessage() + str(record.exc_info or "") for record in caplog.records
            if record.name.startswith("workbench")]
    assert not [text for text in ours if any(value in text for value in values)]


@pytest.fixture
def hostile():
    with serve_hostile() as address:
        yield address


def _cassette_bodies(path) -> list[bytes]:
    """Every body of a JSON cassette as bytes (a binary one is stored base64: no file scan reads it)."""
    bodies = []
    for interaction in json.loads(path.read_text())["interactions"]:
        for side in ("request", "response"):
            body = interaction[side]["body"]
            body = body if isinstance(body, dict) else {"string": body}
            bodies.append(base64.b64decode(body["base64_string"]) if "base64_string" in body
                          else (body.get("string") or "").encode())
    return bodies


def test_every_credential_a_call_sent_is_masked_where_the_provider_echoes_it(store, hostile, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    cassette = tmp_path / "echo.json"
    messages = [{"role": "user", "content": "hello"}]
    app_tracer = trace.get_tracer("the-app")
    with pytest.raises(openai.AuthenticationError) as raised, workbench.run("echoes"):
        # the application's own span records the SDK's error (its message quotes the echoed key)
        with workbench.run("sdk"), app_tracer.start_as_current_span("app work"):
            client = openai.OpenAI(base_url=f"http://{hostile}/v1", api_key=BEARER, max_retries=0,
                                   default_headers={"x-api-key": XKEY, "api-key": AZURE},
                                   default_query={"api_key": QUERY},
                                   http_client=workbench.http_client(cassette=cassette, mode="record"))
            for chunk in client.chat.completions.create(model="wbt-gpt", messages=messages, stream=True,
                                                        stream_options={"include_usage": True}):
                pass
            client.chat.completions.create(model="wbt-gpt", messages=messages)
    assert BEARER in str(raised.value)  # the application sees what the provider said
    raw = workbench.http_client(cassette=cassette, mode="record")
    body = {"model": "wbt-gpt", "messages": messages}
    raw.post(f"http://{hostile}/v1/chat/completions", json=body, headers={"authorization": f"Bearer\t{TABBED}"})
    raw.post(f"http://user:{USER_PW}@{hostile}/v1/chat/completions", json=body)
    basic = base64.b64encode(f"someone:{BASIC_PW}".encode()).decode()
    raw.post(f"http://{hostile}/v1/chat/completions", json={**body, "stream": True},
             headers={"authorization": f"Basic {basic}"})
    raw.close()

    calls = store.calls()
    assert len(calls) == 5 and {call["http_status"] for call in calls} == {200, 401}
    assert any("[redacted]" in (call["error_message"] or "") for call in calls)
    assert not [body for body in _cassette_bodies(cassette) if any(value.encode() in body for value in SENT)]
    _kept_nowhere(store, tmp_path, caplog, SENT)


def test_a_key_as_the_model_name_or_in_the_url_path_is_kept_nowhere(store, hostile, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    cassette = tmp_path / "model.json"
    client = openai.OpenAI(base_url=f"http://{hostile}/v1/{SHAPED}", api_key="placeholder", max_retries=0,
                           http_client=workbench.http_client(cassette=cassette, mode="record"))
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=SHAPED, messages=[{"role": "user", "content": "hi"}])
    ant = anthropic.Anthropic(base_url=f"http://{hostile}", api_key="placeholder", max_retries=0,
                              http_client=workbench.http_client(cassette=cassette, mode="record"))
    with pytest.raises(anthropic.AuthenticationError):
        ant.messages.create(model=SHAPED, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    raw = workbench.http_client(cassette=cassette, mode="record")
    raw.post(f"http://{hostile}/v1/chat/completions#{SHAPED}", json={"model": "wbt-gpt", "messages": []})
    raw.close()

    calls = store.calls()
    assert len(calls) == 3
    assert [call["model_requested"] for call in calls].count("[redacted]") == 2
    assert any("/v1/[redacted]/chat/completions" in call["url"] for call in calls)
    _kept_nowhere(store, tmp_path, caplog, [SHAPED[8:40]])


def test_a_key_in_a_binary_upload_is_masked_and_its_other_bytes_kept(store, hostile, tmp_path, caplog):
    """A file upload whose bytes are not UTF-8, holding a key and a credential the call sent: masked in
    the store and the cassette, every other byte of it kept."""
    caplog.set_level(logging.DEBUG)
    cassette = tmp_path / "binary.json"
    raw = workbench.http_client(cassette=cassette, mode="record")
    upload = b"\x89PNG\r\n\x1a\n\xff\xfe" + SHAPED.encode() + b"\x00\x80 " + XKEY.encode() + b" \xc3\x28"
    raw.post(f"http://{hostile}/v1/files", headers={"x-api-key": XKEY}, files={"file": ("key.bin", upload)},
             data={"purpose": "fine-tune"})
    raw.close()

    assert len(store.calls()) == 1
    bodies = _cassette_bodies(cassette)
    assert b"\xff\xfe" + b"[redacted]" + b"\x00\x80 [redacted] \xc3\x28" in bodies[0]
    assert not [body for body in bodies if SHAPED[8:40].encode() in body or XKEY.encode() in body]
    _kept_nowhere(store, tmp_path, caplog, [SHAPED[8:40], XKEY])


def test_keys_in_compressed_bodies_are_kept_nowhere_and_a_bomb_is_not_kept(store, hostile, tmp_path, caplog):
    """gzip and zstd request bodies and a zstd response holding a key and a credential the call sent
    are decoded to be masked; a body over 64 MB once decompressed is kept as a marker, and the
    application still gets its answer."""
    caplog.set_level(logging.DEBUG)
    cassette = tmp_path / "compressed.json"
    raw = workbench.http_client(cassette=cassette, mode="record")
    headers = {"x-api-key": XKEY, "content-type": "application/json"}
    body = json.dumps({"model": "wbt-gpt", "messages": [{"role": "user", "content": f"{SHAPED} {XKEY}"}]}).encode()
    url = f"http://{hostile}/v1/chat/completions"
    raw.post(url, content=gzip.compress(body), headers={**headers, "content-encoding": "gzip"})
    raw.post(url, content=zstandard.ZstdCompressor().compress(body), headers={**headers, "content-encoding": "zstd"})
    answered = raw.post(url, json={"model": "wbt-gpt", "messages": []}, headers={**headers, "x-answer-in": "zstd"})
    # the application reads the provider's answer whole (httpx2 leaves zstd to it)
    assert XKEY.encode() in zstandard.ZstdDecompressor().decompress(answered.content)
    bomb = gzip.compress(body[:-1] + b" " * (65 * 1024 * 1024) + b"}", compresslevel=1)
    assert raw.post(url, content=bomb, headers={**headers, "content-encoding": "gzip"}).status_code == 401
    raw.close()

    calls = store.calls()
    assert len(calls) == 4
    kept = store.rows("SELECT request_json FROM call_bodies")
    assert sum("over 64 MB" in (row["request_json"] or "") for row in kept) == 1
    assert sum("[redacted] [redacted]" in (row["request_json"] or "") for row in kept) == 2
    bodies = _cassette_bodies(cassette)
    assert not [body for body in bodies if SHAPED[8:40].encode() in body or XKEY.encode() in body]
    _kept_nowhere(store, tmp_path, caplog, [SHAPED[8:40], XKEY])
