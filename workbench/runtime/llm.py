"""`llm()`: one prompt, one answer. Structured output goes through ONE tool named `respond` whose
input schema is the output model's; the model is made to call it. A wrong shape gets one repair
turn (the validation errors as the tool's error result), then `WB_LLM_OUTPUT_INVALID`. A turn that
hit its token ceiling is `WB_LLM_TRUNCATED` (checked before validating: a cut answer is never
"repaired"); a refusal is `WB_LLM_REFUSED`."""

from __future__ import annotations

import functools
import json
from typing import Any, Mapping

from pydantic import BaseModel, ValidationError

from workbench.capture import run
from workbench.errors import WorkbenchError
from workbench.runtime._sync import run_sync
from workbench.runtime.budget import Budget, budget_scope
from workbench.runtime.gateway import Gateway
from workbench.runtime.messages import (
    AssistantMessage, Completion, ModelRequest, ToolResult, ToolResults, ToolSpec, UserMessage,
)
from workbench.runtime.prompt import PromptLike, as_prompt, prompt_tags

RESPOND = "respond"
DEFAULT_MAX_TOKENS = 4096


@functools.lru_cache(maxsize=256)  # a model's JSON schema is rebuilt on every call otherwise
def respond_tool(output: type[BaseModel]) -> ToolSpec:
    schema = output.model_json_schema()
    schema.pop("title", None)
    return ToolSpec(RESPOND, f"Give your final answer as a {output.__name__}, by calling this tool once.", schema)


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
    if not uses:
        return None, f"you did not call the {RESPOND} tool; call it with your answer"
    return validate_arguments(output, uses[0].arguments)


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


def check_turn(completion: Completion, model: str, where: str, max_tokens: int) -> None:
    """Refusal, then truncation: both end the call before any validation."""
    if completion.stop == "refusal":
        raise WorkbenchError(
            "WB_LLM_REFUSED",
            f"{model} refused {where}: {(completion.refusal or completion.text or completion.stop_reason or '')[:300]!r}",
            "rephrase the prompt or the input, or handle the refusal as an outcome",
        )
    if completion.stop == "length":
        raise WorkbenchError(
            "WB_LLM_TRUNCATED",
            f"{model} stopped at its output ceiling of {max_tokens} tokens {where} "
            f"(stop reason {completion.stop_reason!r}); the answer is incomplete",
            "raise max_tokens, or ask for a shorter answer",
        )


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
    budget: Budget | None = None,
    prompt_cache: bool | str = "auto",
) -> Any:
    """One model call under a run of kind `llm`: the text, or an instance of `output`."""
    prompt = as_prompt(prompt)
    name = getattr(prompt, "id", None) or "llm"
    # the variables as a run tag, so captured traffic can become eval cases (`workbench eval
    # cases-from-runs`); tags are not size-capped like bodies, so over 64 KB they are left out
    encoded = json.dumps(dict(vars or {}), sort_keys=True, ensure_ascii=False, default=str)
    tags = {"vars": encoded} if len(encoded) <= 65536 else {}
    async with run(name, kind="llm", prompt=prompt_tags(prompt), **tags):
        with budget_scope(budget if budget is not None else gateway.budget, name):
            model_name, spec = gateway.resolve(model, prompt)
            ceiling = min(max_tokens or DEFAULT_MAX_TOKENS, spec.max_output)
            request = ModelRequest(
                model=model_name, system=prompt.system or "", system_dynamic=system_dynamic,
                messages=[UserMessage((prompt.render(vars or {}),))],
                tools=[respond_tool(output)] if output is not None else [],
                tool_choice=RESPOND if output is not None else None,
                max_tokens=ceiling, temperature=temperature, cache=prompt_cache not in (False, None, "off"),
            )
            completion = await gateway.complete(request)
            check_turn(completion, model_name, "the call", ceiling)
            if output is None:
                return completion.text or ""
            value, problem = validate(output, completion)
            if value is not None:
                return value
            request.messages = [*request.messages, *repair_messages(completion, problem)]
            completion = await gateway.complete(request)
            check_turn(completion, model_name, "the repair turn", ceiling)
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
