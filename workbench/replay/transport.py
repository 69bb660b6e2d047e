"""Replay as a transport (httpx2 and httpx, sync and async) that sits inside the capture wrapper,
so a replayed call is recorded like a live one, marked replayed. Streams replay as streams, one
event at a time. A miss in replay mode answers at once with a non-retryable 400 whose error is
`WB_REPLAY_MISS` (the SDKs retry any exception a transport raises, so raising would cost retries
and seconds and reach the user wrapped); the miss is also kept on the cassette (`misses`)."""

from __future__ import annotations

import json
import re
from contextvars import ContextVar
from types import ModuleType
from typing import NamedTuple

from workbench.capture.route import routed
from workbench.capture.transport import (
    REPLAY_SESSION, REPLAYED_ABANDONED, REPLAYED_FROM, REQUEST_HASH, record_answered, record_unanswered, records_now,
)
from workbench.errors import WorkbenchError
from workbench.replay.cassette import Interaction, RecordedRequest, RecordedResponse
from workbench.replay.scrub import masked_request_body, scrub_body
from workbench.replay.session import Cassette
from workbench.wire import is_complete, wire_of
from workbench.wire.canonical import request_hash
from workbench.wire.redact import credential_values, mask_secrets, redact_url

MISS_HEADER = "x-workbench-error"
# on a recorded response: ["abandoned"], the client closed this stream before its usage was final
# (told to capture: REPLAYED_ABANDONED); ["cut", ERROR, MESSAGE], the connection failed mid-body
# with the transport error ERROR (an httpx name), which replay raises again after the recorded
# bytes. Kept in the cassette (vcrpy ignores it), never served to the client.
ABANDONED_HEADER = "x-workbench-stream"
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
# set while a replay transport sends a request it is recording into its cassette, so a recorder
# underneath (vcrpy's aiohttp patch, under LiteLLM's async transport) leaves that request alone
RECORDING_INTO_CASSETTE: ContextVar[bool] = ContextVar("workbench_recording_into_cassette", default=False)


def _chunks(body: bytes, content_type: str) -> list[bytes]:
    """An SSE body as its events, each with its own blank-line terminator byte for byte (Gemini
    ends its events with CRLF CRLF); anything else whole."""
    if "text/event-stream" not in content_type or not body:
        return [body]
    chunks, start = [], 0
    for end in _EVENT_END.finditer(body):
        chunks.append(body[start:end.end()])
        start = end.end()
    if start < len(body):
        chunks.append(body[start:])
    return chunks


def miss_error(cassette: Cassette, method: str, url: str, body: bytes, digest: str) -> WorkbenchError:
    # compared as a cassette would hold it: the diff quotes the request's text
    closest, difference = cassette.index.closest(method, url, masked_request_body(body))
    recorded = f"{closest.request.method} {closest.request.uri}" if closest else "none"
    if not cassette.path.exists():
        difference = "the cassette file does not exist yet"
    # the request as a cassette would hold it: no credential reaches the message (it travels into
    # the response body, the run's error, spans and the test's output)
    cause = (f"no recording in {cassette.path} for {method} {redact_url(url)} (request hash {digest}); "
             f"closest recording: {recorded}; first difference: {difference}")
    return WorkbenchError(
        "WB_REPLAY_MISS",
        mask_secrets(cause, credential_values((), url)),
        f"record it: WORKBENCH_RECORD_MODE=record <the same command> (or mode='record' at the call site), "
        f"then commit {cassette.path}",
    )


def _miss_body(error: WorkbenchError) -> bytes:
    message = f"{error.code}: {error.cause}\nfix: {error.fix}"
    # both SDKs' error shapes at once: OpenAI reads error.message, Anthropic type + error
    return json.dumps({"type": "error", "error": {"type": error.code, "code": error.code, "message": message}}).encode()


def _headers(recorded: dict[str, list[str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, values in recorded.items() for value in values
            if name.lower() != ABANDONED_HEADER]


def _mark(recorded: dict[str, list[str]]) -> list[str]:
    return next((values for name, values in recorded.items() if name.lower() == ABANDONED_HEADER), [])


def _cut_error(httpx: ModuleType, mark: list[str]) -> Exception | None:
    """The transport error a cut recording ends with, as the client got it; None: not cut."""
    if not mark or mark[0] != "cut":
        return None
    name, message = (mark[1:] + ["", ""])[:2]
    error = getattr(httpx, name, None)
    if not (isinstance(error, type) and issubclass(error, httpx.TransportError)):
        error = httpx.RemoteProtocolError  # what a dropped connection raises
    return error(message or "peer closed connection without sending complete message body")


class Answer(NamedTuple):
    """What a cassette answers a request with, before any httpx object is made of it."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    content_type: str
    mark: list[str]  # ABANDONED_HEADER's values: [] unless the recording was abandoned or cut
    extensions: dict


def answered(cassette: Cassette, request: RecordedRequest) -> Answer | None:
    """The recording a cassette answers `request` with (played: the next one of the same request is
    next), or the miss in replay mode, or None: ask the network and record."""
    digest = request_hash(request.method, request.uri, request.body)
    if cassette.mode in ("replay", "record"):
        repeat = cassette.mode == "replay"
        index = cassette.index.take(digest, repeat=repeat)
        masked = masked_request_body(request.body) if index is None else request.body
        if masked is not request.body:  # recorded with a pasted key masked: look for it as it was stored
            masked_digest = request_hash(request.method, request.uri, masked)
            index = cassette.index.take(masked_digest, repeat=repeat)
            digest = masked_digest if index is not None else digest
        if index is None and not cassette.match_body:  # unplayed ones only, as vcrpy plays each once
            index = cassette.index.take_route(request.method, request.uri)
            cassette.matched_without_body += index is not None
        if index is not None:
            recorded = cassette.index.interactions[index].response
            content_type = ", ".join(recorded.headers.get("content-type", recorded.headers.get("Content-Type", [])))
            mark = _mark(recorded.headers)
            return Answer(recorded.status, _headers(recorded.headers), recorded.body, content_type, mark,
                          {REPLAYED_FROM: str(cassette.path), REQUEST_HASH: digest, REPLAY_SESSION: cassette.session,
                           REPLAYED_ABANDONED: "abandoned" in mark, **cassette.origin(index)})
    if cassette.mode == "replay":
        error = miss_error(cassette, request.method, request.uri, request.body, digest)
        cassette.misses.append(error)
        headers = [("content-type", "application/json"), ("x-should-retry", "false"), (MISS_HEADER, error.code)]
        return Answer(400, headers, _miss_body(error), "application/json", [], {REQUEST_HASH: digest})
    return None


# An answer the fast path looked up but leaves to the full path (a stream, a redirect, a cut body):
# the replay transport serves it rather than taking the next recording
_HANDED_OVER: ContextVar[list[Answer] | None] = ContextVar("workbench_replay_handed_over", default=None)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _plain(answer: Answer) -> bool:
    """An answer the fast path gives exactly as the full path would: read whole (not an event
    stream, not cut), not a redirect the client follows. A cassette's recordings never hold a
    cookie or an encoded body: they are scrubbed and decoded as they are loaded or recorded."""
    return not answer.mark and answer.status not in _REDIRECTS and "text/event-stream" not in answer.content_type


class _DirectRequest:
    """The request as capture's `Pending` reads it, without an httpx Request being built."""

    __slots__ = ("method", "url", "headers", "content")

    def __init__(self, method: str, url: str, headers, content: bytes) -> None:
        self.method, self.url, self.headers, self.content = method, url, headers, content


def build(httpx: ModuleType):
    class _Replayed(httpx.SyncByteStream):
        def __init__(self, chunks: list[bytes], cut: Exception | None = None) -> None:
            self._chunks, self._cut = chunks, cut

        def __iter__(self):
            yield from self._chunks
            if self._cut is not None:
                raise self._cut

    class _AsyncReplayed(httpx.AsyncByteStream):
        def __init__(self, chunks: list[bytes], cut: Exception | None = None) -> None:
            self._chunks, self._cut = chunks, cut

        async def __aiter__(self):
            for chunk in self._chunks:
                yield chunk
            if self._cut is not None:
                raise self._cut

    class _Recording:
        """Tees a live response into the cassette once it has been read to its end."""

        def __init__(self, cassette: Cassette, request: RecordedRequest, response) -> None:
            self.cassette, self.request, self.response = cassette, request, response
            self.parts: list[bytes] = []
            self.done = False

        def close(self) -> bool:
            """Closed before the end: a stream is kept as far as the client read it, never drained;
            one closed before its usage was final (`is_complete`) is marked abandoned, so it replays
            as received and is recorded as abandoned again. Returns True when the rest of a
            non-stream body must be read first: the SDKs close a retryable error (429, 529) of a
            `stream=True` request without reading it, and the retry must replay as it was recorded."""
            if self.done:
                return False
            content_type = self.response.headers.get("content-type", "")
            if "text/event-stream" not in content_type:
                return True
            wire = wire_of(self.request.method, self.request.uri)
            complete = is_complete(wire, b"".join(self.parts), self.response.headers.get("content-encoding"))
            self.finish(abandoned=not complete)
            return False

        def cut(self, error: Exception) -> None:
            """The connection failed mid-body: kept as far as it arrived, with the error."""
            self.finish(mark=["cut", type(error).__name__, str(error)])

        def finish(self, abandoned: bool = False, mark: list[str] | None = None) -> None:
            if self.done:
                return
            self.done = True
            mark = mark or (["abandoned"] if abandoned else None)
            headers: dict[str, list[str]] = {ABANDONED_HEADER: mark} if mark else {}
            for name, value in self.response.headers.multi_items():
                headers.setdefault(name, []).append(value)
            response = RecordedResponse(status=self.response.status_code, headers=headers, body=b"".join(self.parts))
            if self.cassette.filters is not None:
                response = self.cassette.filters.response(response)
                if response is None:
                    return
            self.cassette.record(Interaction(request=self.request, response=response))

    class _RecordingStream(httpx.SyncByteStream):
        def __init__(self, inner, recording: _Recording) -> None:
            self._inner, self._recording = inner, recording

        def __iter__(self):
            try:
                for chunk in self._inner:
                    self._recording.parts.append(chunk)
                    yield chunk
            except httpx.TransportError as exc:
                self._recording.cut(exc)
                raise
            self._recording.finish()

        def close(self) -> None:
            try:
                if self._recording.close():
                    for chunk in self._inner:
                        self._recording.parts.append(chunk)
                    self._recording.finish()
            except httpx.TransportError as exc:
                self._recording.cut(exc)
            except Exception:  # noqa: BLE001 - a body that cannot be read on is not recorded
                pass
            finally:
                self._inner.close()

    class _AsyncRecordingStream(httpx.AsyncByteStream):
        def __init__(self, inner, recording: _Recording) -> None:
            self._inner, self._recording = inner, recording

        async def __aiter__(self):
            try:
                async for chunk in self._inner:
                    self._recording.parts.append(chunk)
                    yield chunk
            except httpx.TransportError as exc:
                self._recording.cut(exc)
                raise
            self._recording.finish()

        async def aclose(self) -> None:
            try:
                if self._recording.close():
                    async for chunk in self._inner:
                        self._recording.parts.append(chunk)
                    self._recording.finish()
            except httpx.TransportError as exc:
                self._recording.cut(exc)
            except Exception:  # noqa: BLE001 - a body that cannot be read on is not recorded
                pass
            finally:
                await self._inner.aclose()

    def _served(cassette: Cassette, request: RecordedRequest, stream_type: type):
        """The response a cassette gives (a recording, or a miss in replay mode), or None: ask the
        network and record. An answer the fast path took and handed over is served as it is."""
        handed = _HANDED_OVER.get()
        answer = handed.pop() if handed else answered(cassette, request)
        if answer is None:
            return None
        return httpx.Response(answer.status, headers=answer.headers,
                              stream=stream_type(_chunks(answer.body, answer.content_type), _cut_error(httpx, answer.mark)),
                              extensions=answer.extensions)

    def _recorded_request(cassette: Cassette, request, body: bytes) -> RecordedRequest | None:
        """The request as the cassette matches and records it; None: it bypasses the cassette."""
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.multi_items():
            headers.setdefault(name, []).append(value)
        recorded = RecordedRequest.model_construct(method=request.method, uri=str(request.url), headers=headers, body=body)
        return recorded if cassette.filters is None else cassette.filters.request(recorded)

    class ReplayTransport(httpx.BaseTransport):
        def __init__(self, cassette: Cassette, inner=None) -> None:
            self.cassette = cassette
            self.inner = inner if inner is not None else httpx.HTTPTransport()

        def handle_request(self, request):
            recorded = _recorded_request(self.cassette, request, scrub_body(request.read(), self.cassette.body_hook))
            if recorded is None:
                return self.inner.handle_request(request)
            served = _served(self.cassette, recorded, _Replayed)
            if served is not None:
                return served
            token = RECORDING_INTO_CASSETTE.set(True)
            try:
                response = self.inner.handle_request(request)
            finally:
                RECORDING_INTO_CASSETTE.reset(token)
            recording = _Recording(self.cassette, recorded, response)
            return httpx.Response(
                response.status_code, headers=response.headers,
                stream=_RecordingStream(response.stream, recording), extensions=response.extensions,
            )

        def close(self) -> None:
            self.cassette.save_or_log()
            self.inner.close()

    class AsyncReplayTransport(httpx.AsyncBaseTransport):
        """`fast_path=False` switches the replay fast path off (`answer_directly` always declines):
        every request goes through the client and this transport, as an opaque wrapper's would.
        For comparing the two paths; the stored results are the same either way."""

        def __init__(self, cassette: Cassette, inner=None, *, fast_path: bool = True) -> None:
            self.cassette = cassette
            self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()
            self.fast_path = fast_path
            # the fast path's last merged request headers, for the client's headers and the call's
            # as they were then (the same every call of a provider): (client headers, call headers,
            # merged, as recorded)
            self._merged: tuple | None = None

        async def handle_async_request(self, request):
            recorded = _recorded_request(self.cassette, request, scrub_body(await request.aread(), self.cassette.body_hook))
            if recorded is None:
                return await self.inner.handle_async_request(request)
            served = _served(self.cassette, recorded, _AsyncReplayed)
            if served is not None:
                return served
            token = RECORDING_INTO_CASSETTE.set(True)
            try:
                response = await self.inner.handle_async_request(request)
            finally:
                RECORDING_INTO_CASSETTE.reset(token)
            recording = _Recording(self.cassette, recorded, response)
            return httpx.Response(
                response.status_code, headers=response.headers,
                stream=_AsyncRecordingStream(response.stream, recording), extensions=response.extensions,
            )

        async def answer_directly(self, client, method: str, url, content: bytes, headers: dict[str, str]):
            """The replay fast path, for `client`, a capture client built around this transport (a
            runtime provider's): the cassette's answer without an httpx request built or a response
            stream read, recorded exactly as the capture transport records it. None when the full
            path must send the request: not replaying, capture off or suppressed, an ambient route,
            record filters, a closed client or one with cookies, auth or event hooks. An answer the client must
            act on (a redirect, a streamed or cut body) is handed to the full path, which
            serves it rather than taking the next recording."""
            cassette = self.cassette
            if (not self.fast_path or cassette.mode != "replay" or cassette.filters is not None or client.is_closed or client.auth is not None
                    or len(client.cookies) or any(client.event_hooks.values()) or not records_now()
                    or routed(self, httpx, True) is not self):
                return None
            merged, recorded_headers = self._merged_headers(client, headers)
            uri = str(url)
            request = _DirectRequest(method, uri, merged, content)
            body = scrub_body(content, cassette.body_hook)
            try:
                answer = answered(cassette, RecordedRequest.model_construct(method=method, uri=uri, headers=recorded_headers,
                                                                            body=body))
            except BaseException as exc:
                record_unanswered(request, exc)
                raise
            if not _plain(answer):
                token = _HANDED_OVER.set([answer])
                try:
                    return await client.request(method, url, content=content, headers=headers)
                finally:
                    _HANDED_OVER.reset(token)
            response = httpx.Response(answer.status, headers=answer.headers, stream=httpx.ByteStream(answer.body),
                                      extensions=answer.extensions)
            record_answered(request, response, answer.body)
            # the body as read: `read()` would decode and re-chunk a body that is already whole and
            # plain, at twice the cost of the response itself
            response._content = answer.body
            response.is_stream_consumed = response.is_closed = True
            return response

        def _merged_headers(self, client, headers: dict[str, str]) -> tuple:
            """The request's headers as the client would send them (its own, then the call's), and
            as a cassette holds them; kept for the next call, whose headers are the same. Keyed on
            the headers' contents, never on the client (a closed client is not kept alive)."""
            own = tuple(client.headers.multi_items())
            call = tuple(headers.items())
            cached = self._merged
            if cached is not None and cached[0] == own and cached[1] == call:
                return cached[2], cached[3]
            merged = httpx.Headers(client.headers)
            merged.update(headers)
            recorded: dict[str, list[str]] = {}
            for name, value in merged.multi_items():
                recorded.setdefault(name, []).append(value)
            self._merged = (own, call, merged, recorded)
            return merged, recorded

        async def aclose(self) -> None:
            self.cassette.save_or_log()
            await self.inner.aclose()

    return ReplayTransport, AsyncReplayTransport
