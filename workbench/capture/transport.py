"""Recording transports for httpx2 and httpx, sync and async (the two libraries share one API, so
one factory builds all four). The response stream is teed, never buffered before the caller sees
it and never drained: a stream the caller abandons is recorded as unsettled, without paying for the
rest of the generation. Completion is judged per protocol, at the point where usage is final
(`workbench.wire.is_complete`), since clients close a stream there without reading on: the OpenAI
SDK at `[DONE]`, LiteLLM at Anthropic's `message_delta`."""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from contextvars import ContextVar
from types import ModuleType

from opentelemetry import context as otel_context

from workbench.capture import clock
from workbench.capture.recorder import recorder
from workbench.capture.route import routed
from workbench.capture.runs import current_run
from workbench.capture.tracing import tracer
from workbench.store.spool import before_exit_flush
from workbench.wire import Exchange, is_complete, wire_of

# a response body past this is not kept for parsing (the caller still gets all of it)
MAX_TEED_BYTES = 32 * 1024 * 1024
_SUPPRESS = otel_context._SUPPRESS_INSTRUMENTATION_KEY  # the SDK's own "do not record me" flag
# set while a recording transport calls the one inside it, so `instrument()` does not record twice
RECORDING: ContextVar[bool] = ContextVar("workbench_recording", default=False)
# response extensions a replay transport sets: the cassette a response was served from, and the
# canonical request hash it already computed (so capture does not hash the body twice)
REPLAYED_FROM = "workbench.replayed_from"
REQUEST_HASH = "workbench.request_hash"
REPLAY_SESSION = "workbench.replay_session"  # one load of a cassette: its replayed calls share a cache lineage
RESUMED_FROM_CALL = "workbench.resumed_from_call"  # answered from the store on a resume: the call that paid
REPLAYED_ABANDONED = "workbench.replayed_abandoned"  # recorded as a stream its client abandoned
# the response extension that carries the recorded `Call` once the body is read, when it was parsed
# then (inside a run): the runtime reads it rather than parsing the same bytes again
RECORDED_CALL = "workbench.call"


class Pending:
    """One call in flight. The application's thread only notes what it alone knows (the time, the
    run, the tracing context) and keeps references; reading headers and bodies, parsing, pricing and
    the span are the recorder's, off that thread unless a run needs the bill at once."""

    def __init__(self, request, cassette: str | None) -> None:
        # tracing is set up as the application makes its first call, never first at exit (a stream
        # abandoned until then), when the interpreter refuses what OpenTelemetry's set-up registers
        tracer()
        # every time of the call is read on the clock it started on (a backdated one, say), even
        # when its stream is finished from elsewhere
        self.shift_ns = clock.shift_ns()
        self.started_ns = time.time_ns() + self.shift_ns
        self.first_byte_ns: int | None = None
        self.ended_ns = 0
        self.run = current_run()
        self.context = otel_context.get_current()  # the parent of the call's span
        self.replayed, self.cassette = False, cassette
        self.request_hash: str | None = None
        self.replay_session: str | None = None
        self.resumed_from_call_id: str | None = None
        self.method, self.url = request.method, str(request.url)
        self.request_headers = request.headers  # never changed once sent: read when recorded
        self.request_body = request.content
        self.status: int | None = None
        self.response_headers = None
        self.extensions: dict = {}
        self.chunks: list[bytes] = []
        self.size = 0
        self.done = self.ended = False
        self.error: str | None = None
        _in_flight.add(self)

    def responded(self, response) -> None:
        self.status = response.status_code
        # a replay transport marks what it served from a cassette, and names the cassette
        self.replayed = bool(response.extensions.get(REPLAYED_FROM))
        self.cassette = response.extensions.get(REPLAYED_FROM) or self.cassette
        self.request_hash = response.extensions.get(REQUEST_HASH)
        self.replay_session = response.extensions.get(REPLAY_SESSION)
        self.resumed_from_call_id = response.extensions.get(RESUMED_FROM_CALL)
        self.response_headers = response.headers
        self.extensions = response.extensions

    def received(self, chunk: bytes) -> None:
        if self.first_byte_ns is None:
            self.first_byte_ns = time.time_ns() + self.shift_ns
        if self.size < MAX_TEED_BYTES:
            self.chunks.append(chunk)
        self.size += len(chunk)

    def finish(self, ended: bool, error: str | None = None) -> None:
        """Record the call once. `ended`: the stream ran to its end (not closed early)."""
        if self.done:
            return
        self.done, self.ended, self.error = True, ended, error
        self.ended_ns = time.time_ns() + self.shift_ns
        _in_flight.discard(self)
        call = recorder().record_call(self)
        if call is not None:
            self.extensions[RECORDED_CALL] = call

    def exchange(self) -> tuple[Exchange, str | None]:
        """The exchange as the parsers read it, and what the transport saw go wrong: a cut, or a
        stream that stopped short of its protocol's end."""
        request_headers = _picked(self.request_headers, _PARSED_REQUEST_HEADERS)
        response_headers = _picked(self.response_headers, _PARSED_RESPONSE_HEADERS)
        body = b"".join(self.chunks)
        error = self.error
        complete = self.ended and error is None
        streamed = "text/event-stream" in response_headers.get("content-type", "")
        if streamed and self.status is not None and self.status < 400:
            complete = is_complete(wire_of(self.method, self.url), body, response_headers.get("content-encoding"))
            if complete:
                # the protocol's end arrived: whatever happened after it (the SDK gave up waiting
                # for the connection's own end and cancelled its drain) cut nothing
                error = None
            elif error is None:
                abandoned = not self.ended or self.extensions.get(REPLAYED_ABANDONED)
                error = "stream_abandoned" if abandoned else "stream_incomplete"
        exchange = Exchange.model_construct(  # our own values: no validation
            method=self.method, url=self.url, request_headers=request_headers, request_body=self.request_body,
            status=self.status, response_headers=response_headers, response_body=body, complete=complete,
        )
        return exchange, error


# the only headers the wire parsers read: nothing else (so no secret) is carried further
_PARSED_REQUEST_HEADERS = ("content-encoding",)
_PARSED_RESPONSE_HEADERS = ("content-type", "content-encoding", "request-id", "x-request-id")


def _picked(headers, names: tuple[str, ...]) -> dict[str, str]:
    if headers is None:
        return {}
    return {name: value for name in names if (value := headers.get(name)) is not None}


# calls started and not yet recorded, so the exit can record the ones the application abandoned
# (a stream left unclosed in a reference cycle is only finalized if the cycle collector runs)
_in_flight: weakref.WeakSet[Pending] = weakref.WeakSet()


def _abandon_in_flight() -> None:
    for pending in list(_in_flight):
        try:
            pending.finish(ended=False)
        except Exception:  # noqa: BLE001 - never fail an exiting application
            pass


before_exit_flush(_abandon_in_flight)


def _failed(pending: Pending, exc: BaseException) -> None:
    if isinstance(exc, asyncio.CancelledError):  # the caller stopped waiting: abandoned, not cut
        error = None
    else:
        error = "stream_cut" if pending.status is not None else "transport_error"
    try:
        pending.finish(ended=False, error=error)
    except Exception:  # noqa: BLE001 - never mask the application's own error
        pass


def records_now() -> bool:
    """A recording transport would record a call made now: capture is on and OpenTelemetry's
    "do not record me" flag is not set."""
    return not otel_context.get_value(_SUPPRESS) and recorder().settings.capture


def record_answered(request, response, body: bytes) -> None:
    """Record a call answered whole inside the process, without a transport (the replay fast path),
    exactly as the recording transport records a response read to its end: `request` has the
    `method`, `url`, `headers` and `content` of an httpx Request, `response` the `status_code`,
    `headers` and `extensions` of an httpx Response (the recorded call lands in the latter)."""
    pending = Pending(request, None)
    pending.responded(response)
    pending.received(body)
    pending.finish(ended=True)


def record_unanswered(request, exc: BaseException) -> None:
    """Record a call whose in-process answer failed, as the recording transport records a transport
    that raised."""
    _failed(Pending(request, None), exc)


@functools.cache
def built_for_httpx(build_for) -> tuple[type, type]:
    """`build_for(httpx)`, on first use: the runtime and the current SDKs use httpx2, and importing
    plain httpx costs a command about 40 ms it mostly does not need."""
    import httpx

    return build_for(httpx)


def build(httpx: ModuleType):
    """The recording transports and their tee streams for one httpx-like module."""

    class TeeStream(httpx.SyncByteStream):
        def __init__(self, inner, pending: Pending) -> None:
            self._inner, self._pending = inner, pending

        def __iter__(self):
            try:
                for chunk in self._inner:
                    self._pending.received(chunk)
                    yield chunk
            except GeneratorExit:  # the caller stopped reading: abandoned, not cut
                self._pending.finish(ended=False)
                raise
            except BaseException as exc:
                _failed(self._pending, exc)
                raise
            self._pending.finish(ended=True)

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._pending.finish(ended=False)

    class AsyncTeeStream(httpx.AsyncByteStream):
        def __init__(self, inner, pending: Pending) -> None:
            self._inner, self._pending = inner, pending

        async def __aiter__(self):
            try:
                async for chunk in self._inner:
                    self._pending.received(chunk)
                    yield chunk
            except GeneratorExit:
                self._pending.finish(ended=False)
                raise
            except BaseException as exc:
                _failed(self._pending, exc)
                raise
            self._pending.finish(ended=True)

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                self._pending.finish(ended=False)

    class RecordingTransport(httpx.BaseTransport):
        """Wraps any transport: the caller's response is the inner one's, its body teed."""

        def __init__(self, inner=None, cassette: str | None = None) -> None:
            self.inner = inner if inner is not None else httpx.HTTPTransport()
            self.cassette = cassette

        def handle_request(self, request):
            if otel_context.get_value(_SUPPRESS):
                return self.inner.handle_request(request)
            inner = routed(self.inner, httpx, False)  # an ambient cassette's, while one is in scope
            if not recorder().settings.capture:
                return inner.handle_request(request)
            request.read()
            pending = Pending(request, self.cassette)
            token = RECORDING.set(True)
            try:
                response = inner.handle_request(request)
            except BaseException as exc:
                _failed(pending, exc)
                raise
            finally:
                RECORDING.reset(token)
            pending.responded(response)
            response.stream = TeeStream(response.stream, pending)  # teed in place: no second Response
            return response

        def close(self) -> None:
            self.inner.close()

    class AsyncRecordingTransport(httpx.AsyncBaseTransport):
        def __init__(self, inner=None, cassette: str | None = None) -> None:
            self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
            self.cassette = cassette

        async def handle_async_request(self, request):
            if otel_context.get_value(_SUPPRESS):
                return await self.inner.handle_async_request(request)
            inner = routed(self.inner, httpx, True)
            if not recorder().settings.capture:
                return await inner.handle_async_request(request)
            await request.aread()
            pending = Pending(request, self.cassette)
            token = RECORDING.set(True)
            try:
                response = await inner.handle_async_request(request)
            except BaseException as exc:
                _failed(pending, exc)
                raise
            finally:
                RECORDING.reset(token)
            pending.responded(response)
            response.stream = AsyncTeeStream(response.stream, pending)
            return response

        async def aclose(self) -> None:
            await self.inner.aclose()

    return RecordingTransport, AsyncRecordingTransport
