"""`workbench collect`: an OTLP/HTTP trace receiver, one more recording process. Apps in any language
export their GenAI spans to it (`POST /v1/traces`, protobuf or JSON, gzip or not); it turns them
into calls, runs, spans, turns and compactions (`workbench.capture.genai_spans`) and writes them to
its spool before it answers, so an acknowledged batch survives a crash of the collector; the store
ingests the spool as it does every recorder's.

Private by default: it listens on loopback. Listening on any other address needs a token
(`WORKBENCH_COLLECT_TOKEN`, sent as `Authorization: Bearer <token>`); a token that is set is checked
on loopback too. A payload it cannot read is answered 400 (413 past the size cap, 415 for another
content type) with the reason, and nothing of it is kept; in a payload that reads, a span it cannot
take is refused alone and named in the answer's `partial_success`."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler

import orjson

from workbench.capture.genai_spans import SpanIngest
from workbench.capture.otlp_decode import PayloadError, decompressed, spans_of_json, spans_of_protobuf
from workbench.capture.recorder import Recorder
from workbench.errors import WorkbenchError
from workbench.http_server import QuietHTTPServer
from workbench.wire.redact import mask_secrets

log = logging.getLogger("workbench.capture")

TOKEN_ENV = "WORKBENCH_COLLECT_TOKEN"
TOKEN_MIN_CHARS = 12
# the largest body taken, compressed or not (the OpenTelemetry SDKs send 512 spans a batch: well under)
MAX_BODY_BYTES = 16 * 1024 * 1024
_PROTOBUF, _JSON = "application/x-protobuf", "application/json"
_REASONS_SHOWN = 5


def is_loopback(host: str) -> bool:
    """Only loopback addresses and `localhost`; a host name may resolve to anything."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_for(host: str, environ=os.environ) -> str | None:
    """The token requests must carry: required beyond loopback, checked wherever it is set."""
    token = environ.get(TOKEN_ENV) or None
    if token is not None and len(token) < TOKEN_MIN_CHARS:
        raise WorkbenchError(
            "WB_COLLECT_TOKEN", f"{TOKEN_ENV} is {len(token)} characters long; it must be {TOKEN_MIN_CHARS} or more",
            f'set a longer one: export {TOKEN_ENV}="$(python -c \'import secrets; print(secrets.token_urlsafe(24))\')"',
        )
    if token is None and not is_loopback(host):
        raise WorkbenchError(
            "WB_COLLECT_TOKEN", f"--host {host} is beyond loopback and {TOKEN_ENV} is not set: anyone who can reach "
            "it could write into the store",
            f'export {TOKEN_ENV}="$(python -c \'import secrets; print(secrets.token_urlsafe(24))\')" (senders set '
            'OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer <token>"), or listen on --host 127.0.0.1',
        )
    return token


class Collector:
    """What the server does with one request, apart from HTTP: (status, content type, body)."""

    def __init__(self, recorder: Recorder, token: str | None, max_body: int = MAX_BODY_BYTES) -> None:
        self.ingest = SpanIngest(recorder)
        self.recorder = recorder
        self.token = token
        self.max_body = max_body
        self.stats = {"requests": 0, "spans": 0, "refused_spans": 0, "bad_requests": 0}
        self._stats_lock = threading.Lock()

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        return hmac.compare_digest((header or "").encode(), f"Bearer {self.token}".encode())

    def export(self, content_type: str, encoding: str | None, body: bytes) -> tuple[int, str, bytes]:
        kind = (content_type or "").split(";")[0].strip().lower()
        answer_as = _JSON if kind == _JSON else _PROTOBUF
        try:
            if kind not in (_PROTOBUF, _JSON):
                raise PayloadError(f"Content-Type {content_type or 'none'!r} is not OTLP: send {_PROTOBUF} or {_JSON}",
                                   415)
            data = decompressed(body, encoding, self.max_body)
            spans, refused = (spans_of_json if kind == _JSON else spans_of_protobuf)(data)
        except PayloadError as exc:
            self._count(bad_requests=1)
            return exc.status, *_status_body(answer_as, str(exc))
        refused += self.ingest.add(spans)
        refused = [mask_secrets(reason) for reason in refused]  # they quote span names: answered and logged
        # on the spool file before the sender hears it was taken
        self.recorder.spool.flush(ingest=False)
        self._count(requests=1, spans=len(spans), refused_spans=len(refused))
        if refused:
            log.warning("workbench collect refused %d span(s): %s", len(refused), "; ".join(refused[:_REASONS_SHOWN]))
        return 200, *_success_body(answer_as, refused)

    def _count(self, **amounts: int) -> None:
        with self._stats_lock:
            for name, amount in amounts.items():
                self.stats[name] += amount


def _message(refused: list[str]) -> str:
    more = f" (and {len(refused) - _REASONS_SHOWN} more)" if len(refused) > _REASONS_SHOWN else ""
    return "; ".join(refused[:_REASONS_SHOWN]) + more


def _success_body(kind: str, refused: list[str]) -> tuple[str, bytes]:
    if kind == _JSON:
        partial = {"partialSuccess": {"rejectedSpans": str(len(refused)), "errorMessage": _message(refused)}}
        return _JSON, orjson.dumps(partial if refused else {})
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    response = ExportTraceServiceResponse()
    if refused:
        response.partial_success.rejected_spans = len(refused)
        response.partial_success.error_message = _message(refused)
    return _PROTOBUF, response.SerializeToString()


def _status_body(kind: str, reason: str) -> tuple[str, bytes]:
    """OTLP's error answer: a google.rpc.Status with the reason, in the request's encoding."""
    if kind.split(";")[0].strip().lower() == _JSON:
        return _JSON, orjson.dumps({"code": 3, "message": reason})  # 3: INVALID_ARGUMENT
    # google.rpc.Status written by hand (its module is not in opentelemetry-proto): field 1, the
    # code, a varint; field 2, the message, length-delimited
    text = reason.encode()
    return _PROTOBUF, b"\x08\x03\x12" + _varint(len(text)) + text


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: the exporters reuse their connection

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        collector = self.server.collector
        if self.path.split("?")[0].rstrip("/") != "/v1/traces":
            return self._reply(404, "text/plain", b"only POST /v1/traces is served (OTLP/HTTP traces)\n", close=True)
        if not collector.authorized(self.headers.get("Authorization")):  # not a byte more read from it
            return self._reply(401, "text/plain", b"a valid Authorization: Bearer <token> header is required\n",
                               close=True)
        try:
            body = self._body(collector.max_body)
        except PayloadError as exc:
            kind, answer = _status_body(self.headers.get("Content-Type") or "", str(exc))
            return self._reply(exc.status, kind, answer, close=True)
        try:
            status, kind, answer = collector.export(self.headers.get("Content-Type") or "",
                                                    self.headers.get("Content-Encoding"), body)
        except Exception as exc:  # noqa: BLE001 - one request's failure never stops the server
            log.warning("workbench collect could not take a request: %s", exc, exc_info=True)
            status, kind, answer = 500, "text/plain", b"the collector could not record this batch; retry\n"
        self._reply(status, kind, answer)

    def _body(self, cap: int) -> bytes:
        """The request body, by Content-Length or chunked (the JavaScript exporter streams its gzip
        body), refused past `cap` bytes before more is read."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts, size = [], 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    chunk = int(line.split(b";")[0].strip() or b"x", 16)
                except ValueError:
                    raise PayloadError(f"a malformed chunk header {line[:40]!r}") from None
                if chunk == 0:
                    while self.rfile.readline(1024).strip():  # trailers, then the blank line
                        pass
                    return b"".join(parts)
                size += chunk
                if size > cap:
                    raise PayloadError(f"the body is over the {cap:,} bytes allowed", 413)
                parts.append(self.rfile.read(chunk))
                self.rfile.readline(1024)  # the CRLF after the chunk
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise PayloadError("Content-Length (or a chunked body) is required", 411)
        if int(length) > cap:
            raise PayloadError(f"the body is {int(length):,} bytes, over the {cap:,} allowed", 413)
        return self.rfile.read(int(length))

    def do_GET(self) -> None:  # noqa: N802
        self._reply(405, "text/plain", b"OTLP/HTTP: POST /v1/traces\n")

    def _reply(self, status: int, kind: str, body: bytes, close: bool = False) -> None:
        """Answer; `close`: the request's body was not read, so the connection cannot be reused."""
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: requests are not logged one by one
        pass


class _Server(QuietHTTPServer):
    collector: Collector

    def __init__(self, address: tuple[str, int], collector: Collector) -> None:
        self.address_family = _family(address[0])
        super().__init__(address, _Handler)
        self.collector = collector


def _family(host: str):
    import socket

    return socket.AF_INET6 if ":" in host else socket.AF_INET


def listening_address(host: str) -> str:
    """`host` as the address to bind: an IP address or `localhost`, never a name to look up (a
    resolver with no network answers after its timeouts, not at once)."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        raise WorkbenchError(
            "WB_PORT_UNAVAILABLE", f"--host {host[:100]!r} is not an IP address to listen on",
            "give an address: --host 127.0.0.1 (this machine only), --host 0.0.0.0 or --host :: (every interface)",
        ) from None


def serve(recorder: Recorder, host: str = "127.0.0.1", port: int = 4318, max_body: int = MAX_BODY_BYTES) -> _Server:
    """A started-up (not yet serving) receiver on `host:port`; `serve_forever()` serves it."""
    host = listening_address(host)
    token = token_for(host)
    try:
        return _Server((host, port), Collector(recorder, token, max_body))
    except OSError as exc:
        raise WorkbenchError(
            "WB_PORT_UNAVAILABLE", f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            "pick another port: workbench collect --port 4319 (senders: OTEL_EXPORTER_OTLP_ENDPOINT=http://host:4319)",
        ) from None
