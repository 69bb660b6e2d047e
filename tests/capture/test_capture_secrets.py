"""A canary API key sent in every position a secret travels in (Authorization bearer, x-api-key,
api-key, a cookie, a `?api_key=` query parameter, and the provider's secret response headers)
appears nowhere under the store or spool directories, in no column of the store, and in no log of
Workbench's."""

from __future__ import annotations

import json
import logging

import anthropic
import duckdb
import httpx2
import openai

import workbench
from workbench.demo.fake_provider import Reply
from workbench.replay.check import check_cassette

CANARY = "sk-" + "canary-7d1f0c3e9b2a4c58"  # in pieces: no whole key stands in the tree
MESSAGES = [{"role": "user", "content": "hello"}]


def test_canary_key_is_never_stored_nor_logged(store, fake_provider, fake_url, caplog):
    caplog.set_level(logging.DEBUG)
    secret_response_headers = {"set-cookie": "session=" + CANARY + "; Path=/", "openai-organization": CANARY,
                               "openai-project": CANARY, "anthropic-organization-id": CANARY}
    fake_provider.script(*[Reply(text="ok", headers=secret_response_headers) for _ in range(5)],
                         Reply(status=401, headers=secret_response_headers))
    with workbench.run("canary"):
        bearer = openai.OpenAI(base_url=fake_url + "/v1", api_key=CANARY, max_retries=0,
                               http_client=workbench.http_client())
        bearer.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
        azure_style = openai.OpenAI(
            base_url=fake_url + "/v1", api_key="placeholder", max_retries=0, http_client=workbench.http_client(),
            default_headers={"api-key": CANARY, "Cookie": "session=" + CANARY + "; other=1"},
            default_query={"api_key": CANARY})
        azure_style.chat.completions.create(model="wbt-gpt", messages=MESSAGES)
        azure_style.responses.create(model="wbt-gpt", input="hello")
        # this anthropic SDK sends its key as a bearer token; x-api-key (the older form) is set here
        ant = anthropic.Anthropic(base_url=fake_url, api_key=CANARY, max_retries=0,
                                  http_client=workbench.http_client(), default_query={"key": CANARY},
                                  default_headers={"x-api-key": CANARY, "Proxy-Authorization": f"Basic {CANARY}"})
        ant.messages.create(model="wbt-claude", max_tokens=50, messages=MESSAGES)
        with ant.messages.stream(model="wbt-claude", max_tokens=50, messages=MESSAGES) as stream:
            stream.get_final_message()
        try:
            ant.messages.create(model="wbt-claude", max_tokens=50, messages=MESSAGES)
        except anthropic.AuthenticationError:
            pass
    # the provider really received the canary in each position
    seen = [request.headers for request in fake_provider.requests]
    assert any(h.get("authorization") == f"Bearer {CANARY}" for h in seen)
    assert any(h.get("x-api-key") == CANARY for h in seen)
    assert any(h.get("api-key") == CANARY for h in seen)
    assert any(CANARY in h.get("cookie", "") for h in seen)
    assert any(f"api_key={CANARY}" in request.path for request in fake_provider.requests)

    calls = store.calls()
    assert len(calls) == 6
    assert any("api_key=%5Bredacted%5D" in call["url"] or "api_key=[redacted]" in call["url"] for call in calls)

    # every text column of every table
    con = duckdb.connect(str(store.path), read_only=True)
    try:
        columns = con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE data_type LIKE 'VARCHAR%' AND table_schema = 'main'").fetchall()
        for table, column in columns:
            hits = con.execute(f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS VARCHAR) LIKE ?',
                               [f"%{CANARY}%"]).fetchall()[0][0]
            assert hits == 0, f"{table}.{column}"
    finally:
        con.close()
    # every byte of every file under the store's folder (the DuckDB file, its WAL, the spool files)
    files = [path for path in store.path.parent.rglob("*") if path.is_file()]
    assert any(path.suffix == ".jsonl" for path in files) or store.spool_dir.is_dir()
    assert any(path.name == "wb.duckdb" for path in files)
    for path in files:
        assert CANARY.encode() not in path.read_bytes(), path
    # Workbench's own logs (the SDKs and httpx log URLs and headers at DEBUG themselves; not ours)
    ours = [record.getMessage() + str(record.exc_info or "") for record in caplog.records
            if record.name.startswith("workbench")]
    assert not any(CANARY in text for text in ours)


def test_a_key_glued_to_a_word_in_a_run_name_a_tag_or_a_prompt_is_never_kept(store, fake_url, tmp_path, caplog):
    """`prod-sk-proj-…` as a run name, `env_sk-…` as a tag's key, `OPENAI_API_KEYsk-…` as its value and
    a prompt's `token` + `ghp_…`: none of them anywhere under the store, in the cassette or in a log."""
    caplog.set_level(logging.DEBUG)
    tail = "Xq3vT7bN" + "w9LkZp2R" + "yF4hJ6sD" + "8gA1cV5m" + "Q0eU3iO7"  # the keys' shared part, from pieces
    cassette = tmp_path / "glued.json"
    with workbench.run("prod-sk-proj-" + tail, **{"env_sk-" + tail[:24]: "OPENAI_API_KEY" + "sk-" + tail}):
        client = openai.OpenAI(base_url=fake_url + "/v1", api_key="placeholder", max_retries=0,
                               http_client=workbench.http_client(cassette=cassette, mode="record"))
        client.chat.completions.create(model="wbt-gpt", messages=[
            {"role": "user", "content": "my token" + "ghp_" + tail[:36] + " and key:\nsk-" + tail}])
    assert len(store.calls()) == 1
    run = store.one("SELECT name, tags FROM runs")
    assert run["name"] == "prod-[redacted]" and "env_[redacted]" in run["tags"] and "OPENAI_API_KEY[redacted]" in run["tags"]
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert cassette in files and store.path in files
    for path in files:
        assert tail[8:24].encode() not in path.read_bytes(), path
    ours = [record.getMessage() for record in caplog.records if record.name.startswith("workbench")]
    assert not any(tail[8:24] in text for text in ours)


def _one_char_an_event(text: str, arguments: str) -> bytes:
    """An OpenAI chat stream that spells `text` one character an event and a tool call's `arguments`
    five characters an event (as a model streams tokens), then its usage."""
    def chunk(delta: dict) -> str:
        event = {"id": "chatcmpl-split", "object": "chat.completion.chunk", "model": "wbt-gpt",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        return "data: " + json.dumps(event) + "\n\n"
    events = [chunk({"content": char}) for char in text]
    for start in range(0, len(arguments), 5):
        function = {"name": "f" if not start else "", "arguments": arguments[start:start + 5]}
        events.append(chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": function}]}))
    usage = {"id": "chatcmpl-split", "object": "chat.completion.chunk", "model": "wbt-gpt", "choices": [],
             "usage": {"prompt_tokens": 9, "completion_tokens": len(text), "total_tokens": 9 + len(text)}}
    return ("".join(events) + "data: " + json.dumps(usage) + "\n\ndata: [DONE]\n\n").encode()


def test_a_key_streamed_a_few_characters_an_event_is_kept_nowhere(store, tmp_path):
    """No event of a stream holds the key whole, so no scan of the raw body sees it; the stream's
    deltas spell it together: the cassette, the store's body and `cassettes check` still see it. The
    echoed credential (any shape) the same."""
    tail = "Xq3vT7bN" + "w9LkZp2R" + "yF4hJ6sD" + "8gA1cV5m"
    key, echoed = "sk-" + "proj-" + tail, "cnryEcho" + "Value9f8e7d6c"
    stream = _one_char_an_event(f"your key is {key} and {echoed}.", json.dumps({"api_key": key}))

    def server(request):
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream)

    cassette = tmp_path / "split.json"
    client = workbench.http_client(cassette=cassette, mode="record", transport=httpx2.MockTransport(server))
    with client.stream("POST", "http://fake.test/v1/chat/completions", headers={"x-api-key": echoed},
                       json={"model": "wbt-gpt", "stream": True, "messages": MESSAGES}) as response:
        assert response.read() == stream  # the application reads what the provider sent
    client.close()

    [call] = store.calls()
    body = store.one("SELECT response_json, output_text, tool_calls FROM call_bodies")
    [recorded] = json.loads(cassette.read_text())["interactions"]
    for text in (body["response_json"], recorded["response"]["body"]["string"]):
        deltas = [choice["delta"] for line in text.splitlines() if line.startswith("data: {")
                  for choice in json.loads(line[6:])["choices"]]
        spelled = "".join(delta.get("content") or "" for delta in deltas)
        arguments = "".join(tool["function"]["arguments"] for delta in deltas for tool in delta.get("tool_calls", []))
        assert spelled == "your key is [redacted] and [redacted]." and arguments == '{"api_key": "[redacted]"}'
        assert tail[:8] not in text and "Value9f8" not in text
    assert body["output_text"] == "your key is [redacted] and [redacted]."
    assert call["settled"] and call["output_tokens"] == len(f"your key is {key} and {echoed}.")

    # `cassettes check` finds the split key in a cassette the scrubber never wrote
    raw = tmp_path / "raw.json"
    recorded = json.loads(cassette.read_text())
    recorded["interactions"][0]["response"]["body"]["string"] = stream.decode()
    raw.write_text(json.dumps(recorded))
    secrets = check_cassette(raw).secrets
    assert any("API key" in found and "split across stream events" in found for found in secrets), secrets
    assert check_cassette(cassette).secrets == []
