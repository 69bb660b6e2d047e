"""Versioned prompts: content-hashed over canonical JSON of every field, rendered with `{{name}}`
slots, and pinned by a committed lock file so a released version cannot change under its name."""

from __future__ import annotations

import json
import re
import threading
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workbench.errors import WorkbenchError
from workbench.runtime.prompt import SLOT, render_text
from workbench.wire.canonical import digest



class Prompt(BaseModel):
    """One version of a prompt. `system` is the stable part (the cached prefix); `template` is the
    user message with `{{name}}` slots; `output` an optional JSON schema of the structured answer."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    id: str = Field(min_length=1)
    version: str = Field(min_length=1)
    system: str = ""
    template: str
    output: dict[str, Any] | None = None
    model: str | None = None
    output_type: Any = Field(default=None, exclude=True)  # the pydantic model `output` came from

    @model_validator(mode="before")
    @classmethod
    def _schema_from_model(cls, data: dict) -> dict:
        output = data.get("output")
        if isinstance(output, type) and issubclass(output, BaseModel):
            data = {**data, "output": output.model_json_schema(), "output_type": output}
        return data

    @cached_property
    def hash(self) -> str:
        # computed once: the prompt is frozen, and every case, call and result carries it
        return digest(self.model_dump(mode="json", exclude={"output_type"}))

    @property
    def variables(self) -> list[str]:
        return sorted(set(SLOT.findall(self.template)) | set(SLOT.findall(self.system)))

    @property
    def ref(self) -> dict[str, str]:
        """What a run, a call and a result carry to name the prompt."""
        return {"prompt_id": self.id, "prompt_version": self.version, "prompt_hash": self.hash}

    def render(self, variables: dict[str, Any]) -> str:
        """The user message. A slot with no value is WB_PROMPT_RENDER; a value placed inside an
        XML-style tag pair cannot close it (its closing tag is escaped, never dropped)."""
        return render_text(self.template, variables, f"{self.id}@{self.version}")

    def render_system(self, variables: dict[str, Any] | None = None) -> str:
        return render_text(self.system, variables or {}, f"{self.id}@{self.version} system")


class PromptRegistry:
    def __init__(self) -> None:
        self._prompts: dict[tuple[str, str], Prompt] = {}
        self._lock = threading.Lock()

    def add(self, prompt: Prompt) -> Prompt:
        with self._lock:
            existing = self._prompts.get((prompt.id, prompt.version))
            if existing is not None and existing.hash != prompt.hash:
                raise WorkbenchError(
                    "WB_PROMPT_VERSION",
                    f"prompt {prompt.id} version {prompt.version} is defined twice with different content",
                    f"give one of them a new version, e.g. version={_next_version(prompt.version)!r}",
                )
            self._prompts[(prompt.id, prompt.version)] = prompt
        return prompt

    def get(self, prompt_id: str, version: str) -> Prompt:
        prompt = self._prompts.get((prompt_id, version))
        if prompt is None:
            known = ", ".join(sorted(v for (i, v) in self._prompts if i == prompt_id)) or "none"
            raise WorkbenchError(
                "WB_EVAL_SUITE_INVALID",
                f"prompt {prompt_id!r} has no version {version!r} (defined: {known})",
                f"define it with define_prompt({prompt_id!r}, {version!r}, ...) or pick a defined version",
            )
        return prompt

    def all(self) -> list[Prompt]:
        return sorted(self._prompts.values(), key=lambda prompt: (prompt.id, prompt.version))


prompts = PromptRegistry()


def define_prompt(
    id: str, version: str, system: str = "", template: str = "", output=None, model: str | None = None
) -> Prompt:
    """Declare one version of a prompt; old versions stay addressable by (id, version)."""
    return prompts.add(Prompt(id=id, version=version, system=system, template=template, output=output, model=model))


def _next_version(version: str) -> str:
    match = re.search(r"(\d+)$", version)
    return version[: match.start()] + str(int(match.group(1)) + 1) if match else version + "-2"


# --- the lock file ---------------------------------------------------------------------------------

LOCK_FORMAT = 1


def read_lock(path: Path) -> dict[str, dict[str, str]]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {pid: dict(versions) for pid, versions in data["prompts"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise WorkbenchError(
            "WB_EVAL_SUITE_INVALID", f"{path} is not a prompts lock file: {exc}", f"restore {path} from git"
        ) from exc


def check_lock(all_prompts: list[Prompt], path: Path) -> list[WorkbenchError]:
    """A moved hash of a released version, one error each."""
    lock = read_lock(path)
    errors = []
    for prompt in all_prompts:
        released = lock.get(prompt.id, {}).get(prompt.version)
        if released is not None and released != prompt.hash:
            errors.append(WorkbenchError(
                "WB_PROMPT_VERSION",
                f"prompt {prompt.id} version {prompt.version} changed since it was released "
                f"(locked {released[:16]}…, now {prompt.hash[:16]}…)",
                f"bump the version (e.g. version={_next_version(prompt.version)!r}) and keep the released one "
                f"as it was, then run `workbench prompts lock`",
            ))
    return errors


def write_lock(all_prompts: list[Prompt], path: Path) -> list[str]:
    """Add every version not yet in the lock (released hashes never change); returns what was added."""
    lock = read_lock(path)
    moved = check_lock(all_prompts, path)
    if moved:
        raise moved[0]
    added = []
    for prompt in all_prompts:
        versions = lock.setdefault(prompt.id, {})
        if prompt.version not in versions:
            versions[prompt.version] = prompt.hash
            added.append(f"{prompt.id}@{prompt.version}")
    body = {"format": LOCK_FORMAT, "prompts": {pid: dict(sorted(v.items())) for pid, v in sorted(lock.items())}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return added
