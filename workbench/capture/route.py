"""The one seam between capture and replay: a recording transport asks, per request, which
transport to send through. Replay registers the answer (an ambient cassette's replay transport
around the one the client was built with); capture knows nothing of cassettes and never imports
replay. With nothing registered, a request goes to the client's own transport."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

# (the client's transport, the httpx-like module of the request, async?) -> the transport to use
Router = Callable[[object, ModuleType, bool], object]

_router: Router | None = None


def set_router(router: Router | None) -> None:
    global _router
    _router = router


def routed(inner, httpx: ModuleType, asynchronous: bool):
    router = _router
    return inner if router is None else router(inner, httpx, asynchronous)
