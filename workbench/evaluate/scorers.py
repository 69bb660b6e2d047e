"""Scorers: each receives one context (the case, the output, the calls the case made) and returns a
`Score`. A bool is an assertion (pass/fail, gated as 1 or 0), a number in [0, 1] is a score gated on
its drop, a label (str) is reported and never gated."""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from workbench.errors import WorkbenchError


@dataclass
class ScoreContext:
    case_id: str
    vars: dict[str, Any]
    output: Any
    expected: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    calls: list = field(default_factory=list)  # the normalized calls the case made
    judge: Any = None  # the suite's judge runner, for llm_judge


@dataclass(frozen=True, slots=True)  # slotted: a large suite holds one per scorer and sample to the end
class Score:
    """A score is checked where it is made: a value that is not a number in [0, 1] (NaN, 5, "high")
    is WB_EVAL_SCORE_INVALID, so no gate ever averages it; frozen, so it stays checked."""

    value: float | None  # None: a label, reported only
    explanation: str = ""
    label: str | None = None
    assertion: bool = False

    def __post_init__(self) -> None:
        if self.value is None:
            return
        number = isinstance(self.value, (int, float)) and math.isfinite(self.value)
        if not number or not 0 <= self.value <= 1:
            raise WorkbenchError(
                "WB_EVAL_SCORE_INVALID", f"a score of {self.value!r} is not a number in [0, 1]",
                "make the scorer (or the judge's prompt) give a number between 0 and 1, a bool, or a label string",
            )
        object.__setattr__(self, "value", float(self.value))


def as_text(output: Any) -> str:
    """An output as text for scoring and reports: strings as they are, models and data as JSON."""
    if isinstance(output, str):
        return output
    if hasattr(output, "model_dump_json"):
        return output.model_dump_json()
    return json.dumps(output, sort_keys=True, ensure_ascii=False, default=str)


def _as_data(output: Any) -> Any:
    if hasattr(output, "model_dump"):
        return output.model_dump(mode="json")
    if isinstance(output, str):
        return json.loads(output)
    return output


class Scorer:
    """A named scoring function over a `ScoreContext`."""

    def __init__(self, name: str, function: Callable[[ScoreContext], Any], prompt=None, inline: bool = False) -> None:
        self.name = name
        self.function = function
        self.prompt = prompt  # a judge's own prompt: named by the suite, checked like any other
        # the built-ins are pure and fast: the runner calls them on its loop, not through a thread
        self.inline = inline

    def __call__(self, context: ScoreContext) -> Score:
        return to_score(self.function(context), self.name)


def to_score(result: Any, name: str) -> Score:
    if isinstance(result, Score):
        return result
    if isinstance(result, bool):
        return Score(1.0 if result else 0.0, "pass" if result else "fail", assertion=True)
    if isinstance(result, (int, float)):
        if not (math.isfinite(result) and 0 <= result <= 1):
            raise WorkbenchError(
                "WB_EVAL_SCORE_INVALID", f"scorer {name} returned {result}, not a number in [0, 1]",
                f"make {name} return a score in [0, 1], a bool, or a label string",
            )
        return Score(float(result))
    if isinstance(result, str):
        return Score(None, label=result)
    if isinstance(result, tuple) and len(result) == 2:
        return replace(to_score(result[0], name), explanation=str(result[1]))
    raise WorkbenchError(
        "WB_EVAL_SCORE_INVALID", f"scorer {name} returned a {type(result).__name__}",
        "return a bool, a number in [0, 1], a label string, or a Score",
    )


def scorer_of(value: Scorer | Callable) -> Scorer:
    """A Scorer from a Scorer or any callable taking the context (or `output`, or `output, expected`)."""
    if isinstance(value, Scorer):
        return value
    name = getattr(value, "__name__", type(value).__name__)
    parameters = list(inspect.signature(value).parameters)
    if parameters[:1] in (["context"], ["ctx"]):
        return Scorer(name, value)
    if len(parameters) >= 2:
        return Scorer(name, lambda context: value(context.output, context.expected))
    return Scorer(name, lambda context: value(context.output))


def exact(field: str | None = None) -> Scorer:
    """Output (or one field of it) equals the case's expected value (whitespace trimmed for text)."""

    def score(context: ScoreContext) -> Score:
        got = _field(context.output, field)
        want = _field(context.expected, field) if isinstance(context.expected, dict) and field else context.expected
        same = got.strip() == want.strip() if isinstance(got, str) and isinstance(want, str) else got == want
        return Score(1.0 if same else 0.0, f"got {as_text(got)[:80]!r}, expected {as_text(want)[:80]!r}", assertion=True)

    return Scorer(f"exact[{field}]" if field else "exact", score, inline=True)


def contains(text: str | None = None, case_sensitive: bool = False) -> Scorer:
    """Output contains `text` (or the case's expected text)."""

    def score(context: ScoreContext) -> Score:
        needle = text if text is not None else str(context.expected)
        haystack = as_text(context.output)
        found = needle in haystack if case_sensitive else needle.lower() in haystack.lower()
        return Score(1.0 if found else 0.0, f"{needle!r} {'found' if found else 'not found'}", assertion=True)

    return Scorer(f"contains[{text}]" if text else "contains", score, inline=True)


def regex(pattern: str) -> Scorer:
    compiled = re.compile(pattern)

    def score(context: ScoreContext) -> Score:
        found = compiled.search(as_text(context.output)) is not None
        return Score(1.0 if found else 0.0, f"/{pattern}/ {'matched' if found else 'did not match'}", assertion=True)

    return Scorer(f"regex[{pattern}]", score, inline=True)


def json_valid() -> Scorer:
    def score(context: ScoreContext) -> Score:
        try:
            _as_data(context.output)
        except (ValueError, TypeError) as exc:
            return Score(0.0, f"not JSON: {exc}", assertion=True)
        return Score(1.0, "valid JSON", assertion=True)

    return Scorer("json_valid", score, inline=True)


def json_schema_valid(schema: dict) -> Scorer:
    import jsonschema  # 30 ms to import: only suites that use this scorer pay it

    validator = jsonschema.Draft202012Validator(schema)

    def score(context: ScoreContext) -> Score:
        try:
            data = _as_data(context.output)
        except (ValueError, TypeError) as exc:
            return Score(0.0, f"not JSON: {exc}", assertion=True)
        errors = sorted(validator.iter_errors(data), key=lambda error: list(error.path))
        if errors:
            where = "/".join(str(part) for part in errors[0].path) or "(root)"
            return Score(0.0, f"{where}: {errors[0].message}", assertion=True)
        return Score(1.0, "matches the schema", assertion=True)

    return Scorer("json_schema_valid", score, inline=True)


def numeric_tolerance(field: str | None = None, tolerance: float = 0.0, relative: bool = False) -> Scorer:
    """A number in the output (or one field of it) is within `tolerance` of the expected one."""

    def score(context: ScoreContext) -> Score:
        try:
            got = float(_field(_as_data(context.output), field))
            want = float(_field(context.expected, field) if isinstance(context.expected, dict) else context.expected)
        except (TypeError, ValueError, KeyError) as exc:
            return Score(0.0, f"not a number: {exc}", assertion=True)
        allowed = tolerance * abs(want) if relative else tolerance
        ok = abs(got - want) <= allowed
        return Score(1.0 if ok else 0.0, f"got {got}, expected {want} ± {allowed}", assertion=True)

    return Scorer(f"numeric_tolerance[{field or 'value'}±{tolerance}{'x' if relative else ''}]", score, inline=True)


def _field(value: Any, field: str | None) -> Any:
    if field is None:
        return value
    data = _as_data(value) if not isinstance(value, dict) else value
    for part in field.split("."):
        data = data[part]
    return data


def llm_judge(judge_prompt) -> Scorer:
    """An LLM grades the output with its own versioned prompt (vars: input, output, expected); the
    judge's reply is a number in [0, 1] (or JSON with `score` and `reason`). The prompt's hash is in
    the scorer's name, so a changed judge is a different scorer. Judge calls run in a run of their
    own (kind `judge`) against the suite's judge cassette: recorded, replayed and billed apart."""
    name = f"llm_judge[{judge_prompt.id}@{judge_prompt.version}:{judge_prompt.hash[4:16]}]"

    def score(context: ScoreContext) -> Score:
        if context.judge is None:
            raise WorkbenchError(
                "WB_EVAL_SUITE_INVALID", f"{name} needs a judge, and the suite has none",
                "pass judge=... to define_eval (a model for the runtime, or a callable)",
            )
        reply = context.judge(judge_prompt, {
            "input": as_text(context.vars), "output": as_text(context.output), "expected": as_text(context.expected),
        }, context.case_id)
        return _judge_score(reply, name)

    return Scorer(name, score, prompt=judge_prompt)


def _judge_score(reply: Any, name: str) -> Score:
    if hasattr(reply, "model_dump"):
        reply = reply.model_dump()
    if isinstance(reply, str):
        try:
            reply = json.loads(reply)
        except ValueError:
            match = re.search(r"(?<![\d.])(0(?:\.\d+)?|1(?:\.0+)?)(?![\d.])", reply)
            if match is None:
                raise WorkbenchError(
                    "WB_EVAL_SCORE_INVALID", f"{name}: the judge replied {reply[:120]!r}, with no score in it",
                    "make the judge prompt ask for a number between 0 and 1, or JSON {\"score\": ..., \"reason\": ...}",
                ) from None
            return Score(float(match.group(1)), reply[:200])
    if isinstance(reply, dict):
        value = reply.get("score")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise WorkbenchError(
                "WB_EVAL_SCORE_INVALID", f"{name}: the judge replied {json.dumps(reply, default=str)[:160]}, "
                f"whose `score` is {value!r}, not a number",
                "make the judge prompt ask for JSON {\"score\": <a number from 0 to 1>, \"reason\": ...}",
            )
        return to_score((value, str(reply.get("reason", ""))[:200]), name)
    return to_score(reply, name)
