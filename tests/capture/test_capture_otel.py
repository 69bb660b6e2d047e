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


def _child(code: str, db: Path) -> dict:
    """What `code`, run in a fresh process on the store `db`, printed last (a JSON line)."""
    result = subprocess.run([sys.executable, "-c", code, str(db)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_app_tracer_provider_is_joined_not_replaced(tmp_path):
    out = _child(CHILD, tmp_path / "wb.duckdb")
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


STORED_ONLY_CHILD = r"""
import json, sys
import duckdb, openai, workbench
from opentelemetry.sdk.trace import Tracer
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry import trace
from workbench.capture.tracing import spans_stored_only
from workbench.demo.fake_provider import FakeProvider, Reply, FakeTransport

started = []
sdk_start_span = Tracer.start_span
def counted(self, name, *args, **kwargs):
    started.append(name)
    return sdk_start_span(self, name, *args, **kwargs)
Tracer.start_span = counted

workbench.configure(db=sys.argv[1])
fake = FakeProvider()
client = openai.OpenAI(base_url="http://fake.local/v1", api_key="sk-test", max_retries=0,
                       http_client=workbench.http_client(transport=FakeTransport(fake)))

def two_calls(run_name):
    fake.script(Reply(text="fine", usage={"input_tokens": 5, "output_tokens": 2}),
                Reply(status=500, error_message="the server broke"))
    with workbench.run(run_name):
        client.chat.completions.create(model="m-span", messages=[{"role": "user", "content": "hi"}])
        try:
            client.chat.completions.create(model="m-span", messages=[{"role": "user", "content": "again"}])
        except openai.APIStatusError:
            pass
    workbench.flush()

stored_only = spans_stored_only()
two_calls("alone")
started_alone = list(started)
exporter = InMemorySpanExporter()  # another processor: from now on the SDK's own spans again
trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exporter))
two_calls("watched")
con = duckdb.connect(sys.argv[1], read_only=True)
rows = con.sql('''SELECT r.name, s.name, s.kind, s.status_code, s.status_message, s.attributes,
                         s.parent_span_id = r.span_id AND s.trace_id = r.trace_id, c.span_id = s.span_id
                  FROM calls c JOIN spans s ON s.span_id = c.span_id JOIN runs r ON r.run_id = c.run_id
                  ORDER BY c.started_at''').fetchall()
con.close()
print(json.dumps({"stored_only": stored_only, "started_alone": started_alone, "rows": rows,
                  "app_saw": sorted(s.name for s in exporter.get_finished_spans())}))
"""


def test_a_call_span_the_store_alone_sees_is_written_without_the_sdks_span_and_reads_the_same(tmp_path):
    out = _child(STORED_ONLY_CHILD, tmp_path / "wb.duckdb")
    assert out["stored_only"] is True
    # with no one but the store to see spans, only the run's span went through the SDK
    assert out["started_alone"] == ["run alone"]
    assert out["app_saw"] == ["chat m-span", "chat m-span", "run watched"]
    rows = {}
    for run, *row in out["rows"]:
        attributes = json.loads(row[4])
        attributes.pop("workbench.call_id"), attributes.pop("gen_ai.response.id", None)  # each call's own
        rows.setdefault(run, []).append([*row[:4], attributes, *row[5:]])
    assert len(rows["alone"]) == 2
    assert [row[2] for row in rows["alone"]] == ["UNSET", "ERROR"]
    assert all(row[5] and row[6] for row in rows["alone"])  # under the run's span, the call's own
    # the span rows written without the SDK's span equal those of the SDK's spans
    assert rows["alone"] == rows["watched"]
