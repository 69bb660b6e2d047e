"""Tools are plain Python functions. Their input schema comes from the type hints: either one
parameter annotated with a pydantic model, or ordinary parameters (a model is built from them).
The docstring is the description. Async functions are awaited; sync ones run in a worker thread,
so the tools of one turn run concurrently (a sync tool cannot be interrupted by a deadline)."""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ValidationError, create_model

from workbench.runtime.messages import ToolResult, ToolSpec, ToolUse


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_model: type[BaseModel]
    function: Callable[..., Any]
    takes_model: bool  # the function takes the model itself, not its fields

    @classmethod
    def from_function(cls, function: Callable[..., Any], name: str | None = None,
                      description: str | None = None) -> Tool:
        try:
            hints = typing.get_type_hints(function)
        except NameError as exc:
            raise TypeError(
                f"tool {function.__name__!r}: cannot resolve its type hints ({exc}); define the input "
                "types at module level"
            ) from exc
        parameters = [p for p in inspect.signature(function).parameters.values()
                      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        name = name or function.__name__
        if len(parameters) == 1 and _is_model(hints.get(parameters[0].name)):
            model, takes_model = hints[parameters[0].name], True
        else:
            fields = {
                p.name: (hints.get(p.name, Any), ... if p.default is p.empty else p.default) for p in parameters
            }
            model, takes_model = create_model(f"{name}_input", **fields), False
        text = description or inspect.getdoc(function) or name
        return cls(name, text, model, function, takes_model)

    @property
    def spec(self) -> ToolSpec:
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(self.name, self.description, schema)

    async def __call__(self, use: ToolUse, max_chars: int) -> ToolResult:
        """Run one call; any failure becomes an error result the model reads, never a crash."""
        try:
            value = self.input_model.model_validate_json(use.arguments or "{}")
        except ValidationError as exc:
            return ToolResult(use.id, use.name, f"invalid arguments for {self.name}: {_errors(exc)}", True)
        args = (value,) if self.takes_model else ()
        kwargs = {} if self.takes_model else {key: getattr(value, key) for key in type(value).model_fields}
        try:
            if inspect.iscoroutinefunction(self.function):
                result = await self.function(*args, **kwargs)
            else:
                result = await asyncio.to_thread(self.function, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the model reads the error and may recover
            return ToolResult(use.id, use.name, truncate(f"{type(exc).__name__}: {exc}", max_chars), True)
        return ToolResult(use.id, use.name, truncate(_text(result), max_chars))


def as_tool(tool: Tool | Callable[..., Any]) -> Tool:
    return tool if isinstance(tool, Tool) else Tool.from_function(tool)


def tool(function: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None):
    """`@tool` or `@tool(name=..., description=...)`: a function as a `Tool` with another name or text."""
    if function is None:
        return lambda fn: Tool.from_function(fn, name, description)
    return Tool.from_function(function, name, description)


def truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n[truncated: showing the first {max_chars} of {len(text)} characters]"


def _is_model(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, BaseModel)


def _text(result: Any) -> str:
    if result is None:
        return "(no output)"
    if isinstance(result, str):
        return result or "(empty)"
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return json.dumps(result, default=str, ensure_ascii=False)


def _errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(input)'}: {error['msg']}" for error in exc.errors()
    )[:1000]
