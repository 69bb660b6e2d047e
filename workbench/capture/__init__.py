"""Capture: recording transports for httpx2 and httpx, runs and their bills, spans.

`http_client()` / `async_http_client()` give httpx2 clients for the current `openai` and `anthropic`
SDKs (`http_client=`); `httpx_client()` / `async_httpx_client()` give plain httpx clients for older
SDKs, LiteLLM and your own code. `instrument()` records clients made without our transport."""

from __future__ import annotations

import httpx
import httpx2

from workbench.capture.recorder import configure, flush, recorder
from workbench.capture.runs import Billed, Run, billed_of, current_run, event, run
from workbench.capture.transport import RECORDING as _RECORDING
from workbench.capture.transport import build

RecordingTransport, AsyncRecordingTransport = build(httpx2)
HttpxRecordingTransport, AsyncHttpxRecordingTransport = build(httpx)

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
    kwargs, options = _split(kwargs)
    return httpx.Client(transport=HttpxRecordingTransport(transport or httpx.HTTPTransport(**options)), **kwargs)


def async_httpx_client(transport=None, **kwargs) -> httpx.AsyncClient:
    kwargs, options = _split(kwargs)
    return httpx.AsyncClient(
        transport=AsyncHttpxRecordingTransport(transport or httpx.AsyncHTTPTransport(**options)), **kwargs
    )


_instrumented: list[tuple[type, str, object]] = []


def instrument() -> None:
    """Record every request made through httpx's and httpx2's default network transports
    (`HTTPTransport`, `AsyncHTTPTransport`), so clients created without our transport are captured
    too — the SDKs' own default clients included. Scope: requests that reach those two classes in
    this process. Clients built on another transport (a custom one, ASGI/WSGI, a mock) are not seen;
    a client built with `http_client()` is recorded once, not twice. `uninstrument()` undoes it."""
    if _instrumented:
        return
    for module, (sync_recording, async_recording) in (
        (httpx2, (RecordingTransport, AsyncRecordingTransport)),
        (httpx, (HttpxRecordingTransport, AsyncHttpxRecordingTransport)),
    ):
        for cls, method, recording in (
            (module.HTTPTransport, "handle_request", sync_recording),
            (module.AsyncHTTPTransport, "handle_async_request", async_recording),
        ):
            original = getattr(cls, method)
            _instrumented.append((cls, method, original))
            setattr(cls, method, _patched(original, recording, method))


def _patched(original, recording, method):
    # A recording transport over a view of the network transport that calls the original method.
    class _Original:
        def __init__(self, owner):
            self.owner = owner

        def handle_request(self, request):
            return original(self.owner, request)

        async def handle_async_request(self, request):
            return await original(self.owner, request)

    if method == "handle_request":

        def handle_request(self, request):
            if _RECORDING.get():
                return original(self, request)
            return recording(_Original(self)).handle_request(request)

        return handle_request

    async def handle_async_request(self, request):
        if _RECORDING.get():
            return await original(self, request)
        return await recording(_Original(self)).handle_async_request(request)

    return handle_async_request


def instrumented() -> bool:
    """Is `instrument()` in effect (so that a scope that instruments for a while leaves it as found)?"""
    return bool(_instrumented)


def uninstrument() -> None:
    while _instrumented:
        cls, method, original = _instrumented.pop()
        setattr(cls, method, original)

__all__ = [
    "AsyncHttpxRecordingTransport", "AsyncRecordingTransport", "Billed", "HttpxRecordingTransport",
    "RecordingTransport", "Run", "async_http_client", "async_httpx_client", "billed_of", "configure",
    "current_run", "event", "flush", "http_client", "httpx_client", "instrument", "instrumented", "recorder", "run",
    "uninstrument",
]
