"""Recording for bare `aiohttp.ClientSession`s: the requests a session sends itself, not those an
httpx client sends through aiohttp (LiteLLM's async transport), which the httpx recording transport
records already (`RECORDING` is set around them).

The request side uses aiohttp's public tracing: `instrument()` adds one `TraceConfig` to every
session built from then on; its signals give the call's start, the request body as sent, the
response head, and a failure before the response. The body is not traced: aiohttp sends
`on_response_chunk_received` only from `ClientResponse.read()`, once, never for `resp.content`
read as a stream. So the response's `StreamReader` is teed where every read path ends
(`_read_nowait_chunk`: iteration, `read`, `readany`, `readline`, `json()`, `text()`), by turning
it into a subclass with the same slots: what the application read is what is recorded, a stream is
never drained, and the data already buffered with the response head is seen too. A reader reaching
its end is a finished call; a payload error (the server cut the connection) a cut one; the
response closed or collected before its end an abandoned one."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import aiohttp
import httpx
from aiohttp.streams import StreamReader
from opentelemetry import context as otel_context

from workbench.capture.recorder import recorder
from workbench.capture.transport import _SUPPRESS, RECORDING, Pending, _failed

# a teed reader's call: keyed by the reader's id (a reader has slots and no weak references), the
# reader kept alive with it so the id stays its own; dropped when the call is recorded
_teed: dict[int, tuple[StreamReader, Pending]] = {}


def _finish(reader: StreamReader, ended: bool, error: str | None = None) -> None:
    entry = _teed.pop(id(reader), None)
    if entry is None:
        return
    try:
        entry[1].finish(ended=ended, error=error)
    except Exception:  # noqa: BLE001 - recording never breaks the application
        pass


class _TeedStreamReader(StreamReader):
    """A response's reader whose reads are recorded; same slots, so a reader becomes one in place."""

    __slots__ = ()

    def _read_nowait_chunk(self, n: int) -> bytes:
        data = super()._read_nowait_chunk(n)
        entry = _teed.get(id(self))
        if entry is not None:
            try:
                entry[1].received(data)
            except Exception:  # noqa: BLE001 - recording never breaks the application
                _teed.pop(id(self), None)
                return data
            if self.at_eof():
                _finish(self, ended=True)
        return data

    def feed_eof(self) -> None:
        super().feed_eof()
        if self.at_eof():  # everything before the end was read already
            _finish(self, ended=True)

    def set_exception(self, exc, *args) -> None:
        super().set_exception(exc, *args)
        # a payload error is the connection lost mid-body; anything else (the response closed or
        # released by the application) leaves the rest unread: abandoned
        _finish(self, ended=False, error="stream_cut" if isinstance(exc, aiohttp.ClientPayloadError) else None)


def _abandoned(key: int) -> None:
    entry = _teed.get(key)
    if entry is not None:
        _finish(entry[0], ended=False)


async def _on_request_start(session, context: SimpleNamespace, params) -> None:
    context.pending = None
    if not _active or RECORDING.get() or otel_context.get_value(_SUPPRESS) or not recorder().settings.capture:
        return
    request = SimpleNamespace(method=params.method, url=str(params.url), headers=None, content=b"")
    context.pending, context.body = Pending(request, None), []


async def _on_request_chunk_sent(session, context: SimpleNamespace, params) -> None:
    if getattr(context, "pending", None) is not None:
        context.body.append(bytes(params.chunk))


async def _on_request_redirect(session, context: SimpleNamespace, params) -> None:
    if getattr(context, "pending", None) is not None:
        context.body = []  # the call recorded is the last hop's


async def _on_request_end(session, context: SimpleNamespace, params) -> None:
    pending: Pending | None = getattr(context, "pending", None)
    if pending is None:
        return
    try:
        response = params.response
        pending.request_headers = httpx.Headers(list(response.request_info.headers.items()))
        pending.request_body = b"".join(context.body)
        pending.url = str(response.request_info.url)
        pending.status = response.status
        headers = list(response.headers.items())
        if response.content is not None and getattr(session, "auto_decompress", True):
            # the reader holds the decoded body: the encoding no longer applies to what is recorded
            headers = [(name, value) for name, value in headers if name.lower() != "content-encoding"]
        pending.response_headers = httpx.Headers(headers)
        reader = response.content
        if type(reader) is not StreamReader:  # no body (aiohttp's shared empty reader), or not aiohttp's
            pending.finish(ended=True)
            return
        _teed[id(reader)] = (reader, pending)
        reader.__class__ = _TeedStreamReader
        if reader.at_eof():  # an empty body, ended already
            _finish(reader, ended=True)
        else:
            # a response collected unclosed: abandoned (at exit, capture's own sweep records it)
            weakref.finalize(response, _abandoned, id(reader)).atexit = False
    except Exception:  # noqa: BLE001 - recording never breaks the application
        pass


async def _on_request_exception(session, context: SimpleNamespace, params) -> None:
    pending: Pending | None = getattr(context, "pending", None)
    if pending is not None:
        _failed(pending, params.exception)


def _trace_config() -> aiohttp.TraceConfig:
    config = aiohttp.TraceConfig()
    config.on_request_start.append(_on_request_start)
    config.on_request_chunk_sent.append(_on_request_chunk_sent)
    config.on_request_redirect.append(_on_request_redirect)
    config.on_request_end.append(_on_request_end)
    config.on_request_exception.append(_on_request_exception)
    config.freeze()
    return config


_TRACE = _trace_config()
_active = False
_original_init = None


def instrument_sessions() -> None:
    """Every `aiohttp.ClientSession` built from now on carries Workbench's trace config."""
    global _active, _original_init
    _active = True
    if _original_init is not None:
        return
    original = _original_init = aiohttp.ClientSession.__init__

    def __init__(self, *args, trace_configs=None, **kwargs):
        original(self, *args, trace_configs=[*(trace_configs or ()), _TRACE], **kwargs)

    aiohttp.ClientSession.__init__ = __init__


def uninstrument_sessions() -> None:
    """Sessions built from now on are left alone, and those built before record no more."""
    global _active, _original_init
    _active = False
    if _original_init is not None:
        aiohttp.ClientSession.__init__ = _original_init
        _original_init = None
