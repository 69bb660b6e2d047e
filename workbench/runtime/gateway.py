"""The gateway: resolves a model, routes it to the first provider that lists it, retries what is
worth retrying and falls back to another provider of the SAME model (never another model).

Retried, with full jitter (a uniform delay in [0, min(max, base * 2**attempt)]): 408, 409, 425, 429,
every 5xx (529 included) and transport errors. Never retried: any other 4xx. A `retry-after` (or
`retry-after-ms`) header up to `retry_after_max_s` is honoured as given; a longer one falls back to
the jittered delay, as the official SDKs do. When a provider's retries are spent (or it refuses the
key or the model: 401, 403, 404), the next provider listing the model is tried; the provider that
answered is on the `Completion` and a `gateway.fallback` event marks each switch.

What is sent follows the model's registry row: a sampling parameter it does not list (`sampling`)
is withheld, and a `gateway.withheld` event names it; an effort or thinking control, or an image or
a document, it cannot take is refused before anything is sent; below its `cache_min_tokens` nothing
is cache-marked (and the worst case is not priced as a cache write). A context-overflow refusal is
`WB_LLM_CONTEXT_OVERFLOW`, never retried (the agent compacts and re-sends instead)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from datetime import datetime, timezone
from typing import AsyncIterator, Awaitable, Callable, Sequence

import httpx2

from workbench.capture import event, recorder, semconv
from workbench.errors import WorkbenchError
from workbench.models import ModelRegistry, ModelSpec, Usage, cost_with
from workbench.runtime.budget import Budget, Reservation, reserve
from workbench.runtime.messages import Completion, Document, Image, ModelRequest, UserMessage
from workbench.runtime.options import count, invalid, number
from workbench.runtime.prompt import PromptLike
from workbench.runtime.providers import Provider, dumps, estimate_tokens
from workbench.runtime.response_cache import ResponseCache, record_hit
from workbench.wire.sse import parse_events

RETRY_STATUSES = frozenset({408, 409, 425, 429})
FALLBACK_STATUSES = frozenset({401, 403, 404})


@dataclass(frozen=True)
class RetryPolicy:
    """`max_retries` per provider; `sleep` is injectable (tests pass a recorder of delays)."""

    max_retries: int = 2
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    retry_after_max_s: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)
    random: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        count("RetryPolicy.max_retries", self.max_retries, 0)
        for name in ("base_delay_s", "max_delay_s", "retry_after_max_s"):
            number(f"RetryPolicy.{name}", getattr(self, name), 0)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None and 0 <= retry_after <= self.retry_after_max_s:
            return retry_after
        return self.random() * min(self.max_delay_s, self.base_delay_s * 2**attempt)


def retry_after_of(headers: httpx2.Headers) -> float | None:
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return float(value) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            return (parsedate_to_datetime(value) - datetime.now(timezone.utc)).total_seconds()
        except (TypeError, ValueError):
            return None


class ContextOverflowError(WorkbenchError):
    """The provider refused the request as longer than the model's context window."""

    def __init__(self, provider: str, model: str, message: str) -> None:
        super().__init__(
            "WB_LLM_CONTEXT_OVERFLOW",
            f"{provider} refused the request to {model} as too long for its context window: {message}",
            "shorten the input (or Budget(tokens_in=...) to refuse it before it is sent), use a model with a "
            "larger context_window, or run it as an Agent, which compacts older turns",
        )
        self.provider, self.model = provider, model


SAMPLING = ("temperature", "seed")
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def fitted(request: ModelRequest, spec: ModelSpec, provider: Provider) -> tuple[ModelRequest, list[str]]:
    """`request` as `spec`'s model takes it: the sampling parameters it does not accept withheld
    (returned by name), a control or an input kind it lacks refused with a WB_ code."""
    withheld = [name for name in SAMPLING if getattr(request, name) is not None
                and (name not in spec.sampling or name not in provider.sampling)]
    if request.effort is not None and not spec.reasoning_effort:
        raise invalid("effort", request.effort, f"None: {spec.id}'s row takes no effort control",
                      f"leave effort out, or set reasoning_effort = true on the {spec.id} row if the model takes one")
    if request.thinking is not None and not spec.thinking:
        raise invalid("thinking", request.thinking, f"None: {spec.id}'s row takes no thinking switch",
                      f"leave thinking out, or set thinking = true on the {spec.id} row if the model takes one")
    if request.effort is not None and request.thinking is False and provider.wire == "openai.chat":
        raise invalid("thinking", False, "left out when an effort is given (the chat wire has one field for both)")
    for message in request.messages:
        for part in message.parts if isinstance(message, UserMessage) else ():
            if isinstance(part, (Image, Document)):
                _check_part(part, spec)
    if not withheld:
        return request, []
    return dataclasses.replace(request, **{name: None for name in withheld}), withheld


def _check_part(part: Image | Document, spec: ModelSpec) -> None:
    if part.kind not in spec.input_kinds:
        raise WorkbenchError(
            "WB_LLM_CONTENT_UNSUPPORTED",
            f"an {part.kind} was sent to {spec.id}, whose row takes {', '.join(spec.input_kinds)} only",
            f"add {part.kind!r} to input_kinds on the {spec.id} row if the model takes it, or use a model that does",
        )
    allowed = _IMAGE_TYPES if isinstance(part, Image) else {"application/pdf"}
    if part.media_type not in allowed:
        raise WorkbenchError(
            "WB_LLM_CONTENT_UNSUPPORTED",
            f"an {part.kind} of media type {part.media_type!r} (accepted: {', '.join(sorted(allowed))})",
            f"convert it to one of {', '.join(sorted(allowed))}",
        )
    if isinstance(part, Image) and part.url is not None and not part.url.startswith("https://"):
        raise WorkbenchError("WB_LLM_CONTENT_UNSUPPORTED", f"an image URL that is not https: {part.url[:80]!r}",
                             "pass the image as bytes (Image(data=...)) or from an https URL")


@dataclass
class _Failure:
    provider: str
    status: int | None
    detail: str
    retryable: bool
    fallback: bool


class Gateway:
    """`Gateway([AnthropicProvider(...), OpenAIProvider(...)], default_model="...")`.

    `budget` is the default budget of every `llm()` and `Agent` run made through this gateway (one
    given to the run replaces it); its cost per call also applies to direct `complete()` calls."""

    def __init__(
        self,
        providers: Sequence[Provider],
        default_model: str | None = None,
        budget: Budget | None = None,
        retry: RetryPolicy | None = None,
        *,
        registry: ModelRegistry | None = None,
        cache: ResponseCache | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        if not providers:
            raise ValueError("a Gateway needs at least one provider")
        self.providers = list(providers)
        self.default_model = default_model
        self.budget = budget
        self.retry = retry or RetryPolicy()
        self._registry = registry
        self.cache = cache
        # the one redaction seam: llm() and Agent pass every text they load (the rendered prompt,
        # the system prompt, each tool result) through it before it can reach a provider
        self.redact = redact

    @property
    def registry(self) -> ModelRegistry:
        return self._registry if self._registry is not None else recorder().registry

    # -- resolution and routing
    def resolve(self, model: str | None = None, prompt: PromptLike | None = None) -> tuple[str, ModelSpec]:
        """The model of a call: the call's, else the prompt's, else the gateway default; it must
        be registered (for its window and prices) and listed by a provider."""
        name = model or getattr(prompt, "model", None) or self.default_model
        if not name:
            raise WorkbenchError(
                "WB_MODEL_UNRESOLVED",
                "no model was given by the call, the prompt or the gateway (default_model=None)",
                "pass model=... to the call, set the prompt's model, or Gateway(..., default_model=...)",
            )
        spec = self.registry.get(name)
        self.route(name)
        return name, spec

    def route(self, model: str) -> list[Provider]:
        routed = [provider for provider in self.providers if provider.serves(model)]
        if not routed:
            listed = "; ".join(f"{p.name}: {', '.join(p.models) or 'none'}" for p in self.providers)
            raise WorkbenchError(
                "WB_MODEL_UNKNOWN",
                f"no provider of the gateway lists model {model!r} ({listed})",
                f"add {model!r} to the models=[...] of the provider that serves it",
            )
        return routed

    def estimate(self, request: ModelRequest) -> int:
        """The raw token estimate of `request` as the first provider would send it."""
        return estimate_tokens(dumps(self.route(request.model)[0].body(request)))

    def worst_case_micros(self, spec: ModelSpec, input_tokens: int, max_tokens: int, cached: bool) -> int:
        as_input = cost_with(spec, Usage(input_tokens=input_tokens, output_tokens=max_tokens))
        if not cached:
            return as_input
        as_write = cost_with(spec, Usage(cache_write_tokens=input_tokens, output_tokens=max_tokens))
        return max(as_input, as_write)

    # -- the call
    def _prepare(self, request: ModelRequest, input_scale: float):
        """Routing, the model's row applied, the bodies, and the worst case to reserve."""
        spec = self.registry.get(request.model)
        providers = self.route(request.model)
        request, withheld = fitted(request, spec, providers[0])
        if withheld:
            event(semconv.EVENT_GATEWAY_WITHHELD, model=request.model, params=withheld)
        bodies: dict[type, bytes] = {}

        def content(provider: Provider) -> bytes:
            kind = type(provider)
            if kind not in bodies:
                bodies[kind] = dumps(provider.body(request))
            return bodies[kind]

        raw = estimate_tokens(content(providers[0]))
        if request.cache and raw < (spec.cache_min_tokens or 0) and any(p.rule(request).marks != "none" for p in providers):
            # below the model's minimum nothing is cached: a mark would only move the bytes
            request = dataclasses.replace(request, cache=False)
            bodies.clear()
            raw = estimate_tokens(content(providers[0]))
        worst_input = max(raw, int(raw * input_scale) + 1)
        cached = request.cache and any(p.rule(request).marks != "none" for p in providers)
        micros = self.worst_case_micros(spec, worst_input, request.max_tokens, cached)
        return spec, providers, request, content, raw, worst_input, micros

    async def complete(self, request: ModelRequest, *, input_scale: float = 1.0) -> Completion:
        """One logical model call: the response cache, budget reservation, routing, retries, fallback."""
        count("max_tokens", request.max_tokens)
        spec, providers, request, content, raw, worst_input, micros = self._prepare(request, input_scale)
        key = self.cache.key(providers[0].wire, content(providers[0]), request.prompt_hash) if self.cache else None
        hit = self.cache.get(key) if self.cache else None
        if hit is not None:
            record_hit(hit, request.model)
            return hit
        reservation = reserve(worst_input + request.max_tokens, micros, f"the call to {request.model}", self.budget,
                              input_tokens=worst_input, currency=spec.currency)
        try:
            completion = await self._complete(request, providers, content, raw)
        except BaseException:
            reservation.release()
            raise
        self._settle(reservation, completion, spec, worst_input)
        if self.cache is not None:
            self.cache.put(key, completion)
        return completion

    def _settle(self, reservation: Reservation, completion: Completion, spec: ModelSpec, input_tokens: int) -> None:
        usage = completion.usage
        if completion.call.settled:
            reservation.settle(usage.total_input + usage.output_tokens, completion.cost_micros or 0)
            return
        # answered without usage: the ledger is charged an estimate, never zero (the bill counts
        # the call unsettled); output is the answer's text and every tool call, 4 bytes a token
        written = (completion.text or "") + (completion.refusal or "") + "".join(
            use.name + use.arguments for use in completion.tool_uses)
        output = max(1, math.ceil(len(written.encode("utf-8")) / 4))
        estimate = Usage(input_tokens=input_tokens, output_tokens=output)
        reservation.settle(input_tokens + output, cost_with(spec, estimate))

    async def stream(self, request: ModelRequest) -> AsyncIterator[str | Completion]:
        """One streamed call: its text as it arrives, then the `Completion`. Reserved before it is
        sent, settled at its end; a stream left early is cut (never drained) and releases its
        reservation. One provider, no retry once a byte was read: a retried stream would repeat
        text the caller already has."""
        count("max_tokens", request.max_tokens)
        request = dataclasses.replace(request, stream=True)
        spec, providers, request, content, raw, worst_input, micros = self._prepare(request, 1.0)
        reservation = reserve(worst_input + request.max_tokens, micros, f"the call to {request.model}", self.budget,
                              input_tokens=worst_input, currency=spec.currency)
        provider = providers[0]
        body = content(provider)
        settled = False
        try:
            try:
                async with provider.send_stream(body, request) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        if provider.is_context_overflow(response.status_code, response.content):
                            raise ContextOverflowError(provider.name, request.model, _message(response))
                        raise WorkbenchError(
                            "WB_PROVIDER_ERROR",
                            f"the streamed call to {request.model} failed ({provider.name}: HTTP "
                            f"{response.status_code} {_message(response)})",
                            "check the provider's status and your key, or call llm() without streaming (it retries)",
                        )
                    received, pending = bytearray(), ""
                    async for chunk in response.aiter_bytes():
                        received += chunk
                        pending += chunk.decode("utf-8", "replace")
                        cut = pending.rfind("\n\n")
                        if cut < 0:
                            continue
                        ready, pending = pending[: cut + 2], pending[cut + 2:]
                        for item in parse_events(ready):
                            text = provider.text_delta(item)
                            if text:
                                yield text
                    completion = provider.completion(body, response, self.registry, raw, bytes(received))
            except httpx2.TransportError as exc:
                raise WorkbenchError(
                    "WB_PROVIDER_ERROR", f"the streamed call to {request.model} was cut ({type(exc).__name__}: {exc})",
                    "call it again, or call llm() without streaming (it retries)",
                ) from exc
            self._settle(reservation, completion, spec, worst_input)
            settled = True
            yield completion
        finally:
            if not settled:
                reservation.release()

    async def _complete(self, request, providers, content, raw) -> Completion:
        failures: list[_Failure] = []
        for index, provider in enumerate(providers):
            if index:
                event(semconv.EVENT_GATEWAY_FALLBACK, model=request.model, from_provider=providers[index - 1].name,
                      to_provider=provider.name, reason=failures[-1].detail[:200])
            outcome = await self._attempts(provider, content(provider), request, raw)
            if isinstance(outcome, Completion):
                return outcome
            failures.append(outcome)
            if not outcome.fallback:
                break
        last = failures[-1]
        tried = "; ".join(f"{f.provider}: {f.detail}" for f in failures)
        raise WorkbenchError(
            "WB_PROVIDER_ERROR",
            f"the call to {request.model} failed ({tried})",
            "check the provider's status and your key; transient errors were retried"
            if last.retryable else "correct the request the provider refused (see the message above)",
        )

    async def _attempts(self, provider: Provider, body: bytes, request: ModelRequest, raw: int) -> Completion | _Failure:
        policy, model = self.retry, request.model
        attempt = 0
        while True:
            outcome = await self._attempt(provider, body, request, raw)
            if isinstance(outcome, Completion):
                outcome.attempts = attempt + 1
                return outcome
            failure, retry_after = outcome
            if not failure.retryable or attempt >= policy.max_retries:
                if failure.retryable:
                    failure.detail += f" after {attempt + 1} attempts"
                return failure
            delay = policy.delay(attempt, retry_after)
            event(semconv.EVENT_GATEWAY_RETRY, model=model, provider=provider.name, attempt=attempt + 1,
                  status=failure.status, delay_s=round(delay, 3))
            await policy.sleep(delay)
            attempt += 1

    async def _attempt(self, provider: Provider, body: bytes, request: ModelRequest,
                       raw: int) -> Completion | tuple[_Failure, float | None]:
        model = request.model
        try:
            response = await provider.send(body, request)
        except httpx2.TransportError as exc:
            return _Failure(provider.name, None, f"{type(exc).__name__}: {exc}", True, True), None
        status = response.status_code
        if status < 400:
            completion = provider.completion(body, response, self.registry, raw)
            call = completion.call
            if call.settled or not call.error_type:
                return completion
            # an answer that is no answer: unreadable, or an error inside a 200 (some hosts do that)
            detail = f"HTTP {status} with {call.error_type}: {(call.error_message or '')[:200]}"
            return _Failure(provider.name, status, detail, True, True), None
        if provider.is_context_overflow(status, response.content):
            raise ContextOverflowError(provider.name, model, _message(response))
        retryable = status in RETRY_STATUSES or status >= 500
        failure = _Failure(provider.name, status, f"HTTP {status} {_message(response)}", retryable,
                           retryable or status in FALLBACK_STATUSES)
        return failure, retry_after_of(response.headers)

    async def release_loop(self) -> None:
        for provider in self.providers:
            await provider.release_loop()


def _message(response: httpx2.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return f"{error.get('type') or error.get('code') or 'error'}: {error.get('message') or ''}"[:300]
    return str(data)[:300]
