"""Canaries in every place a credential travels — every credential header, every credential-like
query parameter, URL user-info, keys pasted into prompts, a key echoed in a provider's 401 body, a
replay miss on a URL that carries a key — then searched for in the store (every column of every
table), the spool files, the cassette, the spans the application's own exporter received, the logs
and the process's output. Shapeless canaries (`cnry…`) test the rules by name; the prompt's keys
have the real formats, which are masked by shape wherever they appear."""

from __future__ import annotations

import json
import os
import stat

from reliability.faults import run_python, store_text, workbench_cli
from workbench.demo.fake_provider import Reply

# by name: their shape says nothing
HEADER_CANARIES = {
    "x-api-key": "cnryXApiKey81f2c9", "api-key": "cnryApiKey77ab01", "X-Auth-Token": "cnryXAuthToken5e1d",
    "X-Custom-Auth-Token": "cnryXCustomAuth0c4b", "x-goog-api-key": "cnryGoogHeader93aa",
    "Proxy-Authorization": "Basic cnryProxyAuth11ee",
}
QUERY_CANARIES = {
    name: f"cnryQuery{index:02d}{name.replace('-', '')}" for index, name in enumerate(
        ["key", "api_key", "auth", "jwt", "pwd", "bearer", "credential", "code", "session", "X-Amz-Credential",
         "X-Amz-Signature", "access_token"])
}
AUTH = "cnryBearerAuth42d9e1"  # the SDK's api_key: sent as `Authorization: Bearer …`, echoed in the 401
ORG, PROJECT, COOKIE = "cnryOrganization5b2", "cnryProject8c3d17", "cnrySessionCookie9f"
USER, PASSWORD = "cnryUserInfoName", "cnryUserInfoPass"
# by shape: pasted into a prompt (in pieces: no whole key stands in the tree)
PROMPT_KEYS = {
    "openai": "sk-" + "proj-Xq3vT7bNw9LkZp2RyF4hJ6sD8gA1cV5mQ0eU3iO7tY9rW2nB4xK6jH8lM1pS5dG",
    "anthropic": "sk-" + "ant-api03-Rk8Wq2Lz5Nv7Tb3Yp9Hs4Jd6Fg1Mc0Xa8Qe2Ur5Io7Ty3Pw9Kl4Zx6Cv1Bn8Mh2-AbCdEfGh",
    "aws": "AKIA" + "Z7QX3LMN5PQR8STV",
    "google": "AIza" + "SyB7xK3mP9qR2sT5vW8yZ1aC4dF6gH0jL3n",
    "github": "ghp_" + "R7tY2uI9oP4aS6dF1gH8jK3lZ5xC0vB2nM7q",
    "bearer": "Bearer " + "a9F3kL2mN8pQ4rS7tU1vW6xY0zB5cD",
    "private key": "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEowIBAAKCAQEAcnryPrivateKeyBody\n-----END RSA PRIVATE KEY-----",
}
SHAPED_PARTS = {
    "openai": "Xq3vT7bNw9LkZp2RyF4hJ6", "anthropic": "Rk8Wq2Lz5Nv7Tb3Yp9Hs4", "aws": "Z7QX3LMN5PQR8STV",
    "google": "SyB7xK3mP9qR2sT5vW8yZ", "github": "R7tY2uI9oP4aS6dF1gH8", "bearer": "a9F3kL2mN8pQ4rS7tU1",
    "private key": "cnryPrivateKeyBody",
}
EVERY_CANARY = [*HEADER_CANARIES.values(), *QUERY_CANARIES.values(), AUTH, ORG, PROJECT, COOKIE, USER, PASSWORD,
                *SHAPED_PARTS.values()]

CHILD = r"""
import json, logging, sys
from pathlib import Path
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
logging.basicConfig(filename="all.log", level=logging.DEBUG, format="%(name)s %(message)s")

import anthropic, openai, workbench

spec = json.loads(sys.argv[1])
host = spec["url"].split("://", 1)[1]
base = spec["url"]
with_userinfo = f"http://{spec['user']}:{spec['password']}@{host}"
headers = {**spec["headers"], "Cookie": f"session={spec['cookie']}; theme=dark"}
prompt = "my keys: " + " / ".join(spec["prompt_keys"])
messages = [{"role": "user", "content": prompt}]

recording = workbench.http_client(cassette="cassettes/canary.json", mode="record")
client = openai.OpenAI(base_url=base + "/v1", api_key=spec["auth"], organization=spec["org"], project=spec["project"],
                       default_headers=headers, default_query=spec["query"], max_retries=0, http_client=recording)
with workbench.run("canary " + spec["prompt_keys"][0], note="a run", token=spec["prompt_keys"][4]):
    client.chat.completions.create(model="wbt-gpt", messages=messages)
    for chunk in client.chat.completions.create(model="wbt-gpt", messages=messages, stream=True,
                                                stream_options={"include_usage": True}):
        pass
    client.responses.create(model="wbt-gpt", input=prompt)
    # user-info in the base URL (httpx turns it into basic auth)
    openai.OpenAI(base_url=with_userinfo + "/v1", api_key=spec["auth"], max_retries=0,
                  http_client=recording).chat.completions.create(model="wbt-gpt", messages=messages)
    ant = anthropic.Anthropic(base_url=base, api_key=spec["auth"], default_headers=headers,
                              default_query=spec["query"], max_retries=0, http_client=recording)
    ant.messages.create(model="wbt-claude", max_tokens=50, messages=messages)
    try:
        client.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "401 please"}])
    except openai.AuthenticationError as exc:
        print("app saw:", type(exc).__name__)  # the SDK's own message quotes the provider: not ours to scrub
recording.close()

# a replay miss on a URL that carries credentials, inside a run
replaying = openai.OpenAI(base_url=base + "/v1", api_key=spec["auth"], default_query=spec["query"], max_retries=0,
                          http_client=workbench.http_client(cassette="cassettes/canary.json", mode="replay"))
try:
    with workbench.run("missing"):
        replaying.chat.completions.create(model="wbt-gpt", messages=[{"role": "user", "content": "never recorded " + prompt}])
except openai.BadRequestError as exc:
    print("miss:", exc)
workbench.flush()
# Workbench's own spans (the SDKs' own spans and logs are theirs: only what Workbench stores is scrubbed)
ours = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "workbench"]
spans = [{"name": s.name, "attributes": dict(s.attributes or {}), "status": s.status.description,
          "events": [dict(e.attributes or {}) for e in s.events]} for s in ours]
Path("workbench.log").write_text("".join(line for line in open("all.log") if line.startswith("workbench")))
Path("spans.json").write_text(json.dumps(spans, default=str))
"""


def test_canaries_in_every_credential_position_are_never_kept(tmp_path, fake_provider, fake_url):
    echoed = {"set-cookie": "session=" + COOKIE + "; Path=/", "openai-organization": ORG, "openai-project": PROJECT,
              "anthropic-organization-id": ORG, "x-auth-token": HEADER_CANARIES["X-Auth-Token"]}
    fake_provider.script(*[Reply(text="ok", headers=echoed) for _ in range(5)],
                         Reply(status=401, error_message=f"Incorrect API key provided: {AUTH}. You can find your key "
                               f"at https://platform.example/account", headers=echoed))
    spec = {"url": fake_url, "user": USER, "password": PASSWORD, "auth": AUTH, "org": ORG, "project": PROJECT,
            "cookie": COOKIE, "headers": HEADER_CANARIES, "query": QUERY_CANARIES,
            "prompt_keys": list(PROMPT_KEYS.values())}
    result = run_python(CHILD, json.dumps(spec), cwd=tmp_path,
                        env={"WORKBENCH_DB": str(tmp_path / ".workbench" / "wb.duckdb"), "WORKBENCH_MODELS": "none.toml"})
    assert result.returncode == 0, result.stderr
    # every canary really travelled: the provider received each one where it was planted
    sent = fake_provider.requests[0]
    assert sent.headers["authorization"] == f"Bearer {AUTH}"
    assert fake_provider.requests[3].headers["authorization"].startswith("Basic ")
    assert sent.headers["openai-organization"] == ORG and sent.headers["openai-project"] == PROJECT
    assert all(value in sent.headers.values() for value in HEADER_CANARIES.values())
    assert all(value in sent.path for value in QUERY_CANARIES.values())
    assert all(key.split("\n")[0] in json.dumps(sent.json) for key in PROMPT_KEYS.values())
    assert "miss:" in result.stdout and "app saw:" in result.stdout
    assert json.loads((tmp_path / "spans.json").read_text())  # Workbench's spans reached the app's exporter

    places = {"stdout": result.stdout, "stderr": result.stderr,
              "spans": (tmp_path / "spans.json").read_text(), "logs": (tmp_path / "workbench.log").read_text(),
              "store": store_text(tmp_path / ".workbench" / "wb.duckdb"),
              "cassette": (tmp_path / "cassettes" / "canary.json").read_text()}
    for path in (tmp_path / ".workbench").rglob("*"):
        if path.is_file():
            places[str(path.relative_to(tmp_path))] = path.read_bytes().decode("utf-8", "replace")
    leaks = {name: [canary for canary in EVERY_CANARY if canary in text] for name, text in places.items()}
    leaked = {name: found for name, found in leaks.items() if found}
    assert not leaked, "\n".join(f"{name}: {found}" for name, found in leaked.items())
    # what is kept still says what happened
    store = places["store"]
    assert "calls.error_type: WB_REPLAY_MISS" in store and "[redacted]" in store
    assert "Incorrect API key provided: [redacted]" in store
    cassette = json.loads(places["cassette"])
    assert len(cassette["interactions"]) == 6
    # and Workbench's own checker passes the cassette Workbench wrote
    checked = workbench_cli("cassettes", "check", "cassettes", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_store_is_readable_by_its_owner_only(tmp_path, fake_url):
    result = run_python(
        "import openai, sys, workbench\n"
        "c = openai.OpenAI(base_url=sys.argv[1] + '/v1', api_key='k', max_retries=0, http_client=workbench.http_client())\n"
        "c.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])\n"
        "workbench.flush()\n", fake_url, cwd=tmp_path, env={"WORKBENCH_DB": str(tmp_path / "wb.duckdb")})
    assert result.returncode == 0, result.stderr
    for path in [tmp_path / "wb.duckdb", *(tmp_path / "spool").glob("*.jsonl")]:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_cassettes_check_finds_every_secret_the_scrubber_removes(tmp_path):
    """A foreign cassette with a secret in each place: `check` names every one, and scrubbing it
    leaves nothing for `check` to find."""
    from workbench.replay.cassette import load_cassette, write_cassette
    from workbench.replay.check import check_cassette
    from workbench.replay.scrub import find_secrets, scrub

    query = "&".join(f"{name}={value}" for name, value in QUERY_CANARIES.items())
    request_headers = {**{name: [value] for name, value in HEADER_CANARIES.items()},
                       "Authorization": [f"Bearer {AUTH}"], "OpenAI-Organization": [ORG], "OpenAI-Project": [PROJECT],
                       "Cookie": ["session=" + COOKIE], "content-type": ["application/json"]}
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": key}
                                                   for key in PROMPT_KEYS.values()]})
    raw = {"interactions": [{
        "request": {"method": "POST", "uri": f"https://{USER}:{PASSWORD}@api.example/v1/chat/completions?{query}",
                    "headers": request_headers, "body": body},
        "response": {"status": {"code": 401, "message": "Unauthorized"},
                     "headers": {"set-cookie": ["session=" + COOKIE], "openai-organization": [ORG],
                                 "content-type": ["application/json"]},
                     "body": {"string": json.dumps({"error": {"message": f"Incorrect API key provided: {AUTH}"}})}},
    }], "version": 1}
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(raw))
    findings = check_cassette(path).secrets
    planted = (len(HEADER_CANARIES) + 4  # authorization, organization, project, cookie
               + len(QUERY_CANARIES) + 1  # user-info
               + len(PROMPT_KEYS) + 2  # response set-cookie, openai-organization
               + 1)  # the 401 body echoing the key
    assert len(findings) >= planted, findings
    for place in ("request header Authorization", "request header OpenAI-Project", "request header X-Custom-Auth-Token",
                  "request uri: user-info", "request uri: query parameter X-Amz-Credential",
                  "request uri: query parameter code", "request body: Anthropic key", "request body: private key",
                  "response header set-cookie", "response body: a credential the request sent"):
        assert any(place in finding for finding in findings), place
    clean = [scrub(interaction) for interaction in load_cassette(path)]
    assert [find_secrets(interaction) for interaction in clean] == [[]]
    write_cassette(tmp_path / "scrubbed.json", clean)
    text = (tmp_path / "scrubbed.json").read_text()
    assert [canary for canary in EVERY_CANARY if canary in text] == []
    assert check_cassette(tmp_path / "scrubbed.json").secrets == []


def test_a_replay_miss_names_no_credential(tmp_path):
    from workbench.replay.session import Cassette
    from workbench.replay.transport import miss_error

    cassette = Cassette(tmp_path / "none.json", mode="replay")
    url = f"https://{USER}:{PASSWORD}@api.example/v1/chat/completions?key={QUERY_CANARIES['key']}"
    body = json.dumps({"messages": [{"role": "user", "content": PROMPT_KEYS["openai"]}]}).encode()
    error = miss_error(cassette, "POST", url, body, "wb1:x")
    text = f"{error.cause} {error.fix}"
    assert [canary for canary in EVERY_CANARY if canary in text] == []
    assert "api.example/v1/chat/completions" in text


def test_a_recording_whose_prompt_held_a_key_still_replays(tmp_path):
    """The cassette keeps the prompt with the key masked; the same request replays from it."""
    import workbench
    from workbench.demo.fake_provider import FakeProvider, FakeTransport

    provider = FakeProvider()
    body = {"model": "m", "messages": [{"role": "user", "content": f"use {PROMPT_KEYS['anthropic']} please"}]}
    recording = workbench.http_client(cassette=tmp_path / "k.json", mode="record", transport=FakeTransport(provider))
    recorded = recording.post("http://fake.local/v1/chat/completions", json=body).json()
    recording.close()
    assert SHAPED_PARTS["anthropic"] not in (tmp_path / "k.json").read_text()
    replaying = workbench.http_client(cassette=tmp_path / "k.json", mode="replay", transport=FakeTransport(provider))
    replayed = replaying.post("http://fake.local/v1/chat/completions", json=body)
    assert replayed.status_code == 200 and replayed.json()["id"] == recorded["id"]
    assert len(provider.requests) == 1  # served from the cassette


GEMINI_CHILD = r"""
import asyncio, json, logging, sys
from pathlib import Path
logging.basicConfig(filename="all.log", level=logging.DEBUG, format="%(name)s %(message)s")
import httpx2, workbench
from google import genai
from google.genai import types

url, header_key, query_key = sys.argv[1:4]
cassette = "cassettes/gemini.json"
client = genai.Client(api_key=header_key, http_options=types.HttpOptions(
    base_url=url, httpx_client=workbench.http_client(cassette=cassette, mode="record"),
    httpx_async_client=workbench.async_http_client(cassette=cassette, mode="record")))
body = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
with workbench.run("gemini canary"):
    client.models.generate_content(model="wbt-gemini", contents="hello")
    list(client.models.generate_content_stream(model="wbt-gemini", contents="hello"))
    asyncio.run(client.aio.models.generate_content(model="wbt-gemini", contents="hello"))
    # REST as curl and older clients send it: the key as `?key=`, also on a stream
    rest = workbench.http_client(cassette=cassette, mode="record")
    for method in ("generateContent?", "streamGenerateContent?alt=sse&"):
        print(rest.post(f"{url}/v1beta/models/wbt-gemini:{method}key={query_key}", json=body).status_code)
    try:  # a 400 whose message echoes the key it was sent
        client.models.generate_content(model="wbt-gemini", contents="hello")
    except Exception as exc:
        print("app saw:", type(exc).__name__)
workbench.flush()
Path("workbench.log").write_text("".join(line for line in open("all.log") if line.startswith("workbench")))
"""


def test_a_gemini_key_in_its_header_or_its_query_is_never_kept(tmp_path, fake_provider, fake_url):
    """google-genai's `x-goog-api-key` and REST's `?key=`: gone from the store, the spool, the
    cassette and Workbench's logs, also where an error message echoes the key."""
    header_key, query_key = "cnryGoogHeaderKey42", "cnryGoogQueryKey77"
    fake_provider.script(*["ok"] * 5, Reply(status=400, error_message=f"API key not valid: {header_key}"))
    result = run_python(GEMINI_CHILD, fake_url, header_key, query_key, cwd=tmp_path,
                        env={"WORKBENCH_DB": str(tmp_path / ".workbench" / "wb.duckdb"), "WORKBENCH_MODELS": "none.toml"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["200", "200", "app", "saw:", "ClientError"]
    sent = fake_provider.requests
    assert [request.headers.get("x-goog-api-key") for request in sent] == [header_key] * 3 + [None] * 2 + [header_key]
    assert all(f"key={query_key}" in request.path for request in sent[3:5])
    places = {"logs": (tmp_path / "workbench.log").read_text(), "store": store_text(tmp_path / ".workbench" / "wb.duckdb"),
              "cassette": (tmp_path / "cassettes" / "gemini.json").read_text()}
    for path in (tmp_path / ".workbench").rglob("*"):
        if path.is_file():
            places[str(path.relative_to(tmp_path))] = path.read_bytes().decode("utf-8", "replace")
    leaked = {name: key for name, text in places.items() for key in (header_key, query_key) if key in text}
    assert not leaked, leaked
    # what is kept still says what happened: six calls, the query's key redacted by name
    assert places["store"].count("calls.wire: google.gemini") == 6
    assert "key=%5Bredacted%5D" in places["store"] or "key=[redacted]" in places["store"]
    assert "API key not valid: [redacted]" in places["store"]
    assert len(json.loads(places["cassette"])["interactions"]) == 6
