"""`workbench collect`: apps in any language send OTLP/HTTP traces; their GenAI spans become calls,
runs, spans, turns and compactions, priced by Workbench's prices. Each test runs a real
`workbench collect` process on a free port and sends to it with the real OpenTelemetry SDK
exporter, or posts recorded OTLP JSON payloads of the other attribute styles."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from fixtures.capture_store import TEST_MODELS, expected_cost
from workbench.config import spool_dir_of
from workbench.store.ingest import ingest_spools

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "otlp"
TOKEN = "collect-token-0123456789"


def _models_toml(folder: Path) -> None:
    rows = []
    for model, prices in TEST_MODELS.items():
        fields = "\n".join(f"{key} = {json.dumps(value)}" for key, value in prices.items())
        rows.append(f'[[model]]\nid = "{model}"\n{fields}\ncontext_window = 200000\nmax_output = 64000\n'
                    'source = "tests"\nas_of = 2025-01-01\n')
    (folder / "models.toml").write_text("\n".join(rows))


def _env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("WORKBENCH_", "OTEL_"))}
    return {**env, **extra}


class Collector:
    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.db = folder / "wb.duckdb"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workbench", "collect", "--port", "0", "--db", str(self.db)],
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/v1/traces", line)
        assert found, line + self.process.stderr.read()
        self.url = f"http://127.0.0.1:{found.group(1)}/v1/traces"

    def rows(self, sql: str) -> list[dict]:
        ingest_spools(self.db, spool_dir_of(self.db), wait=True)
        if not self.db.exists():  # nothing was ever recorded
            return []
        deadline = time.monotonic() + 10
        while True:
            try:
                con = duckdb.connect(str(self.db), read_only=True)
                break
            except duckdb.Error:  # a detached ingester holds it for a moment
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            cursor = con.execute(sql)
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]
        finally:
            con.close()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def _start(tmp_path: Path, **env: str) -> Iterator[Collector]:
    _models_toml(tmp_path)
    collector = Collector(tmp_path, _env(**env))
    try:
        yield collector
    finally:
        collector.stop()


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    yield from _start(tmp_path)


def _provider(exporter: OTLPSpanExporter) -> TracerProvider:
    # each span is exported as it ends: a trace's spans reach the collector in several requests
    provider = TracerProvider(resource=Resource.create({"service.name": "checkout-api"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _usage(input_tokens=0, cache_read_tokens=0, cache_write_tokens=0, output_tokens=0) -> dict:
    return {"input_tokens": input_tokens, "cache_read_tokens": cache_read_tokens,
            "cache_write_tokens": cache_write_tokens, "output_tokens": output_tokens}


def _calls(collector: Collector) -> list[dict]:
    return collector.rows("SELECT * FROM calls ORDER BY started_at")


def test_the_python_sdk_exporter_records_current_and_older_semantic_conventions(collector):
    provider = _provider(OTLPSpanExporter(endpoint=collector.url, compression=Compression.Gzip))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("checkout", attributes={"gen_ai.operation.name": "invoke_agent"}) as root:
        with tracer.start_as_current_span("chat wbt-claude", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": "wbt-claude", "gen_ai.response.model": "wbt-claude",
            # OpenTelemetry's input counts cache reads and writes in: 1,000 uncached
            "gen_ai.usage.input_tokens": 1700, "gen_ai.usage.cache_read.input_tokens": 200,
            "gen_ai.usage.cache_creation.input_tokens": 500, "gen_ai.usage.output_tokens": 100,
            "gen_ai.response.finish_reasons": ["end_turn"],
            "workbench.cost_micros": 1, "gen_ai.usage.cost": 99.0,  # never trusted
        }):
            pass
        with tracer.start_as_current_span("chat wbt-gpt", attributes={
            "gen_ai.system": "openai", "gen_ai.request.model": "wbt-gpt",
            "gen_ai.usage.prompt_tokens": 1000, "gen_ai.usage.completion_tokens": 50,
            "gen_ai.usage.cache_read_input_tokens": 400,
        }):
            pass
        root.add_event("agent.turn", {"turn": 1, "model": "wbt-gpt", "input_tokens": 600, "cache_read_tokens": 400,
                                      "output_tokens": 50, "cost_micros": 5})
        root.add_event("agent.compact", {"turn": 1, "outcome": "ok", "tokens_before": 9000, "tokens_after": 1200,
                                         "limit": 8000, "summarised_turns": 3, "kept_turns": 1,
                                         "model": "wbt-claude", "input_tokens": 2000, "output_tokens": 300,
                                         "cost_micros": 7})
    provider.shutdown()

    calls = _calls(collector)
    claude = _usage(1000, 200, 500, 100)
    gpt = _usage(600, 400, 0, 50)
    assert [{name: call[name] for name in (*claude, "model_requested", "provider", "settled", "stop_reason")}
            for call in calls] == [
        {**claude, "model_requested": "wbt-claude", "provider": "anthropic", "settled": True, "stop_reason": "end_turn"},
        {**gpt, "model_requested": "wbt-gpt", "provider": "openai", "settled": True, "stop_reason": None},
    ]
    assert [call["cost_micros"] for call in calls] == [expected_cost("wbt-claude", claude), expected_cost("wbt-gpt", gpt)]
    assert all(call["price_source"].startswith(("wbt-claude@", "wbt-gpt@")) for call in calls)
    run_id = calls[0]["run_id"]
    assert calls[1]["run_id"] == run_id and len(run_id) == 32
    (run,) = collector.rows("SELECT * FROM runs")
    assert (run["run_id"], run["name"], run["kind"], run["status"]) == (run_id, "checkout", "agent", "ok")
    assert run["trace_id"] == calls[0]["trace_id"]
    assert run["billed_calls"] == 2 and run["billed_unpriced_calls"] == 0
    assert run["billed_cost_micros"] == sum(call["cost_micros"] for call in calls)
    assert run["billed_input_tokens"] == 1600 and run["billed_cache_write_tokens"] == 500
    tags = {row["key"]: row["value"] for row in collector.rows("SELECT key, value FROM run_tags")}
    assert tags == {"source": "otlp", "service": "checkout-api"}
    assert collector.rows("SELECT count(*) AS n FROM spans WHERE run_id = '%s'" % run_id) == [{"n": 3}]

    (turn,) = collector.rows("SELECT * FROM span_events WHERE name = 'agent.turn'")
    assert turn["run_id"] == run_id
    assert json.loads(turn["attributes"])["cost_micros"] == expected_cost("wbt-gpt", gpt)  # ours, not the 5 sent
    (compaction,) = collector.rows("SELECT * FROM compactions")
    assert {name: compaction[name] for name in ("run_id", "turn", "outcome", "tokens_before", "tokens_after",
                                                "limit_tokens", "summarised_turns", "kept_turns", "model")} == {
        "run_id": run_id, "turn": 1, "outcome": "ok", "tokens_before": 9000, "tokens_after": 1200,
        "limit_tokens": 8000, "summarised_turns": 3, "kept_turns": 1, "model": "wbt-claude"}
    assert compaction["cost_micros"] == expected_cost("wbt-claude", _usage(2000, 0, 0, 300))


def _post(collector: Collector, body: bytes, content_type: str = "application/json", **headers: str) -> httpx.Response:
    return httpx.post(collector.url, content=body, headers={"Content-Type": content_type, **headers}, timeout=10)


def test_openinference_spans_are_recorded_with_cached_input_taken_out(collector):
    key = "sk-" + "proj-" + secrets.token_urlsafe(30)  # pasted into the prompt: built here, none in the fixture
    response = _post(collector, (FIXTURES / "openinference.json").read_bytes().replace(b"{a key}", key.encode()))
    assert (response.status_code, response.json()) == (200, {})

    priced_call, unpriced_call = _calls(collector)
    usage = _usage(176, 1024, 0, 80)
    assert {name: priced_call[name] for name in usage} == usage
    assert priced_call["reasoning_tokens"] == 16
    assert priced_call["cost_micros"] == expected_cost("wbt-gpt", usage)  # not llm.cost.total
    assert (unpriced_call["model_requested"], unpriced_call["cost_micros"], unpriced_call["price_source"]) == (
        "mystery-model-x", None, None)
    (run,) = collector.rows("SELECT * FROM runs")
    assert (run["name"], run["billed_calls"], run["billed_unpriced_calls"], run["billed_cost_micros"]) == (
        "RetrievalQA", 2, 1, priced_call["cost_micros"])
    # the key pasted into a prompt never reaches the store
    stored = json.dumps(collector.rows("SELECT attributes FROM spans"))
    assert key not in stored and "[redacted]" in stored and "what is our refund policy" in stored


def test_openllmetry_spans_are_recorded_and_a_resent_batch_is_kept_once(collector):
    payload = (FIXTURES / "openllmetry.json").read_bytes()
    assert _post(collector, payload).status_code == 200
    assert _post(collector, gzip.compress(payload), **{"Content-Encoding": "gzip"}).status_code == 200  # a retry

    claude_call, mini_call = _calls(collector)
    claude, mini = _usage(100, 2000, 200, 40), _usage(500, 0, 0, 20)
    assert {name: claude_call[name] for name in claude} == claude
    assert {name: mini_call[name] for name in mini} == mini
    assert (claude_call["provider"], claude_call["response_id"]) == ("anthropic", "msg_01XFDUDYJgAACzvnptvVoYEL")
    assert (mini_call["error_type"], mini_call["error_message"]) == ("error", "rate limited")
    assert [claude_call["cost_micros"], mini_call["cost_micros"]] == [
        expected_cost("wbt-claude", claude), expected_cost("wbt-mini", mini)]
    (run,) = collector.rows("SELECT * FROM runs")
    assert (run["name"], run["status"], run["billed_calls"]) == ("joke_workflow.workflow", "ok", 2)
    assert run["billed_cost_micros"] == claude_call["cost_micros"] + mini_call["cost_micros"]


def test_bad_payloads_are_refused_with_a_reason_and_the_collector_keeps_serving(collector):
    not_protobuf = _post(collector, b"\xff\xff\xff\xff not a protobuf", "application/x-protobuf")
    assert not_protobuf.status_code == 400 and b"protobuf" in not_protobuf.content
    not_json = _post(collector, b"{not json")
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["message"]
    wrong_type = _post(collector, b"<spans/>", "text/xml")
    assert wrong_type.status_code == 415 and b"application/x-protobuf" in wrong_type.content
    bomb = _post(collector, gzip.compress(b"0" * (17 * 1024 * 1024)), **{"Content-Encoding": "gzip"})
    assert bomb.status_code == 413 and "decompressed" in bomb.json()["message"]
    assert _raw(collector, b"Content-Length: 999999999\r\n\r\n").startswith(b"HTTP/1.1 413")
    assert _raw(collector, b"Transfer-Encoding: chunked\r\n\r\n2000000\r\n").startswith(b"HTTP/1.1 413")
    assert _raw(collector, b"Transfer-Encoding: chunked\r\n\r\nzz\r\n").startswith(b"HTTP/1.1 400")
    assert _raw(collector, b"\r\n").startswith(b"HTTP/1.1 411")

    # one bad span and one bad counter: the rest of the payload is kept
    data = json.loads((FIXTURES / "openllmetry.json").read_text())
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["traceId"] = "not-a-trace-id"
    spans[1]["attributes"].append({"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "-5"}})
    spans[1]["attributes"] = [pair for pair in spans[1]["attributes"] if pair["key"] != "llm.usage.completion_tokens"]
    partial = _post(collector, json.dumps(data).encode())
    assert partial.status_code == 200
    assert partial.json()["partialSuccess"]["rejectedSpans"] == "2"
    assert "trace id" in partial.json()["partialSuccess"]["errorMessage"]
    assert "is not a token count" in partial.json()["partialSuccess"]["errorMessage"]
    assert _calls(collector) == []
    assert [row["name"] for row in collector.rows("SELECT name FROM spans ORDER BY start_time")] == [
        "joke_workflow.workflow", "openai.chat"]

    assert collector.process.poll() is None
    assert _post(collector, (FIXTURES / "openinference.json").read_bytes()).status_code == 200
    assert len(_calls(collector)) == 2


def _raw(collector: Collector, rest: bytes) -> bytes:
    """The answer to a request whose body is announced (or begun) by `rest`, and never sent whole."""
    host, port = collector.url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n" + rest)
        return raw.recv(4096)


def test_a_recorded_payload_sent_as_protobuf_is_read_like_its_json(collector):
    response = httpx.post(collector.url, content=_protobuf_of((FIXTURES / "openllmetry.json").read_bytes()),
                          timeout=10, headers={"Content-Type": "application/x-protobuf"})
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert response.status_code == 200 and answer.partial_success.rejected_spans == 0
    claude_call, mini_call = _calls(collector)
    assert {name: claude_call[name] for name in _usage()} == _usage(100, 2000, 200, 40)
    assert mini_call["cost_micros"] == expected_cost("wbt-mini", _usage(500, 0, 0, 20))


def _protobuf_of(json_body: bytes) -> bytes:
    """The JSON fixture as the protobuf an SDK sends (ids as bytes, where OTLP JSON writes hex)."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    data = json.loads(json_body)
    for resource_spans in data["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for name in ("traceId", "spanId", "parentSpanId"):
                    if name in span:
                        span[name] = base64.b64encode(bytes.fromhex(span[name])).decode()
    return ParseDict(data, ExportTraceServiceRequest()).SerializeToString()


def test_listening_beyond_loopback_needs_a_token(tmp_path):
    result = subprocess.run([sys.executable, "-m", "workbench", "collect", "--host", "0.0.0.0", "--port", "0"],
                            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "WB_COLLECT_TOKEN" in result.stdout + result.stderr and "Traceback" not in result.stderr
    short = subprocess.run([sys.executable, "-m", "workbench", "collect", "--host", "0.0.0.0", "--port", "0"],
                           cwd=tmp_path, env=_env(WORKBENCH_COLLECT_TOKEN="short"), capture_output=True, text=True,
                           timeout=60)
    assert short.returncode == 2 and "12 or more" in short.stdout + short.stderr
    assert "short" not in (short.stdout + short.stderr).replace("shorter", "")


def test_a_token_that_is_set_is_checked(tmp_path):
    for collector in _start(tmp_path, WORKBENCH_COLLECT_TOKEN=TOKEN):
        payload = (FIXTURES / "openllmetry.json").read_bytes()
        assert _post(collector, payload).status_code == 401
        assert _post(collector, payload, Authorization="Bearer " + "wrong-token-000000").status_code == 401
        assert _calls(collector) == []
        exporter = OTLPSpanExporter(endpoint=collector.url, headers={"Authorization": f"Bearer {TOKEN}"})
        provider = _provider(exporter)
        with provider.get_tracer("app").start_as_current_span("chat wbt-gpt", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "wbt-gpt",
                "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2}):
            pass
        provider.shutdown()
        (call,) = _calls(collector)
        assert call["cost_micros"] == expected_cost("wbt-gpt", _usage(10, 0, 0, 2))
        assert TOKEN not in json.dumps(collector.rows("SELECT * FROM spans"), default=str)


def test_only_the_traces_path_is_served(collector):
    other = httpx.post(collector.url.replace("/v1/traces", "/v1/metrics"), content=b"{}", timeout=10,
                       headers={"Content-Type": "application/json"})
    assert other.status_code == 404 and b"/v1/traces" in other.content
    assert httpx.get(collector.url, timeout=10).status_code == 405


README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _readme_block(language: str, mark: str) -> str:
    return next(body for kind, body in re.findall(r"```(\w+)\n(.*?)```", README, re.DOTALL)
                if kind == language and mark in body)


def test_the_readme_sample_is_recorded_as_the_readme_says(tmp_path):
    assert "workbench collect --port 4318" in _readme_block("bash", "workbench collect")
    sample = _readme_block("python", "OTLPSpanExporter(endpoint=")
    shutil.copy(Path(__file__).resolve().parents[2] / "models.toml", tmp_path / "models.toml")
    collector = Collector(tmp_path, _env())
    try:
        script = tmp_path / "sample.py"
        script.write_text(sample.replace("http://127.0.0.1:4318/v1/traces", collector.url))
        subprocess.run([sys.executable, str(script)], check=True, timeout=120, env=_env())
        (call,) = _calls(collector)
        assert {name: call[name] for name in _usage()} == _usage(176, 1024, 0, 80)
        # 176 x $0.15 + 1,024 x $0.075 + 80 x $0.60 per million: $0.0001512, in millionths of a cent
        assert call["cost_micros"] == 15_120 and "0.0001512 USD" in README
        assert [row["name"] for row in collector.rows("SELECT name FROM runs")] == ["answer ticket"]
    finally:
        collector.stop()


def test_the_deployment_settings_reach_a_collector_behind_a_token(tmp_path):
    block = _readme_block("sh", "OTEL_EXPORTER_OTLP_ENDPOINT")
    assert "workbench collect --host 0.0.0.0 --port 4318" in block and "WORKBENCH_COLLECT_TOKEN" in block
    settings = dict(line.removeprefix("export ").split("=", 1) for line in block.splitlines()
                    if line.startswith("export OTEL_"))
    for collector in _start(tmp_path, WORKBENCH_COLLECT_TOKEN=TOKEN):  # on loopback here; checked all the same
        env = {name: value.strip('"').replace("http://collector.internal:4318", collector.url.removesuffix("/v1/traces"))
               .replace("<the token>", TOKEN) for name, value in settings.items()}
        app = ("from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter\n"
               "from opentelemetry.sdk.trace import TracerProvider\n"
               "from opentelemetry.sdk.trace.export import BatchSpanProcessor\n"
               "provider = TracerProvider()\n"
               "provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))\n"
               "attributes = {'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'wbt-mini',\n"
               "              'gen_ai.usage.input_tokens': 30, 'gen_ai.usage.output_tokens': 3}\n"
               "with provider.get_tracer('app').start_as_current_span('chat wbt-mini', attributes=attributes):\n"
               "    pass\n"
               "provider.shutdown()\n")
        subprocess.run([sys.executable, "-c", app], check=True, timeout=120, env=_env(**env))
        (call,) = _calls(collector)
        assert call["cost_micros"] == expected_cost("wbt-mini", _usage(30, 0, 0, 3))


def _hostile_payload(key: str, trace: str) -> bytes:
    """One span whose attributes and event quote `key` inside an array, a key-value list and bytes."""
    blob = base64.b64encode(b"\x00\xff key=" + key.encode() + b" \x80").decode()
    attributes = [
        {"key": "app.messages", "value": {"arrayValue": {"values": [{"stringValue": "hi"}, {"stringValue": key}]}}},
        {"key": "app.request", "value": {"kvlistValue": {"values": [
            {"key": "prompt", "value": {"stringValue": f"use {key}"}},
            {"key": "history", "value": {"arrayValue": {"values": [{"stringValue": key}]}}}]}}},
        {"key": "app.upload", "value": {"bytesValue": blob}},
    ]
    span = {"traceId": trace * 32, "spanId": trace * 16, "name": "tool", "kind": 1,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
            "attributes": attributes,
            "events": [{"name": "sent", "timeUnixNano": "1700000000500000000", "attributes": attributes}]}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def test_a_key_inside_array_kvlist_and_bytes_attributes_is_masked(collector):
    key = "sk-" + "proj-" + secrets.token_urlsafe(30)
    assert _post(collector, _hostile_payload(key, "a")).status_code == 200
    assert _post(collector, _protobuf_of(_hostile_payload(key, "b")), "application/x-protobuf").status_code == 200

    spans = collector.rows("SELECT attributes FROM spans") + collector.rows("SELECT attributes FROM span_events")
    assert len(spans) == 4
    for row in spans:
        attributes = json.loads(row["attributes"])
        assert attributes["app.messages"] == ["hi", "[redacted]"]
        assert attributes["app.request"] == {"prompt": "use [redacted]", "history": ["[redacted]"]}
        assert base64.b64decode(attributes["app.upload"]) == b"\x00\xff key=[redacted] \x80"
    assert key not in json.dumps(spans)
