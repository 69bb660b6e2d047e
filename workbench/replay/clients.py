"""Clients that record and replay: the capture wrapper around a replay transport around the network.

`http_client(cassette="cassettes/x.json")` replays (the mode is `WORKBENCH_RECORD_MODE`, default
`replay`); `mode=` chooses per call site. Without a cassette they are capture's plain recording
clients."""

from __future__ import annotations

from pathlib import Path

import httpx2

from workbench import capture
from workbench.config import RecordMode
from workbench.replay.scrub import BodyHook
from workbench.replay.session import Cassette
from workbench.capture.transport import built_for_httpx
from workbench.replay.transport import build

ReplayTransport, AsyncReplayTransport = build(httpx2)
_HTTPX_TRANSPORTS = ("HttpxReplayTransport", "AsyncHttpxReplayTransport")


def _httpx_transports() -> tuple[type, type]:
    return built_for_httpx(build)


def __getattr__(name: str):  # plain httpx's transports, built on first use (as capture's are)
    if name in _HTTPX_TRANSPORTS:
        return _httpx_transports()[_HTTPX_TRANSPORTS.index(name)]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _cassette(cassette: Cassette | Path | str, mode: RecordMode | None, body_hook: BodyHook | None) -> Cassette:
    return cassette if isinstance(cassette, Cassette) else Cassette(cassette, mode, body_hook)


def _wrap(factory, replay_cls, network_cls, cassette, mode, body_hook, transport, kwargs):
    if cassette is None:
        return factory(transport=transport, **kwargs)
    session = _cassette(cassette, mode, body_hook)
    if session.mode == "live":
        return factory(transport=transport, **kwargs)
    return factory(transport=replay_cls(session, transport or network_cls()), **kwargs)


def http_client(cassette=None, mode: RecordMode | None = None, body_hook: BodyHook | None = None, transport=None, **kwargs):
    """An httpx2 client (for the `openai` and `anthropic` SDKs) that records every call and, given
    a cassette, replays or records it."""
    return _wrap(capture.http_client, ReplayTransport, httpx2.HTTPTransport, cassette, mode, body_hook, transport, kwargs)


def async_http_client(cassette=None, mode: RecordMode | None = None, body_hook: BodyHook | None = None, transport=None, **kwargs):
    return _wrap(capture.async_http_client, AsyncReplayTransport, httpx2.AsyncHTTPTransport, cassette, mode, body_hook, transport, kwargs)


def httpx_client(cassette=None, mode: RecordMode | None = None, body_hook: BodyHook | None = None, transport=None, **kwargs):
    """The same over plain httpx (older SDKs, LiteLLM, your own code)."""
    import httpx

    return _wrap(capture.httpx_client, _httpx_transports()[0], httpx.HTTPTransport, cassette, mode, body_hook, transport, kwargs)


def async_httpx_client(cassette=None, mode: RecordMode | None = None, body_hook: BodyHook | None = None, transport=None, **kwargs):
    import httpx

    return _wrap(capture.async_httpx_client, _httpx_transports()[1], httpx.AsyncHTTPTransport, cassette, mode, body_hook, transport, kwargs)
