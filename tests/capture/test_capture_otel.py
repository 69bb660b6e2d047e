"""OpenTelemetry: an application that set its own SDK TracerProvider before Workbench was first used
keeps it; our processor joins it, so the application's exporter sees our spans and the store sees the
application's trace around them. Needs a fresh process (the global provider can be set once)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

import duckdb, openai, workbench
from workbench.demo.fake_provider import FakeProvider, FakeTransport

workbench.configure(db=sys.argv[1])
client = openai.OpenAI(base_url="http://fake.local/v1", api_key="sk-test", max_retries=0,
                       http_client=workbench.http_client(transport=FakeTransport(FakeProvider())))
with trace.get_tracer("the-app").start_as_current_span("app-request"):
    with workbench.run("otel-run"):
        client.chat.completions.create(model="m-otel", messages=[{"role": "user", "content": "hi"}])
workbench.flush()
con = duckdb.connect(sys.argv[1], read_only=True)
stored = con.sql("SELECT name, span_id, parent_span_id, trace_id FROM spans").fetchall()
con.close()
print(json.dumps({
    "same_provider": trace.get_tracer_provider() is provider,
    "app_saw": [[s.name, format(s.context.span_id, "016x"), format(s.parent.span_id, "016x") if s.parent else None]
                for s in exporter.get_finished_spans()],
    "stored": stored,
}))
"""


def test_app_tracer_provider_is_joined_not_replaced(tmp_path):
    result = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "wb.duckdb")], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["same_provider"] is True
    app = {name: (span_id, parent) for name, span_id, parent in out["app_saw"]}
    # the application's own exporter saw our run and call spans, nested in its request span
    assert set(app) == {"app-request", "run otel-run", "chat m-otel"}
    assert app["run otel-run"][1] == app["app-request"][0]
    assert app["chat m-otel"][1] == app["run otel-run"][0]
    # and the store holds the same spans, one trace
    stored = {name: (span_id, parent, trace_id) for name, span_id, parent, trace_id in out["stored"]}
    assert stored["chat m-otel"][:2] == app["chat m-otel"]
    assert stored["run otel-run"][:2] == app["run otel-run"]
    assert len({trace_id for _, _, trace_id in stored.values()}) == 1
