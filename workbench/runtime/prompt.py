"""What the runtime needs from a prompt, and the plain-string form.

Any object with `id`, `version`, `hash`, `model`, `system` and `render(vars) -> str` is a prompt
(the evals layer's `define_prompt` makes such objects; the runtime never imports it). `system` is
the STABLE part of the system prompt: it is the cached prefix, so it must be the same bytes on every
run. What changes per run (today's date, the user's name) goes in `system_dynamic`, passed to
`llm()` or `Agent.run()`, which is placed after it and never cache-marked."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, runtime_checkable

from pydantic import SecretBytes, SecretStr

from workbench.errors import WorkbenchError

try:  # pydantic 2.7+: the generic Secret[...]
    from pydantic import Secret as _Secret
except ImportError:  # pragma: no cover - older pydantic
    _Secret = SecretStr
_SECRET_TYPES = (SecretStr, SecretBytes, _Secret)


@runtime_checkable
class PromptLike(Protocol):
    id: str
    version: str
    hash: str
    model: str | None
    system: str

    def render(self, vars: Mapping[str, Any]) -> str: ...


SLOT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_TAG = r"[A-Za-z][\w.-]*"
_OPENER = re.compile(rf"<({_TAG})(?:\s[^<>]*)?(?<!/)>")
_CLOSER = re.compile(rf"</\s*({_TAG})\s*>")


@functools.lru_cache(maxsize=256)  # a prompt renders its one template for every case: read only
def fences(template: str) -> dict[str, list[tuple[int, int]]]:
    """The fences a template draws: per tag name (lower-cased), the spans between each opener and
    the next closer of that name. Read per name, never as a stack, so a tag opened in prose and
    never closed fences nothing and cannot unbalance a real fence. The same dict for the same
    template: never changed by its readers."""
    closers: dict[str, list[re.Match]] = {}
    for match in _CLOSER.finditer(template):
        closers.setdefault(match.group(1).lower(), []).append(match)
    spans: dict[str, list[tuple[int, int]]] = {}
    for opener in _OPENER.finditer(template):
        name = opener.group(1).lower()
        after = next((closer for closer in closers.get(name, ()) if closer.start() >= opener.end()), None)
        if after is not None:
            spans.setdefault(name, []).append((opener.end(), after.start()))
    return spans


def prompt_fences(template: str) -> dict[str, list[str]]:
    """Per slot, the tags fencing EVERY occurrence of it (one bare occurrence: []), so a test can
    assert that each user-authored slot is fenced."""
    drawn = fences(template)
    out: dict[str, list[str]] = {}
    for match in SLOT.finditer(template):
        around = {name for name, spans in drawn.items() if any(a <= match.start() and match.end() <= b for a, b in spans)}
        name = match.group(1)
        out[name] = sorted(around if name not in out else set(out[name]) & around)
    return out


# one encoder, not one a call (`json.dumps` with options builds its encoder each time); stateless
_VARS_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)


def vars_json(variables: Mapping[str, Any]) -> str:
    """The variables as a run's `vars` tag: `json.dumps(variables, sort_keys=True, ensure_ascii=False,
    default=str)`, so captured traffic can become eval cases (`workbench eval cases-from-runs`)."""
    return _VARS_ENCODER.encode(variables)


def screen_secrets(variables: Mapping[str, Any], where: str) -> None:
    """A secret-typed value (pydantic's SecretStr, SecretBytes, Secret[...]) among the variables
    is refused: it would render as `**********`, a prompt that reads fine and means something else."""
    stack = [(name, value) for name, value in variables.items()]
    while stack:
        name, value = stack.pop()
        if isinstance(value, _SECRET_TYPES):
            raise WorkbenchError(
                "WB_PROMPT_SECRET",
                f"{where}: the variable {name!r} is a {type(value).__name__}, a secret, which would render "
                "masked into the prompt",
                f"drop {name!r} from the variables and the template, or pass the revealed value "
                "(value.get_secret_value()) if the model really has to read it",
            )
        if isinstance(value, Mapping):
            stack += [(f"{name}.{key}", item) for key, item in value.items()]
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack += [(f"{name}[{index}]", item) for index, item in enumerate(value)]


def render_text(text: str, variables: Mapping[str, Any], where: str) -> str:
    """`text` with its `{{slots}}` filled. No value can close a fence the template draws around a
    slot: every closer of a fence tag in the assembled text that a fenced value wrote ANY part of —
    any case, any whitespace, attributes, self-closing, split across two slots, or completed by the
    template text beside it — has its `<` escaped (`&lt;`), never dropped; a closer the template
    wrote alone stands."""
    missing = sorted({name for name in SLOT.findall(text) if name not in variables})
    if missing:
        raise WorkbenchError(
            "WB_PROMPT_RENDER",
            f"{where}: no value for {', '.join('{{' + name + '}}' for name in missing)}"
            f" (given: {', '.join(sorted(variables)) or 'nothing'})",
            f"pass {', '.join(missing)} in the case's vars, or remove the slot from the template",
        )
    screen_secrets(variables, where)
    drawn = fences(text)
    pieces: list[str] = []
    fenced_by: list[tuple[int, int]] = []  # spans of the output a fenced value wrote
    position, length = 0, 0
    for match in SLOT.finditer(text):
        pieces.append(text[position:match.start()])
        length += match.start() - position
        value = variables[match.group(1)]
        value = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        pieces.append(value)
        if any(a <= match.start() and match.end() <= b for spans in drawn.values() for a, b in spans):
            fenced_by.append((length, length + len(value)))
        length += len(value)
        position = match.end()
    pieces.append(text[position:])
    out = "".join(pieces)
    if not fenced_by:
        return out
    names = "|".join(re.escape(name) for name in sorted(drawn, key=len, reverse=True))
    closer = re.compile(rf"<\s*/\s*(?:{names})(?![\w.-])[^<>]*>?", re.IGNORECASE)
    broken = [match.start() for match in closer.finditer(out)
              if any(a < match.end() and match.start() < b for a, b in fenced_by)]
    for start in reversed(broken):
        out = out[:start] + "&lt;" + out[start + 1:]
    return out


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
