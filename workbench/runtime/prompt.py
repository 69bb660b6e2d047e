"""What the runtime needs from a prompt, and the plain-string form.

Any object with `id`, `version`, `hash`, `model`, `system` and `render(vars) -> str` is a prompt
(the evals layer's `define_prompt` makes such objects; the runtime never imports it). `system` is
the STABLE part of the system prompt: it is the cached prefix, so it must be the same bytes on every
run. What changes per run (today's date, the user's name) goes in `system_dynamic`, passed to
`llm()` or `Agent.run()`, which is placed after it and never cache-marked."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, runtime_checkable

from workbench.errors import WorkbenchError


@runtime_checkable
class PromptLike(Protocol):
    id: str
    version: str
    hash: str
    model: str | None
    system: str

    def render(self, vars: Mapping[str, Any]) -> str: ...


_SLOT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class TextPrompt:
    """A plain string used as a prompt: the user message template, `{{name}}` slots, no system
    prompt and no identity (its runs carry no prompt id)."""

    template: str
    system: str = ""
    model: str | None = None
    id: str | None = None
    version: str | None = None
    hash: str | None = None

    def render(self, vars: Mapping[str, Any]) -> str:
        missing = sorted({name for name in _SLOT.findall(self.template) if name not in vars})
        if missing:
            raise WorkbenchError(
                "WB_PROMPT_RENDER",
                f"the prompt {self.template[:60]!r} has slot(s) {', '.join(missing)} with no value",
                f"pass vars={{{', '.join(repr(name) + ': ...' for name in missing)}}}",
            )
        return _SLOT.sub(lambda match: str(vars[match.group(1)]), self.template)


def as_prompt(prompt: PromptLike | str) -> PromptLike:
    if isinstance(prompt, str):
        return TextPrompt(prompt)
    missing = [name for name in ("system", "render") if not hasattr(prompt, name)]
    if missing:
        raise TypeError(f"a prompt needs id, version, hash, model, system and render(); {prompt!r} lacks {missing}")
    return prompt


def prompt_tags(prompt: PromptLike) -> dict | None:
    """The run's prompt identity (`run(..., prompt=...)`), or None for an anonymous prompt."""
    prompt_id = getattr(prompt, "id", None)
    if not prompt_id:
        return None
    return {
        "prompt_id": prompt_id,
        "prompt_version": getattr(prompt, "version", None),
        "prompt_hash": getattr(prompt, "hash", None),
    }
