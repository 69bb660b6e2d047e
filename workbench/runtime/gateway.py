"""The gateway: resolves a model, routes it to the first provider that lists it, retries what is
worth retrying and falls back to another provider of the SAME model (never another model).

Retried, with full jitter (a uniform delay in [0, min(max, base * 2**attempt)]): 408, 409, 425, 429,
every 5xx (529 included) and transport errors. Never retried: any other 4xx. A `retry-after` (or
`retry-after-ms`) header up to `retry_after_max_s` is honoured as given; a longer one falls back to
the jittered delay, as the official SDKs do. When a provider's retries are spent (or it refuses the
key or the model: 401, 403, 404), the next provider listing the model is tried; the provider that
answered is on the `Completion` and a `gateway.fallback` event marks each switch."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from datetime import datetime, timezone
from typing import Awaitable, Callable, Sequence

import httpx2

from workbench.capture import event, recorder, semconv
from workbench.errors import WorkbenchError
from workbench.models import ModelRegistry, ModelSpec, Usage, price_with
from workbench.runtime.budget import Budget, reserve
from workbench.runtime.messages import Completion, ModelRequest
from workbench.runtime.prompt import PromptLike
from workbench.runtime.providers import AnthropicProvider, Provider, dumps, estimate_tokens

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
            "WB_PROVIDER_ERROR",
            f"{provider} refused the request to {model} as too long for its context window: {message}",
            "shorten the input, or run it as an Agent, which compacts older turns",
        )
        self.provider, self.model = provider, model


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
    ) -> None:
        if not providers:
            raise ValueError("a Gateway needs at least one provider")
        self.providers = list(providers)
        self.default_model = default_model
        self.budget = budget
        self.retry = retry or RetryPolicy()
        self._registry = registry

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
        as_input = price_with(spec, Usage(input_tokens=input_tokens, output_tokens=max_tokens)).cost_micros
        if not cached:
            return as_input
        as_write = price_with(spec, Usage(cache_write_tokens=input_tokens, output_tokens=max_tokens)).cost_micros
        return max(as_input, as_write)

    # -- the call
    async def complete(self, request: ModelRequest, *, input_scale: float = 1.0) -> Completion:
        """One logical model call: budget reservation, routing, retries, fallback."""
        spec = self.registry.get(request.model)
        providers = self.route(request.model)
        bodies: dict[type, bytes] = {}

        def content(provider: Provider) -> bytes:
            kind = type(provider)
            if kind not in bodies:
                bodies[kind] = dumps(provider.body(request))
            return bodies[kind]

        raw = estimate_tokens(content(providers[0]))
        worst_input = max(raw, int(raw * input_scale) + 1)
        cached = request.cache and any(isinstance(p, AnthropicProvider) for p in providers)
        micros = self.worst_case_micros(spec, worst_input, request.max_tokens, cached)
        reservation = reserve(worst_input + request.max_tokens, micros, f"the call to {request.model}", self.budget)
        try:
            completion = await self._complete(request, providers, content, raw)
        except BaseException:
            reservation.release()
            raise
        usage = completion.usage
        reservation.settle(usage.total_input + usage.output_tokens, completion.cost_micros or 0)
        return completion

    async def _complete(self, request, providers, content, raw) -> Completion:
        failures: list[_Failure] = []
        for index, provider in enumerate(providers):
            if index:
                event(semconv.EVENT_GATEWAY_FALLBACK, model=request.model, from_provider=providers[index - 1].name,
                      to_provider=provider.name, reason=failures[-1].detail[:200])
            outcome = await self._attempts(provider, content(provider), request.model, raw)
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

    async def _attempts(self, provider: Provider, body: bytes, model: str, raw: int) -> Completion | _Failure:
        policy = self.retry
        attempt = 0
        while True:
            outcome = await self._attempt(provider, body, model, raw)
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

    async def _attempt(self, provider: Provider, body: bytes, model: str,
                       raw: int) -> Completion | tuple[_Failure, float | None]:
        try:
            response = await provider.send(body)
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
