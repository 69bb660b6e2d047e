"""`llm()`: one prompt, one answer. Structured output goes through ONE tool named `respond` whose
input schema is the output model's; the model is made to call it (unless its registry row says it
refuses a forced tool choice: then the tool is offered under the endpoint's default). A prose answer
holding a fenced JSON block (or JSON alone) is read as the answer too. A wrong shape gets one repair
turn (the validation errors as the tool's error result), then `WB_LLM_OUTPUT_INVALID`. A turn that
hit its token ceiling is `WB_LLM_TRUNCATED` (checked before validating: a cut answer is never
"repaired"); a refusal is `WB_LLM_REFUSED`, whose fix names the next more capable registered model.

Prompt caching is OFF by default here (`prompt_cache="auto"` opts in): a one-shot call that marks
its prefix pays the cache-write premium for a cache nothing reads. `on_call` sees every provider
call (attempt 2 is the repair turn)."""

from __future__ import annotations

import functools
import inspect
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from opentelemetry import trace
from pydantic import BaseModel, ValidationError

from workbench.capture import Billed, run, semconv
from workbench.errors import WorkbenchError
from workbench.models import Usage
from workbench.runtime._sync import run_sync
from workbench.runtime.budget import Budget, budget_scope
from workbench.runtime.caching import prompt_cache_of
from workbench.runtime.gateway import Gateway
from workbench.runtime.messages import (
    AssistantMessage, Completion, Document, Image, ModelRequest, ToolResult, ToolResults, ToolSpec, UserMessage,
)
from workbench.runtime.options import count, model_options
from workbench.runtime.prompt import PromptLike, as_prompt, prompt_tags, screen_secrets, vars_json
from workbench.runtime.response_cache import acting_for

RESPOND = "respond"
DEFAULT_MAX_TOKENS = 4096
_FENCED = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)\n?```", re.DOTALL)


@dataclass(frozen=True)
class CallInfo:
    """One provider call of an `llm()`, as `on_call` receives it."""

    attempt: int  # 1, or 2 for the repair turn
    model: str
    provider: str
    stop_reason: str | None
    usage: Usage
    cost_micros: int | None
    repair_of: str | None  # on the repair turn: what the model was told to fix
    run: Billed  # the llm() run so far, this call included


@functools.lru_cache(maxsize=256)  # a model's JSON schema is rebuilt on every call otherwise
def respond_tool(output: type[BaseModel]) -> ToolSpec:
    schema = output.model_json_schema()
    schema.pop("title", None)
    return ToolSpec(RESPOND, f"Give your final answer as a {output.__name__}, by calling this tool once.", schema)


def json_in_text(text: str | None) -> str | None:
    """The JSON a prose answer holds: a fenced block (```json ... ```), else the whole text when it
    is JSON; None otherwise."""
    if not text:
        return None
    for candidate in [*(match.group(1) for match in _FENCED.finditer(text)), text.strip()]:
        try:
            json.loads(candidate)
        except ValueError:
            continue
        return candidate
    return None


def validate_arguments(output: type[BaseModel], arguments: str) -> tuple[BaseModel | None, str]:
    """The validated answer, or None and what was wrong with it (as the model will read it)."""
    try:
        return output.model_validate_json(arguments or "{}"), ""
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(input)'}: {error['msg']}" for error in exc.errors()
        )
        return None, f"the {RESPOND} input does not match the schema: {problems[:1500]}"


def validate(output: type[BaseModel], completion: Completion) -> tuple[BaseModel | None, str]:
    uses = [use for use in completion.tool_uses if use.name == RESPOND]
    if uses:
        return validate_arguments(output, uses[0].arguments)
    found = json_in_text(completion.text)
    if found is not None:
        return validate_arguments(output, found)
    return None, f"you did not call the {RESPOND} tool; call it with your answer"


def repair_messages(completion: Completion, problem: str) -> list:
    """The assistant turn as given plus what the model must read to correct it."""
    assistant = AssistantMessage(completion.text, tuple(completion.tool_uses))
    if not completion.tool_uses:
        return [assistant, UserMessage((problem,))]
    results = tuple(
        ToolResult(use.id, use.name, problem if use.name == RESPOND else f"only {RESPOND} is available", True)
        for use in completion.tool_uses
    )
    return [assistant, ToolResults(results)]


def check_turn(completion: Completion, model: str, where: str, max_tokens: int, gateway: Gateway) -> None:
    """Refusal, then truncation: both end the call before any validation."""
    if completion.stop == "refusal":
        better = gateway.registry.more_capable_than(model)
        raise WorkbenchError(
            "WB_LLM_REFUSED",
            f"{model} refused {where}: {(completion.refusal or completion.text or completion.stop_reason or '')[:300]!r}",
            (f"run it on {better.id}, the next more capable model of its family (model={better.id!r}), or "
             if better is not None else "") + "rephrase the prompt or the input, or handle the refusal as an outcome",
        )
    if completion.stop == "length":
        raise WorkbenchError(
            "WB_LLM_TRUNCATED",
            f"{model} stopped at its output ceiling of {max_tokens} tokens {where} "
            f"(stop reason {completion.stop_reason!r}); the answer is incomplete",
            "raise max_tokens, or ask for a shorter answer",
        )


def redacted(gateway: Gateway, text: str) -> str:
    """`text` through the gateway's redactor (the one seam before a provider); that it changed
    something is marked on the current run's span."""
    if gateway.redact is None or not text:
        return text
    out = gateway.redact(text)
    if out != text:
        trace.get_current_span().set_attribute(semconv.REDACTED, True)
    return out


async def call_hook(function: Callable[[Any], Any] | None, value: Any) -> None:
    """An observer hook, awaited; a throw fails the run (an observer that stopped silently reads
    exactly like one that works)."""
    if function is not None:
        result = function(value)
        if inspect.isawaitable(result):
            await result


async def llm_async(
    gateway: Gateway,
    prompt: PromptLike | str,
    vars: Mapping[str, Any] | None = None,
    output: type[BaseModel] | None = None,
    model: str | None = None,
    *,
    system_dynamic: str = "",
    max_tokens: int | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    effort: str | None = None,
    thinking: bool | None = None,
    budget: Budget | None = None,
    prompt_cache: bool | str | dict = "off",
    attachments: Sequence[Image | Document] = (),
    actor: str | None = None,
    on_call: Callable[[CallInfo], Any] | None = None,
) -> Any:
    """One model call under a run of kind `llm`: the text, or an instance of `output`."""
    count("max_tokens", max_tokens, optional=True)
    knobs = model_options(temperature, seed, effort, thinking)
    cache, session = prompt_cache_of(prompt_cache)
    prompt = as_prompt(prompt)
    screen_secrets(vars or {}, f"the variables of {getattr(prompt, 'id', None) or 'llm()'}")
    name = getattr(prompt, "id", None) or "llm"
    # the variables as a run tag, so captured traffic can become eval cases (`workbench eval
    # cases-from-runs`); tags are not size-capped like bodies, so over 64 KB they are left out
    encoded = vars_json(dict(vars or {}))
    tags = {"vars": encoded} if len(encoded) <= 65536 else {}
    async with run(name, kind="llm", prompt=prompt_tags(prompt), **tags) as current:
        with budget_scope(budget if budget is not None else gateway.budget, name), acting_for(actor):
            model_name, spec = gateway.resolve(model, prompt)
            ceiling = min(max_tokens or DEFAULT_MAX_TOKENS, spec.max_output)
            forced = output is not None and spec.forced_tool_choice
            request = ModelRequest(
                model=model_name, system=redacted(gateway, prompt.system or ""),
                system_dynamic=redacted(gateway, system_dynamic),
                messages=[UserMessage((redacted(gateway, prompt.render(vars or {})), *attachments))],
                tools=[respond_tool(output)] if output is not None else [],
                tool_choice=RESPOND if forced else None, max_tokens=ceiling, cache=cache, session=session,
                prompt_hash=getattr(prompt, "hash", None), **knobs,
            )

            async def call(attempt: int, repair_of: str | None) -> Completion:
                completion = await gateway.complete(request)
                # the hook's info holds the run's bill so far, a model built for it: only when it is read
                if on_call is not None and not completion.cached:
                    await call_hook(on_call, CallInfo(
                        attempt=attempt, model=completion.model, provider=completion.provider,
                        stop_reason=completion.stop_reason, usage=completion.usage,
                        cost_micros=completion.cost_micros, repair_of=repair_of, run=current.billed,
                    ))
                return completion

            completion = await call(1, None)
            check_turn(completion, model_name, "the call", ceiling, gateway)
            if output is None:
                return completion.text or ""
            value, problem = validate(output, completion)
            if value is not None:
                return value
            request.messages = [*request.messages, *repair_messages(completion, problem)]
            completion = await call(2, problem)
            check_turn(completion, model_name, "the repair turn", ceiling, gateway)
            value, second = validate(output, completion)
            if value is None:
                raise WorkbenchError(
                    "WB_LLM_OUTPUT_INVALID",
                    f"{model_name}'s answer did not validate as {output.__name__}, even after one repair turn: "
                    f"first {problem}; then {second}",
                    f"simplify {output.__name__} or say in the prompt what each field must hold",
                )
            return value


def llm(
    gateway: Gateway,
    prompt: PromptLike | str,
    vars: Mapping[str, Any] | None = None,
    output: type[BaseModel] | None = None,
    model: str | None = None,
    **options,
) -> Any:
    """The sync twin of `llm_async` (same arguments)."""
    return run_sync(lambda: llm_async(gateway, prompt, vars, output, model, **options), gateway)
