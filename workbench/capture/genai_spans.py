"""GenAI spans from any instrumentation into Workbench's records: a span that reports a model call
becomes a `Call` (priced by Workbench's own prices, never by a cost attribute in the span), every
span becomes a `spans` row with its events, `agent.turn` / `agent.compact` events become turns and
compactions, and every trace becomes one run, named after its root span.

Four attribute styles are read, each with the same rule for input tokens:

| style | model | input | cache read / write |
|---|---|---|---|
| OpenTelemetry GenAI (current) | `gen_ai.request.model`, `gen_ai.response.model` | `gen_ai.usage.input_tokens` | `gen_ai.usage.cache_read.input_tokens`, `gen_ai.usage.cache_creation.input_tokens` |
| OpenTelemetry GenAI (older) | the same | `gen_ai.usage.prompt_tokens` | `gen_ai.usage.cache_read_input_tokens`, `gen_ai.usage.cache_creation_input_tokens` |
| OpenLLMetry (Traceloop) | `gen_ai.*` as above | `gen_ai.usage.*` as above, or `llm.usage.prompt_tokens` | `gen_ai.usage.cache_*_input_tokens`, `llm.usage.cache_*_input_tokens` |
| OpenInference (Phoenix) | `llm.model_name` | `llm.token_count.prompt` | `llm.token_count.prompt_details.cache_read` / `cache_write` |

Every style counts cache reads and writes INSIDE its input figure (OpenTelemetry says SHOULD;
OpenLLMetry adds Anthropic's cache counters into it; OpenInference's `prompt_details` break the
prompt down), so Workbench's uncached `input_tokens` is input minus both. An input smaller than
its cache counters cannot have included them: it is taken as already uncached (an exporter that
copied Anthropic's `input_tokens` as is)."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone

import orjson

from workbench.capture import semconv
from workbench.capture.otlp_decode import Span
from workbench.capture.recorder import Recorder
from workbench.capture.runs import Run
from workbench.capture.tracing import scrubbed
from workbench.models import Usage
from workbench.wire import Call, priced
from workbench.wire.redact import mask_secrets

# each usage counter's names, current first
_INPUT = (semconv.USAGE_INPUT, semconv.USAGE_PROMPT, semconv.OI_PROMPT, semconv.LLM_USAGE_PROMPT)
_OUTPUT = (semconv.USAGE_OUTPUT, semconv.USAGE_COMPLETION, semconv.OI_COMPLETION, semconv.LLM_USAGE_COMPLETION)
_CACHE_READ = (semconv.USAGE_CACHE_READ, semconv.USAGE_CACHE_READ_OLD, semconv.OI_CACHE_READ, semconv.LLM_USAGE_CACHE_READ)
_CACHE_WRITE = (semconv.USAGE_CACHE_CREATION, semconv.USAGE_CACHE_CREATION_OLD, semconv.OI_CACHE_WRITE,
                semconv.LLM_USAGE_CACHE_CREATION)
_REASONING = (semconv.USAGE_REASONING, semconv.USAGE_REASONING_OLD, semconv.OI_REASONING)
_PROVIDER = (semconv.PROVIDER_NAME, semconv.SYSTEM, semconv.OI_PROVIDER, semconv.OI_SYSTEM)
# operations that are model calls; an agent's or a tool's span carries a model too, and is not one
_CALL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "embeddings", "completion", "responses"})
_NOT_CALLS = frozenset({"invoke_agent", "create_agent", "execute_tool"})
_OI_CALL_KINDS = frozenset({"LLM", "EMBEDDING"})
# the provider names of the conventions, as Workbench and the price library name them
_PROVIDERS = {"azure.ai.openai": "azure", "azure.ai.inference": "azure", "gcp.gemini": "google",
              "gcp.vertex_ai": "google", "gcp.gen_ai": "google", "aws.bedrock": "aws", "x_ai": "x-ai"}
# a count past this is not a token count (and would overflow the sums)
_MAX_TOKENS = 2**40
# traces whose runs this collector keeps a running bill for; the oldest is forgotten past it
TRACES_KEPT = 10_000


class SpanProblem(ValueError):
    """A span whose model call cannot be recorded (its span row still is)."""


def _id(*parts: str) -> str:
    """A record id from the span's own ids: an exporter's retry of a batch writes the same keys, so
    ingestion keeps one copy."""
    return hashlib.blake2b("/".join(parts).encode(), digest_size=16).hexdigest()


def _time(nanos: int) -> datetime | None:
    return datetime.fromtimestamp(nanos / 1e9, tz=timezone.utc) if nanos else None


def _first(attributes: dict, names: tuple[str, ...]):
    for name in names:
        value = attributes.get(name)
        if value is not None and value != "":
            return value
    return None


def _count(attributes: dict, names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in attributes and attributes[name] is not None:
            value = attributes[name]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, str) and value.isdigit():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_TOKENS:
                raise SpanProblem(f"{name} = {str(value)[:40]!r} is not a token count")
            return value
    return None


def provider_name(value) -> str:
    name = str(value or "unknown").strip().lower()
    return _PROVIDERS.get(name, name)


def is_call(attributes: dict) -> bool:
    operation, kind = attributes.get(semconv.OPERATION_NAME), attributes.get(semconv.OI_SPAN_KIND)
    # an agent's or a chain's span may sum its calls' usage: counted again, it would bill them twice
    if operation in _NOT_CALLS or (kind is not None and kind not in _OI_CALL_KINDS):
        return False
    model = _first(attributes, (semconv.REQUEST_MODEL, semconv.RESPONSE_MODEL, semconv.OI_MODEL_NAME))
    if model is None:
        return False
    return (operation in _CALL_OPERATIONS or kind in _OI_CALL_KINDS
            or semconv.LLM_REQUEST_TYPE in attributes or any(name in attributes for name in _INPUT + _OUTPUT))


def usage_of(attributes: dict) -> Usage | None:
    """The four disjoint counters (None: the span reported no usage)."""
    total_input, output = _count(attributes, _INPUT), _count(attributes, _OUTPUT)
    if total_input is None and output is None:
        return None
    read, write = _count(attributes, _CACHE_READ) or 0, _count(attributes, _CACHE_WRITE) or 0
    total_input = total_input or 0
    uncached = total_input - read - write if total_input >= read + write else total_input
    return Usage(input_tokens=uncached, cache_read_tokens=read, cache_write_tokens=write, output_tokens=output or 0,
                 reasoning_tokens=_count(attributes, _REASONING) or 0)


def call_of(span: Span, registry) -> Call:
    """The span's model call, priced from `registry`; raises `SpanProblem` for a counter that is
    not a count."""
    attributes = span.attributes
    served = _first(attributes, (semconv.RESPONSE_MODEL, semconv.OI_MODEL_NAME))
    requested = _first(attributes, (semconv.REQUEST_MODEL, semconv.OI_MODEL_NAME)) or served
    host, port = attributes.get(semconv.SERVER_ADDRESS), attributes.get(semconv.SERVER_PORT)
    call = Call(
        call_id=str(attributes.get(semconv.CALL_ID) or _id("call", span.trace_id, span.span_id)),
        trace_id=span.trace_id, span_id=span.span_id, parent_span_id=span.parent_span_id,
        response_id=_text(attributes.get(semconv.RESPONSE_ID)),
        provider=provider_name(_first(attributes, _PROVIDER)),
        url=f"https://{host}{f':{port}' if port else ''}" if host else "",
        model_requested=_text(requested), model_served=_text(served),
        started_at=_time(span.start_ns), ended_at=_time(span.end_ns),
    )
    status = attributes.get(semconv.HTTP_STATUS)
    call.http_status = status if isinstance(status, int) and not isinstance(status, bool) and 0 < status < 1000 else None
    reasons = attributes.get(semconv.FINISH_REASONS)
    call.stop_reason = _text(reasons[0] if isinstance(reasons, list) and reasons else reasons)
    usage = usage_of(attributes)
    if span.status_code == "ERROR":
        call.error_type = _text(attributes.get(semconv.ERROR_TYPE)) or "error"
        call.error_message = mask_secrets(span.status_message)
    if usage is not None:
        call.usage, call.settled = usage, True
    return priced(call, registry)


def _text(value) -> str | None:
    return None if value is None else mask_secrets(str(value))[:500]


@dataclass
class _Trace:
    trace_id: str
    run: Run
    root_span_id: str | None = None
    ended_ns: int = 0
    calls: set[str] = field(default_factory=set)


class SpanIngest:
    """Turns batches of spans into spooled records through `recorder`; keeps each trace's run bill
    across batches (a trace's spans arrive in several), for the last `TRACES_KEPT` traces."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, spans: list[Span]) -> list[str]:
        """Spool every span's records; returns the reasons some model calls were refused."""
        spool = self.recorder.spool
        refused: list[str] = []
        touched: dict[str, _Trace] = {}
        with self._lock:  # one batch at a time: a trace's bill is updated and written in order
            for span in spans:
                trace = touched[span.trace_id] = self._trace(span)
                if is_call(span.attributes):
                    try:
                        call = call_of(span, self.recorder.registry)
                    except SpanProblem as exc:
                        refused.append(f"span {span.name!r} ({span.span_id}): {exc}")
                    else:
                        call.run_id = trace.run.run_id
                        if call.call_id not in trace.calls:  # a batch sent twice is billed once
                            trace.calls.add(call.call_id)
                            trace.run.attribute(call)
                        self.recorder.spool_call(call)
                self._span_rows(spool, span, trace.run.run_id)
                self._end(trace, span)
            for trace in touched.values():
                self._spool_run(spool, trace)
        return refused

    def _trace(self, span: Span) -> _Trace:
        trace = self._traces.get(span.trace_id)
        if trace is None:
            service = span.resource.get(semconv.SERVICE_NAME)
            tags = {"source": "otlp", **({"service": str(service)} if service else {})}
            run = Run(f"trace {span.trace_id[:8]}", "app", tags, None, None)
            run.run_id = _id("run", span.trace_id)
            run.started_at = _time(span.start_ns) or run.started_at
            trace = self._traces[span.trace_id] = _Trace(span.trace_id, run)
            for key, value in tags.items():
                self.recorder.spool.append("run_tag", {"run_id": run.run_id, "key": key, "value": value})
            while len(self._traces) > TRACES_KEPT:
                self._traces.popitem(last=False)
        self._traces.move_to_end(span.trace_id)
        return trace

    @staticmethod
    def _end(trace: _Trace, span: Span) -> None:
        run = trace.run
        started = _time(span.start_ns)
        if started is not None and started < run.started_at:
            run.started_at = started
        trace.ended_ns = max(trace.ended_ns, span.end_ns)
        if span.parent_span_id is None:  # the root names the run and ends it
            trace.root_span_id = span.span_id
            run.name = mask_secrets(span.name) or run.name
            if span.attributes.get(semconv.OPERATION_NAME) == "invoke_agent":
                run.kind = "agent"
            run.status = "failed" if span.status_code == "ERROR" else "ok"
            if span.status_code == "ERROR":
                run.error_type = _text(span.attributes.get(semconv.ERROR_TYPE)) or "error"
                run.error_message = mask_secrets(span.status_message)

    @staticmethod
    def _spool_run(spool, trace: _Trace) -> None:
        run = trace.run
        run.ended_at = _time(trace.ended_ns) if trace.root_span_id else None
        row = run.row()
        row["trace_id"], row["span_id"] = trace.trace_id, trace.root_span_id
        spool.append("run", row)

    def _span_rows(self, spool, span: Span, run_id: str) -> None:
        attributes = scrubbed(span.attributes)
        spool.append("span", {
            "span_id": span.span_id, "trace_id": span.trace_id, "parent_span_id": span.parent_span_id,
            "name": mask_secrets(span.name), "kind": span.kind, "run_id": run_id,
            "start_time": _iso(span.start_ns), "end_time": _iso(span.end_ns), "status_code": span.status_code,
            "status_message": mask_secrets(span.status_message), "attributes": _json(attributes),
        })
        for seq, event in enumerate(span.events):
            event_attributes = scrubbed(event.attributes)
            if event.name in (semconv.EVENT_AGENT_TURN, semconv.EVENT_AGENT_COMPACT):
                event_attributes["cost_micros"] = self._cost(event_attributes, span)
            if event.name == semconv.EVENT_AGENT_COMPACT:
                spool.append("compaction", _compaction_row(event_attributes, span, seq, run_id, event.time_ns))
            spool.append("span_event", {
                "span_id": span.span_id, "seq": seq, "trace_id": span.trace_id, "run_id": run_id,
                "name": event.name, "time": _iso(event.time_ns), "attributes": _json(event_attributes),
            })

    def _cost(self, attributes: dict, span: Span) -> int | None:
        """A turn's or a compaction's cost from its model and its (Workbench-style, disjoint)
        counters, at our prices; the cost the event carried is not kept."""
        counters = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens")
        try:
            values = {name: attributes.get(name) for name in counters}
            if not any(isinstance(value, int) for value in values.values()):
                return None
            usage = Usage(**{name: value for name, value in values.items() if isinstance(value, int) and value >= 0})
        except ValueError:
            return None
        model = attributes.get("model")
        call = Call(model_requested=str(model) if model else None, settled=True, usage=usage,
                    provider=provider_name(attributes.get("provider") or _first(span.attributes, _PROVIDER)),
                    started_at=_time(span.start_ns))
        return priced(call, self.recorder.registry).cost_micros


def _compaction_row(attributes: dict, span: Span, seq: int, run_id: str, time_ns: int) -> dict:
    row = {"compaction_id": _id("compaction", span.span_id, str(seq)), "run_id": run_id, "span_id": span.span_id,
           "occurred_at": _iso(time_ns), "limit_tokens": _int(attributes.get("limit")), "source": "reported"}
    for name in ("turn", "tokens_before", "tokens_after", "summarised_turns", "kept_turns", "cost_micros"):
        row[name] = _int(attributes.get(name))
    for name in ("outcome", "model"):
        row[name] = _text(attributes.get(name))
    return row


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _iso(nanos: int) -> str | None:
    moment = _time(nanos)
    return moment.isoformat() if moment else None


def _json(attributes: dict) -> str:
    return orjson.dumps(attributes, default=str).decode()
