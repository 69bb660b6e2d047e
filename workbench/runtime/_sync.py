"""The sync twins: run an async core to completion on a fresh event loop.

Inside a running loop (a notebook, an async app) the coroutine runs on a worker thread instead, in
a copy of the caller's context, so the current run and budget still apply."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable


def run_sync(make: Callable[[], Awaitable[Any]], gateway) -> Any:
    async def main() -> Any:
        try:
            return await make()
        finally:
            await gateway.release_loop()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-sync") as pool:
        return pool.submit(context.run, asyncio.run, main()).result()
