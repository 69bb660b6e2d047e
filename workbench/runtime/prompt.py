"""What the runtime needs from a prompt, and the plain-string form.

Any object with `id`, `version`, `hash`, `model`, `system` and `render(vars) -> str` is a prompt
(the evals layer's `define_prompt` makes such objects; the runtime never imports it). `system` is
the STABLE part of the system prompt: it is the cached prefix, so it must be the same bytes on every
run. What changes per run (today's date, the user's name) goes in `system_dynamic`, passed to
`llm()` or `Agent.run()`, which is placed after it and never cache-marked."""

from __future__ import annotations

import json
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


SLOT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_TAG_AROUND = r"<({tag})(?:\s[^>]*)?>\s*\{{\{{\s*{name}\s*\}}\}}\s*</\1>"


def render_text(text: str, variables: dict[str, Any], where: str) -> str:
    missing = sorted({name for name in SLOT.findall(text) if name not in variables})
    if missing:
        raise WorkbenchError(
            "WB_PROMPT_RENDER",
            f"{where}: no value for {', '.join('{{' + name + '}}' for name in missing)}"
            f" (given: {', '.join(sorted(variables)) or 'nothing'})",
            f"pass {', '.join(missing)} in the case's vars, or remove the slot from the template",
        )
    enclosing = {
        name: [match.group(1) for match in re.finditer(_TAG_AROUND.format(tag=r"[A-Za-z][\w.-]*", name=name), text)]
        for name in set(SLOT.findall(text))
    }

    def value_of(match: re.Match) -> str:
        name = match.group(1)
        value = variables[name]
        value = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        for tag in enclosing.get(name, []):
            value = re.sub(rf"</(\s*{re.escape(tag)}\s*)>", r"&lt;/\1>", value, flags=re.IGNORECASE)
        return value

    return SLOT.sub(value_of, text)



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
        return render_text(self.template, vars, f"the prompt {self.template[:60]!r}")


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
