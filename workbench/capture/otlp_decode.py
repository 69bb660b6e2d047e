"""OTLP/HTTP trace payloads (`ExportTraceServiceRequest`, protobuf or JSON, plain, gzip or deflate)
into plain spans. Pure: bytes in, spans and the reasons some were refused out.

A payload that cannot be read at all (malformed protobuf, not JSON, a body past the cap once
decompressed) raises `PayloadError`: the receiver answers 400 or 413 with its reason. Inside a
payload that reads, one bad span (an id of the wrong length) is refused alone, with its reason; the
others go on. OTLP JSON differs from protobuf's own JSON mapping: trace and span ids are hex, not
base64, and 64-bit integers may be strings; it is read by hand for that reason."""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass, field

import orjson

from workbench.wire.redact import mask_secrets

# spans.kind as the SDKs name it (`SpanKind.CLIENT`), from OTLP's enum numbers
_KINDS = {0: "INTERNAL", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


class PayloadError(ValueError):
    """A payload that cannot be read; `status` is the HTTP status to answer with."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(slots=True)
class Event:
    name: str
    time_ns: int
    attributes: dict


@dataclass(slots=True)
class Span:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str | None
    name: str
    kind: str
    start_ns: int
    end_ns: int
    status_code: str
    status_message: str | None
    attributes: dict
    events: list[Event] = field(default_factory=list)
    resource: dict = field(default_factory=dict)


def decompressed(body: bytes, encoding: str | None, cap: int) -> bytes:
    """The body with its `Content-Encoding` undone, refused past `cap` bytes (a gzip bomb stops there)."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise PayloadError(f"Content-Encoding {encoding!r} is not supported (use gzip, deflate or none)", 415)
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        data = inflater.decompress(body, cap + 1)
    except zlib.error as exc:
        raise PayloadError(f"the body is not valid {encoding}: {exc}") from None
    if len(data) > cap:
        raise PayloadError(f"the body is over {cap:,} bytes once decompressed", 413)
    return data


def spans_of_protobuf(body: bytes) -> tuple[list[Span], list[str]]:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise PayloadError(f"the body is not an ExportTraceServiceRequest in protobuf: {exc}") from None
    spans, refused = [], []
    for resource_spans in request.resource_spans:
        resource = _proto_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
                problem = _id_problem(trace_id, span_id, span.parent_span_id.hex())
                if problem:
                    refused.append(f"span {span.name!r}: {problem}")
                    continue
                spans.append(Span(
                    trace_id, span_id, span.parent_span_id.hex() or None, span.name, _KINDS.get(span.kind, "INTERNAL"),
                    span.start_time_unix_nano, span.end_time_unix_nano, _STATUS.get(span.status.code, "UNSET"),
                    span.status.message or None, _proto_attributes(span.attributes),
                    [Event(event.name, event.time_unix_nano, _proto_attributes(event.attributes)) for event in span.events],
                    resource,
                ))
    return spans, refused


def _proto_attributes(pairs) -> dict:
    return {pair.key: _proto_value(pair.value) for pair in pairs}


def _proto_value(value):
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_proto_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return _proto_attributes(value.kvlist_value.values)
    if which == "bytes_value":
        return _masked_bytes(value.bytes_value)
    return getattr(value, which)


def _masked_bytes(data: bytes) -> str:
    """Bytes as OTLP JSON spells them (base64), with any secret inside masked: the base64 of a key
    is the key. Read as latin-1, so every other byte round-trips."""
    text = data.decode("latin-1")
    masked = mask_secrets(text)
    return base64.b64encode(data if masked is text else masked.encode("latin-1")).decode()


def spans_of_json(body: bytes) -> tuple[list[Span], list[str]]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PayloadError(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PayloadError(f"the body is a JSON {type(data).__name__}, not an ExportTraceServiceRequest object")
    spans, refused = [], []
    for resource_spans in _list(data, "resourceSpans", "resource_spans"):
        if not isinstance(resource_spans, dict):
            refused.append("a resourceSpans entry is not an object")
            continue
        resource = _json_attributes(_get(_get(resource_spans, "resource") or {}, "attributes"))
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _list(scope_spans, "spans") if isinstance(scope_spans, dict) else ():
                try:
                    spans.append(_json_span(span, resource))
                except (TypeError, ValueError, AttributeError) as exc:
                    name = span.get("name") if isinstance(span, dict) else None
                    refused.append(f"span {name!r}: {exc}")
    return spans, refused


def _json_span(span: dict, resource: dict) -> Span:
    trace_id = str(_get(span, "traceId", "trace_id") or "").lower()
    span_id = str(_get(span, "spanId", "span_id") or "").lower()
    parent = str(_get(span, "parentSpanId", "parent_span_id") or "").lower()
    problem = _id_problem(trace_id, span_id, parent)
    if problem:
        raise ValueError(problem)
    status = _get(span, "status") or {}
    code = _get(status, "code")
    kind = _get(span, "kind")
    events = [Event(str(_get(event, "name") or ""), _nanos(_get(event, "timeUnixNano", "time_unix_nano")),
                    _json_attributes(_get(event, "attributes")))
              for event in _list(span, "events")]
    return Span(
        trace_id, span_id, parent or None, str(_get(span, "name") or ""),
        _KINDS.get(kind, "INTERNAL") if isinstance(kind, int) else str(kind or "INTERNAL").removeprefix("SPAN_KIND_"),
        _nanos(_get(span, "startTimeUnixNano", "start_time_unix_nano")),
        _nanos(_get(span, "endTimeUnixNano", "end_time_unix_nano")),
        _STATUS.get(code, "UNSET") if isinstance(code, int) else str(code or "UNSET").removeprefix("STATUS_CODE_"),
        _get(status, "message") or None, _json_attributes(_get(span, "attributes")), events, resource,
    )


def _get(data: dict, *names: str):
    for name in names:
        if name in data:
            return data[name]
    return None


def _list(data: dict, *names: str) -> list:
    found = _get(data, *names)
    return found if isinstance(found, list) else []


def _nanos(value) -> int:
    number = int(value or 0)  # a string in OTLP JSON (64 bits do not fit a JSON number everywhere)
    if not 0 <= number < 2**64:
        raise ValueError(f"time {value!r} is out of range")
    return number


def _json_attributes(pairs) -> dict:
    if not isinstance(pairs, list):
        return {}
    return {str(pair["key"]): _json_value(pair.get("value") or {}) for pair in pairs
            if isinstance(pair, dict) and "key" in pair}


def _json_value(value: dict):
    if not isinstance(value, dict) or not value:
        return None
    name, inner = next(iter(value.items()))
    if name in ("intValue", "int_value"):
        return int(inner)
    if name in ("doubleValue", "double_value"):
        return float(inner)
    if name in ("arrayValue", "array_value"):
        return [_json_value(item) for item in _list(inner, "values")]
    if name in ("kvlistValue", "kvlist_value"):
        return _json_attributes(_list(inner, "values"))
    if name in ("bytesValue", "bytes_value") and isinstance(inner, str):
        try:
            return _masked_bytes(base64.b64decode(inner, validate=True))
        except ValueError:
            return mask_secrets(inner)  # not base64: kept as the text it is
    return inner  # stringValue, boolValue


def _id_problem(trace_id: str, span_id: str, parent: str) -> str | None:
    if not _hex(trace_id, 32):
        return f"trace id {trace_id[:40]!r} is not 32 hex digits (16 bytes, not all zero)"
    if not _hex(span_id, 16):
        return f"span id {span_id[:40]!r} is not 16 hex digits (8 bytes, not all zero)"
    if parent and not _hex(parent, 16):
        return f"parent span id {parent[:40]!r} is not 16 hex digits"
    return None


def _hex(text: str, width: int) -> bool:
    return len(text) == width and all(char in "0123456789abcdef" for char in text) and text.strip("0") != ""
