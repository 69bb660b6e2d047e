"""The one seam between capture and replay: a recording transport asks, per request, which
transport to send through. Replay registers the answer (an ambient cassette's replay transport
around the one the client was built with); capture knows nothing of cassettes and never imports
replay. With nothing registered, a request goes to the client's own transport."""

from __future__ import annotations

import importlib
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


# A run that resumes an earlier one (`workbench.run(name, resume=RUN_ID)`, or the first top-level
# run of a command started by `workbench runs resume`) is opened by replay, whose transport answers
# its calls from the store. Capture names that module rather than importing it (the store names
# insight the same way), so the import order holds.
RESUME = "workbench.replay.resume"
RESUME_ENV = "WORKBENCH_RESUME_RUN"  # set by `workbench runs resume RUN_ID -- COMMAND` for COMMAND


def open_resume(run, given: str | None) -> None:
    """Make `run` answer from the store what the run `given` names (None: the one `RESUME_ENV`
    names, when `run` carries its name) already answered; raises `WorkbenchError` on bad input."""
    importlib.import_module(RESUME).open_resume(run, given)
