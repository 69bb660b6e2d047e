"""OpenTelemetry set-up: our span processor joins the application's TracerProvider when it set one,
or a provider of ours becomes the global one. Spans and their events are written into the store;
a standard OTLP exporter is added when the standard `OTEL_EXPORTER_OTLP_*` variables ask for one."""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timezone

import orjson
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from workbench.capture import semconv
from workbench.wire.redact import REDACTED, is_secret_header, mask_secrets, redact_url

log = logging.getLogger("workbench.capture")
_setup_lock = threading.Lock()
_tracer: trace.Tracer | None = None


def _time(nanos: int | None) -> str | None:
    if nanos is None:
        return None
    return datetime.fromtimestamp(nanos / 1e9, tz=timezone.utc).isoformat()


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


_URL_ATTRIBUTES = frozenset({"url.full", "http.url", "url.original", "http.target"})
# the SDKs' own span attributes copied from the secret response headers
_SECRET_ATTRIBUTES = frozenset({"anthropic.organization.id", "openai.organization", "openai.organization.id",
                                "openai.project", "openai.project.id"})


# how each attribute key is scrubbed, by key: a process's spans repeat a few dozen keys
_SECRET, _URL, _QUERY, _TEXT = range(4)
_KIND_OF_KEY: dict[str, int] = {}
# short texts found to hold nothing to mask: a span's model, operation, provider and run names repeat
# on every case of an eval. Only clean texts are kept (a secret is never held here), and
# `mask_secrets` of a clean text is that text, so a hit returns what masking would
_CLEAN_TEXTS: set[str] = set()
_CLEAN_LONGEST, _CLEAN_MOST, _KEYS_MOST = 256, 4096, 1024


def _kind_of_key(key: str) -> int:
    kind = _KIND_OF_KEY.get(key)
    if kind is None:
        header = key.startswith(("http.request.header.", "http.response.header.")) and is_secret_header(
            key.rsplit(".", 1)[-1].replace("_", "-"))
        kind = (_SECRET if key in _SECRET_ATTRIBUTES or header else _URL if key in _URL_ATTRIBUTES
                else _QUERY if key == "url.query" else _TEXT)
        if len(_KIND_OF_KEY) < _KEYS_MOST:
            _KIND_OF_KEY[key] = kind
    return kind


# the credential values this process's calls sent, longest first: a span of the application's own
# (an exception it recorded) may quote one its provider echoed. Few: a process sends one key or a handful
_sent: tuple[str, ...] = ()
_SENT_MOST = 256


def remember_sent(values: tuple[str, ...]) -> None:
    """Mask `values` in every span from now on."""
    global _sent
    new = set(values).difference(_sent)
    if new:
        kept = _sent if len(_sent) + len(new) <= _SENT_MOST else ()
        _sent = tuple(sorted((*kept, *new), key=len, reverse=True))
        _CLEAN_TEXTS.clear()  # a text found clean before may hold a value sent since


def masked_text(value: str) -> str:
    """`mask_secrets(value)` (and the credentials sent), answered from memory for a short text already found clean."""
    if not value or value in _CLEAN_TEXTS:  # (None and "" as mask_secrets gives them back)
        return value
    masked = mask_secrets(value, _sent)
    if masked == value and len(value) <= _CLEAN_LONGEST:
        if len(_CLEAN_TEXTS) >= _CLEAN_MOST:
            _CLEAN_TEXTS.clear()
        _CLEAN_TEXTS.add(value)
    return masked


def scrubbed(attributes) -> dict:
    """Span attributes with secrets out, whoever set them (the anthropic SDK's own spans carry
    `url.full` and `url.query`, query keys included): credential-like query parameters and URL
    user-info, credential headers, and secret-shaped values in any text (an exception message)."""
    clean = dict(attributes or {})
    for key, value in clean.items():
        kind = _kind_of_key(key)
        if kind == _SECRET:
            clean[key] = [REDACTED] if isinstance(value, (list, tuple)) else REDACTED
        elif isinstance(value, str):
            if kind == _URL:
                clean[key] = redact_url(value)
            elif kind == _QUERY:
                clean[key] = redact_url("http://h/?" + value).partition("?")[2]
            else:
                clean[key] = masked_text(value)
        elif isinstance(value, (list, tuple, dict)) and kind == _TEXT:
            clean[key] = _masked_value(value)
    return clean


def _masked_value(value):
    """An array or key-value list attribute (OTLP's `arrayValue`, `kvlistValue`) with its texts masked."""
    if isinstance(value, str):
        return masked_text(value)
    if isinstance(value, (list, tuple)):
        return [_masked_value(item) for item in value]
    if isinstance(value, dict):
        return {masked_text(str(name)): _masked_value(item) for name, item in value.items()}
    return value


class StoreSpanProcessor(SpanProcessor):
    """Writes every ended span, and its events, into the store. The thread that ends a span only
    hands it over; its rows are built on the spool thread."""

    def on_end(self, span: ReadableSpan) -> None:
        from workbench.capture.recorder import recorder

        if not span.context.trace_flags.sampled:  # recorded but not sampled: not exported, as the SDK's own
            return
        try:
            spool = recorder().spool
            spool.defer(lambda: _spool_span(spool, span))
        except Exception as exc:  # noqa: BLE001 - recording never breaks the application
            log.warning("workbench could not record a span: %s", exc)


def _spool_span(spool, span: ReadableSpan) -> None:
    context = span.get_span_context()
    _spool_span_rows(spool, context.trace_id, context.span_id, span.parent.span_id if span.parent else None,
                     span.name, span.kind, span.start_time, span.end_time, span.status, span.attributes,
                     span.events)


def _spool_span_rows(spool, trace_id: int, span_id: int, parent_span_id: int | None, name: str,
                     kind: trace.SpanKind, start_time: int | None, end_time: int | None, status: trace.Status,
                     attributes, events=()) -> None:
    span_id, trace_id = _hex(span_id, 16), _hex(trace_id, 32)
    attributes = scrubbed(attributes)
    run_id = attributes.get(semconv.RUN_ID)
    spool.append(
        "span",
        {
            "span_id": span_id, "trace_id": trace_id,
            "parent_span_id": _hex(parent_span_id, 16) if parent_span_id is not None else None,
            "name": name, "kind": kind.name, "run_id": run_id,
            "start_time": _time(start_time), "end_time": _time(end_time),
            "status_code": status.status_code.name, "status_message": mask_secrets(status.description, _sent),
            "attributes": _json(attributes),
        },
    )
    for seq, event in enumerate(events):
        spool.append(
            "span_event",
            {
                "span_id": span_id, "seq": seq, "trace_id": trace_id, "run_id": run_id,
                "name": event.name, "time": _time(event.timestamp),
                "attributes": _json(scrubbed(event.attributes)),
            },
        )


_UNSET = trace.Status(trace.StatusCode.UNSET)


def ended_span(context, name: str, kind: trace.SpanKind, attributes: dict, start_time: int, end_time: int,
               status: trace.Status | None = None) -> tuple[int, int, int | None] | None:
    """A span of Workbench's that starts and ends at once (a call's, on the spool thread), ended and
    stored; its trace, span and parent span ids, or None when tracing does not record it. When the
    store alone sees our spans and the SDK is at its defaults, its row is written without the SDK's
    span (its start, attribute checks and processors: ~17 us for a call's, against ~2 us for the
    parent, the sampler and the ids): the same ids, sampling decision and row as the SDK's span."""
    tracer_ = tracer()
    if spans_stored_only() and _plain_sdk(tracer_, len(attributes)):
        parent = trace.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
        trace_id = parent.trace_id if parent is not None else tracer_.id_generator.generate_trace_id()
        decided = tracer_.sampler.should_sample(context, trace_id, name, kind, None, ())
        if not decided.attributes:  # (a sampler that adds attributes goes through the SDK)
            if not decided.decision.is_recording():
                return None
            span_id = tracer_.id_generator.generate_span_id()
            parent_id = parent.span_id if parent is not None else None
            if decided.decision.is_sampled():  # recorded but not sampled: not exported, as the SDK's own
                from workbench.capture.recorder import recorder

                spool = recorder().spool
                attributes = dict(attributes)  # (the caller's may change meanwhile)
                # deferred as `StoreSpanProcessor.on_end` defers it: the rows keep their order
                spool.defer(lambda: _spool_span_rows(spool, trace_id, span_id, parent_id, name, kind, start_time,
                                                     end_time, status or _UNSET, attributes))
            return trace_id, span_id, parent_id
    span = tracer_.start_span(name, context=context, kind=kind, start_time=start_time, attributes=attributes)
    if not span.is_recording():
        return None
    if status is not None:
        span.set_status(status)
    span.end(end_time=end_time)
    context = span.get_span_context()
    return context.trace_id, context.span_id, span.parent.span_id if span.parent else None


def _builtin_sampler(sampler) -> bool:
    """One of the SDK's own samplers (always on, a ratio, parent-based over them): they decide on the
    parent and the trace id alone, and add no attribute."""
    return type(sampler).__module__ == sampling.__name__ and all(
        _builtin_sampler(part) for part in vars(sampler).values() if isinstance(part, sampling.Sampler))


_plain: tuple[object, int | None] | None = None  # the tracer, and its most attributes (-1: not plain)


def _plain_sdk(tracer_, attributes: int) -> bool:
    """Whether the SDK would store a span of ours with `attributes` as given: enabled, one of its own
    samplers, no limit the attributes reach, no span metrics to count it."""
    global _plain
    if _plain is None or _plain[0] is not tracer_:
        limits = getattr(tracer_, "_span_limits", None)
        metrics = getattr(tracer_, "_tracer_metrics", None)
        most = (-1 if limits is None or limits.max_span_attribute_length is not None
                or limits.max_attribute_length is not None or type(metrics).__name__ != "NoOpTracerMetrics"
                or not _builtin_sampler(getattr(tracer_, "sampler", None))
                or not callable(getattr(tracer_, "_is_enabled", None)) or not hasattr(tracer_, "id_generator")
                else limits.max_span_attributes)
        _plain = (tracer_, most)
    most = _plain[1]
    return (most is None or attributes <= most) and tracer_._is_enabled()


def _json(attributes: dict) -> str:
    return orjson.dumps(attributes, default=str).decode()


def _otlp_processor() -> BatchSpanProcessor | None:
    if not any(os.environ.get(name) for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_* is set but the exporter is missing: pip install 'replay-workbench[otlp]'")
        return None
    return BatchSpanProcessor(OTLPSpanExporter())


def spans_stored_only() -> bool:
    """Whether Workbench's spans go to the store alone: its own provider, with no exporter and no
    processor of the application's (which would see a span before the ingester completes it)."""
    tracer()
    processors = getattr(getattr(trace.get_tracer_provider(), "_active_span_processor", None), "_span_processors", ())
    return len(processors) == 1 and isinstance(processors[0], StoreSpanProcessor)


def tracer() -> trace.Tracer:
    """Workbench's tracer, set up once: joined to the application's SDK provider when it has one."""
    global _tracer
    if _tracer is not None:
        return _tracer
    with _setup_lock:
        if _tracer is None:
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):
                provider = TracerProvider()
                otlp = _otlp_processor()
                if otlp is not None:
                    provider.add_span_processor(otlp)
                trace.set_tracer_provider(provider)
                provider = trace.get_tracer_provider()  # another thread may have won the race
            if isinstance(provider, TracerProvider):
                provider.add_span_processor(StoreSpanProcessor())
            _tracer = provider.get_tracer("workbench")
    return _tracer
