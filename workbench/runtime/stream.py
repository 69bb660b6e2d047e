"""`llm_stream()`: the streamed `llm()`. It yields the answer's text as the model writes it —
UNVALIDATED — then one `done` chunk carrying the final value: the text, or the instance of `output`
its JSON (a fenced block, or the whole text) validates as.

A stream offers no `respond` tool (a tool call arrives whole, so there would be nothing to stream)
and takes no repair turn: the consumer has already read the tokens, and a second answer over the
top would be two answers to one question. A shape that does not validate is `WB_LLM_STREAM_INVALID`,
whose fix is the non-streaming `llm()`.

Lazy: nothing is reserved or sent until the first chunk is asked for. The call runs in a task of
its own (its run, budget and span stay inside it) and hands chunks over one at a time, so it never
reads far ahead of the consumer; a consumer that stops early cancels it, which cuts the provider's
stream (never drained), releases the budget reservation and stores the run as aborted with its bill.
`async for` in async code; a plain `for` runs it on a private event loop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, Mapping, Sequence

from pydantic import BaseModel

from workbench.capture import run
from workbench.errors import WorkbenchError
from workbench.runtime.budget import Budget, budget_scope
from workbench.runtime.caching import prompt_cache_of
from workbench.runtime.gateway import Gateway
from workbench.runtime.llm import DEFAULT_MAX_TOKENS, check_turn, json_in_text, redacted, validate_arguments
from workbench.runtime.messages import Completion, Document, Image, ModelRequest, UserMessage
from workbench.runtime.options import count, model_options
from workbench.runtime.prompt import PromptLike, as_prompt, prompt_tags, screen_secrets
from workbench.runtime.response_cache import acting_for

_END = object()


@dataclass(frozen=True)
class StreamChunk:
    type: str  # "text": an unvalidated increment; "done": the end, with the validated value
    text: str  # the increment, or (on "done") the whole answer
    value: Any = None  # on "done": the text, or the validated `output` instance


class LlmStream:
    """What `llm_stream()` returns: iterate it with `async for` or `for`."""

    def __init__(self, gateway: Gateway, prompt: PromptLike | str, vars: Mapping[str, Any] | None,
                 output: type[BaseModel] | None, model: str | None, options: dict) -> None:
        count("max_tokens", options.get("max_tokens"), optional=True)
        self._knobs = model_options(*(options.pop(name, None) for name in ("temperature", "seed", "effort", "thinking")))
        self._cache = prompt_cache_of(options.pop("prompt_cache", "off"))
        self.gateway, self.prompt, self.vars, self.output, self.model = gateway, as_prompt(prompt), vars or {}, output, model
        screen_secrets(self.vars, f"the variables of {getattr(self.prompt, 'id', None) or 'llm_stream()'}")
        self._options = options

    async def _produce(self, queue: asyncio.Queue) -> None:
        try:
            await self._call(queue)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, who raises it
            await queue.put(exc)

    async def _call(self, queue: asyncio.Queue) -> None:
        gateway, prompt, options = self.gateway, self.prompt, self._options
        name = getattr(prompt, "id", None) or "llm"
        budget = options.get("budget")
        attachments: Sequence[Image | Document] = options.get("attachments", ())
        async with run(name, kind="llm", prompt=prompt_tags(prompt)):
            with budget_scope(budget if budget is not None else gateway.budget, name), \
                    acting_for(options.get("actor")):
                model_name, spec = gateway.resolve(self.model, prompt)
                ceiling = min(options.get("max_tokens") or DEFAULT_MAX_TOKENS, spec.max_output)
                request = ModelRequest(
                    model=model_name, system=redacted(gateway, prompt.system or ""),
                    system_dynamic=redacted(gateway, options.get("system_dynamic", "")),
                    messages=[UserMessage((redacted(gateway, prompt.render(self.vars)), *attachments))],
                    max_tokens=ceiling, cache=self._cache[0], session=self._cache[1],
                    prompt_hash=getattr(prompt, "hash", None), **self._knobs,
                )
                completion: Completion | None = None
                async with contextlib.aclosing(gateway.stream(request)) as items:  # cut at once when cancelled
                    async for item in items:
                        if isinstance(item, Completion):
                            completion = item
                        else:
                            await queue.put(StreamChunk("text", item))
                assert completion is not None
                check_turn(completion, model_name, "the streamed call", ceiling, gateway)
                text = completion.text or ""
                value: Any = text
                if self.output is not None:
                    found = json_in_text(text)
                    value, problem = validate_arguments(self.output, found) if found is not None else (
                        None, "the answer holds no JSON")
                    if value is None:
                        raise WorkbenchError(
                            "WB_LLM_STREAM_INVALID",
                            f"{model_name}'s streamed answer did not validate as {self.output.__name__} "
                            f"({problem.replace('the respond input', 'its JSON')}); a stream takes no repair turn",
                            f"call llm(..., output={self.output.__name__}) instead (it offers a respond tool and one "
                            "repair turn), or say in the prompt to answer with one JSON object",
                        )
                await queue.put(StreamChunk("done", text, value))
        await queue.put(_END)

    async def __aiter__(self) -> AsyncIterator[StreamChunk]:
        queue: asyncio.Queue = asyncio.Queue(maxsize=1)  # one chunk ahead of the consumer, no more
        task = asyncio.get_running_loop().create_task(self._produce(queue), context=contextvars.copy_context())
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def __iter__(self) -> Iterator[StreamChunk]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("inside a running event loop, iterate the stream with `async for`")
        loop = asyncio.new_event_loop()
        chunks = self.__aiter__()
        try:
            while True:
                try:
                    yield loop.run_until_complete(chunks.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            loop.run_until_complete(chunks.aclose())
            loop.run_until_complete(self.gateway.release_loop())
            loop.close()


def llm_stream(
    gateway: Gateway,
    prompt: PromptLike | str,
    vars: Mapping[str, Any] | None = None,
    output: type[BaseModel] | None = None,
    model: str | None = None,
    **options,
) -> LlmStream:
    """Stream one model call (same arguments as `llm()`, minus `on_call`): text chunks, then `done`."""
    unknown = set(options) - {"system_dynamic", "max_tokens", "temperature", "seed", "effort", "thinking", "budget",
                              "prompt_cache", "attachments", "actor"}
    if unknown:
        raise TypeError(f"llm_stream() got unexpected options: {', '.join(sorted(unknown))}")
    return LlmStream(gateway, prompt, vars, output, model, dict(options))
