"""Capture: recording transports for httpx2 and httpx, runs and their bills, spans.

`http_client()` / `async_http_client()` give httpx2 clients for the current `openai` and `anthropic`
SDKs (`http_client=`); `httpx_client()` / `async_httpx_client()` give plain httpx clients for older
SDKs, LiteLLM and your own code. `instrument()` records every other httpx and httpx2 client, and
the bare aiohttp sessions built after it (`workbench.capture.aiohttp_session`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import httpx2

from workbench.capture.recorder import configure, flush, recorder
from workbench.capture.runs import Billed, Run, billed_of, current_run, event, run
from workbench.capture.transport import RECORDING as _RECORDING
from workbench.capture.transport import build, built_for_httpx

if TYPE_CHECKING:
    import httpx

RecordingTransport, AsyncRecordingTransport = build(httpx2)
_HTTPX_TRANSPORTS = ("HttpxRecordingTransport", "AsyncHttpxRecordingTransport")


def _httpx_transports() -> tuple[type, type]:
    return built_for_httpx(build)


def __getattr__(name: str):  # plain httpx's transports, built on first use
    if name in _HTTPX_TRANSPORTS:
        return _httpx_transports()[_HTTPX_TRANSPORTS.index(name)]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _recording_transports() -> tuple[type, ...]:
    return (RecordingTransport, AsyncRecordingTransport, *_httpx_transports())


@functools.cache
def _in_process() -> tuple[type, ...]:
    """The transports that answer inside the process (an app under test, a mock): no provider
    behind them, and a test's ambient cassette must not stand in for them."""
    import httpx

    return tuple(getattr(module, name) for module in (httpx, httpx2)
                 for name in ("ASGITransport", "WSGITransport", "MockTransport"))

# what the official SDKs set on their own default clients
_DEFAULTS = {"timeout": 600.0, "follow_redirects": True}
_TRANSPORT_OPTIONS = ("verify", "cert", "http1", "http2", "limits", "trust_env", "proxy", "retries", "local_address", "uds")


def _split(kwargs: dict) -> tuple[dict, dict]:
    transport = {name: kwargs.pop(name) for name in _TRANSPORT_OPTIONS if name in kwargs}
    return {**_DEFAULTS, **kwargs}, transport


def http_client(transport=None, **kwargs) -> httpx2.Client:
    """An httpx2 client whose every call is recorded; `transport` is wrapped when given."""
    kwargs, options = _split(kwargs)
    return httpx2.Client(transport=RecordingTransport(transport or httpx2.HTTPTransport(**options)), **kwargs)


def async_http_client(transport=None, **kwargs) -> httpx2.AsyncClient:
    kwargs, options = _split(kwargs)
    return httpx2.AsyncClient(
        transport=AsyncRecordingTransport(transport or httpx2.AsyncHTTPTransport(**options)), **kwargs
    )


def httpx_client(transport=None, **kwargs) -> httpx.Client:
    import httpx

    kwargs, options = _split(kwargs)
    recording, _ = _httpx_transports()
    return httpx.Client(transport=recording(transport or httpx.HTTPTransport(**options)), **kwargs)


def async_httpx_client(transport=None, **kwargs) -> httpx.AsyncClient:
    import httpx

    kwargs, options = _split(kwargs)
    _, recording = _httpx_transports()
    return httpx.AsyncClient(transport=recording(transport or httpx.AsyncHTTPTransport(**options)), **kwargs)


_instrumented: list[tuple[type | None, str, object]] = []  # (None, "", undo): an undo of its own


def instrument() -> None:
    """Record every request sent by any httpx or httpx2 client in this process, sync or async,
    whatever transport it was built with: the SDKs' own default clients, clients on a custom
    transport, and LiteLLM's async client, whose transport sends through aiohttp. The wrap is at
    the client's choice of transport (the one step every client takes per request), so a client
    built before `instrument()` is seen too. A client built with `http_client()` is recorded once,
    not twice. Bare `aiohttp.ClientSession`s built after `instrument()` are recorded too (once: not
    again under an httpx client that sends through aiohttp). Not seen: httpx's in-process
    transports (ASGI, WSGI, `MockTransport`: an app under test or a mock, no provider), an aiohttp
    session built before `instrument()`, and HTTP sent by neither library (`requests`, urllib).
    `uninstrument()` undoes it."""
    import httpx

    if _instrumented:
        return
    sessions = _aiohttp_sessions()
    if sessions is not None:
        instrument_sessions, uninstrument_sessions = sessions
        instrument_sessions()
        _instrumented.append((None, "", uninstrument_sessions))
    for module, (sync_recording, async_recording) in (
        (httpx2, (RecordingTransport, AsyncRecordingTransport)),
        (httpx, _httpx_transports()),
    ):
        for cls, recording in ((module.Client, sync_recording), (module.AsyncClient, async_recording)):
            original = cls._transport_for_url
            _instrumented.append((cls, "_transport_for_url", original))
            cls._transport_for_url = _recorded_transport(original, recording)


@functools.cache
def _aiohttp_sessions() -> tuple | None:
    """aiohttp's session recording (instrument, uninstrument), or None without aiohttp. Looked up
    once: a failed import is not cached by Python, and the pytest plugin instruments per test (a
    search of sys.path, and a recompile of the module without bytecode caching, every time)."""
    try:
        from workbench.capture.aiohttp_session import instrument_sessions, uninstrument_sessions
    except ImportError:  # aiohttp is not installed: no session to record
        return None
    return instrument_sessions, uninstrument_sessions


def _recorded_transport(original, recording):
    """The client's own choice of transport, wrapped in a recording transport unless it records
    already (built by `http_client()`, or inside a recording transport's call)."""

    def _transport_for_url(self, url):
        transport = original(self, url)
        if isinstance(transport, _recording_transports() + _in_process()) or _RECORDING.get():
            return transport
        return recording(transport)

    return _transport_for_url


def instrumented() -> bool:
    """Is `instrument()` in effect (so that a scope that instruments for a while leaves it as found)?"""
    return bool(_instrumented)


def uninstrument() -> None:
    while _instrumented:
        cls, method, original = _instrumented.pop()
        if cls is None:
            original()  # an undo of its own
        else:
            setattr(cls, method, original)

__all__ = [
    "AsyncHttpxRecordingTransport", "AsyncRecordingTransport", "Billed", "HttpxRecordingTransport",
    "RecordingTransport", "Run", "async_http_client", "async_httpx_client", "billed_of", "configure",
    "current_run", "event", "flush", "http_client", "httpx_client", "instrument", "instrumented", "recorder", "run",
    "uninstrument",
]
