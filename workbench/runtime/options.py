"""Every numeric option is screened where it is declared, under the name the caller wrote.

`None` is not the only bad value: `NaN` compares false with everything, so a `max_tokens=nan`
would pass every budget check it reaches (the worst case is estimated input + `max_tokens`), and
`True` is an `int` to Python. A bad value is `WB_RUNTIME_OPTION_INVALID` at the declaration (an
`Agent(...)`, a `Budget(...)`, a `Compaction(...)`, the `llm()` call), before anything is sent.

`Limits` are one run's ceilings: each may only LOWER the declaration's, never raise it."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from numbers import Integral, Real
from typing import Any

from workbench.errors import WorkbenchError


def invalid(name: str, value: Any, must: str, fix: str | None = None) -> WorkbenchError:
    return WorkbenchError(
        "WB_RUNTIME_OPTION_INVALID", f"{name}={value!r}: it must be {must}",
        fix or f"pass {name} as {must}, or leave it out for the default",
    )


def count(name: str, value: Any, minimum: int = 1, optional: bool = False) -> int | None:
    """A whole number of at least `minimum` (a bool, a float or NaN is refused)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise invalid(name, value, f"a whole number of at least {minimum}")
    return int(value)


def number(name: str, value: Any, low: float, high: float | None = None, *, low_open: bool = False,
           optional: bool = False) -> float | None:
    """A finite real number in [low, high] (or (low, high] with `low_open`)."""
    if value is None and optional:
        return None
    bounds = f"{'above' if low_open else 'at least'} {low:g}" + (f" and at most {high:g}" if high is not None else "")
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise invalid(name, value, f"a finite number {bounds}")
    if (value <= low if low_open else value < low) or (high is not None and value > high):
        raise invalid(name, value, f"a finite number {bounds}")
    return float(value)


@dataclass(frozen=True)
class Limits:
    """One run's ceilings (`agent.run(..., limits=Limits(max_turns=3))`): each at or under the
    declaration's; one the declaration leaves unset (`deadline_s`) may be set, since any value is
    tighter than none. Budgets are lowered with a `budget=` of the run's own."""

    max_turns: int | None = None
    max_tokens: int | None = None
    max_tool_result_chars: int | None = None
    max_repeated_tool_calls: int | None = None
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "deadline_s":
                number("limits.deadline_s", value, 0, low_open=True, optional=True)
            else:
                count(f"limits.{item.name}", value, 2 if item.name == "max_repeated_tool_calls" else 1, optional=True)

    def lowered(self, declared: dict[str, Any]) -> dict[str, Any]:
        """The declared ceilings with these applied; a higher value is refused, naming both."""
        out = dict(declared)
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            ceiling = declared.get(item.name)
            if ceiling is not None and value > ceiling:
                raise invalid(f"limits.{item.name}", value, f"at most the declared {item.name}={ceiling!r}",
                              f"lower limits.{item.name} to {ceiling!r} or less, or raise {item.name} on the Agent")
            out[item.name] = value
        return out


EFFORTS = ("minimal", "low", "medium", "high", "max")


def model_options(temperature: Any = None, seed: Any = None, effort: Any = None, thinking: Any = None) -> dict:
    """The per-call model knobs, screened: temperature in [0, 2], a whole-number seed, an effort
    from EFFORTS, thinking on or off. Whether the model takes them is its registry row's to say."""
    number("temperature", temperature, 0, 2, optional=True)
    count("seed", seed, 0, optional=True)
    if effort is not None and effort not in EFFORTS:
        raise invalid("effort", effort, f"one of {', '.join(EFFORTS)}")
    if thinking is not None and not isinstance(thinking, bool):
        raise invalid("thinking", thinking, "True, False or None")
    return {"temperature": temperature, "seed": seed, "effort": effort, "thinking": thinking}
