"""Eval suites: a prompt, cases, scorers and the tolerance of the gate. The baseline and the
cassettes are found from the suite file, never from the working directory."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError
from workbench.evaluate.prompts import Prompt
from workbench.evaluate.scorers import Scorer, scorer_of


@dataclass(frozen=True, slots=True)  # slotted: a large suite holds 100,000 of these from start to end
class Case:
    id: str
    vars: dict[str, Any]
    expected: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Suite:
    name: str
    prompt: Prompt
    cases: list[Case]
    scorers: list[Scorer]
    tolerance: float
    file: Path
    baseline_path: Path
    cassette_path: Path
    target: Callable | None = None  # (vars, context) -> output; None: the prompt through the runtime
    judge: Any = None  # a model name for the runtime, or a callable (prompt, vars, context) -> reply
    concurrency: int = 4
    providers: Callable | None = None  # (async transport) -> runtime providers; None: the public APIs
    epochs: int = 1  # samples per case: every case runs this many times
    confidence: float = 0.95  # how sure the gate must be that a drop is not noise before it fails
    errors_are_failures: bool = False  # a case whose target raised fails (exit 1) instead of no verdict

    @property
    def judge_cassette_path(self) -> Path:
        return self.cassette_path.with_name(self.cassette_path.stem + ".judge" + self.cassette_path.suffix)


def _rows_of(path: Path) -> Iterator[dict]:
    """The cases file's rows, one parsed line at a time: a 100,000-case file is never held whole,
    as text, lines and rows at once, next to the cases made of it."""
    try:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    yield json.loads(line)
    except (OSError, ValueError) as exc:
        raise WorkbenchError(
            "WB_EVAL_SUITE_INVALID", f"cannot read the cases file {path}: {exc}",
            f"write {path} as JSON lines: one {{\"id\", \"vars\", \"expected\"}} object a line",
        ) from exc


def _cases_from(value, base: Path) -> list[Case]:
    if isinstance(value, (str, Path)):
        rows = _rows_of(Path(value) if Path(value).is_absolute() else base / value)
    else:
        rows = value
    cases = []
    for index, row in enumerate(rows):
        if isinstance(row, Case):
            cases.append(row)
            continue
        if not isinstance(row, dict) or "vars" not in row:
            raise WorkbenchError(
                "WB_EVAL_SUITE_INVALID", f"case {index} is {row!r:.80}, not a mapping with `vars`",
                "give each case {\"id\": ..., \"vars\": {...}, \"expected\": ...}",
            )
        # the vars copied (the caller's own dict stays theirs), their names interned: every case
        # of a suite has the same few, held once instead of once a case
        variables = {sys.intern(name) if type(name) is str else name: item for name, item in dict(row["vars"]).items()}
        cases.append(Case(str(row.get("id", index)), variables, row.get("expected"), row.get("metadata", {})))
    duplicates = sorted(case_id for case_id, count in Counter(case.id for case in cases).items() if count > 1)
    if duplicates:
        raise WorkbenchError(
            "WB_EVAL_SUITE_INVALID", f"case ids repeat: {', '.join(duplicates)}", "give every case a unique id"
        )
    return cases


_suites: dict[str, Suite] = {}


def define_eval(
    name: str,
    prompt: Prompt,
    cases,
    scorers: list,
    tolerance: float = 0.05,
    baseline: Path | str | None = None,
    target: Callable | None = None,
    judge: Any = None,
    cassette: Path | str | None = None,
    concurrency: int = 4,
    providers: Callable | None = None,
    epochs: int = 1,
    confidence: float = 0.95,
    errors_are_failures: bool = False,
) -> Suite:
    """Declare a suite. `cases`: a list of {"id", "vars", "expected"} or a JSONL path (relative to
    the suite file). The baseline is `<name>.baseline.json` beside the suite file; the cassette is
    `cassettes/<name>.json` in the folder above the suite file's folder (the repository root for
    `evals/`), unless given. `epochs`: how many times each case runs (its score is the mean);
    `confidence`: how sure the gate must be that a drop is not noise; `errors_are_failures`: a case
    whose target raises fails the gate instead of leaving it without a verdict."""
    caller = Path(sys._getframe(1).f_code.co_filename).resolve()  # not inspect.stack(): it reads every frame's source
    base = caller.parent
    resolve = lambda value: (Path(value) if Path(value).is_absolute() else base / value).resolve()  # noqa: E731
    if not 0 <= tolerance < 1:
        raise WorkbenchError(
            "WB_EVAL_SUITE_INVALID", f"suite {name}: tolerance {tolerance} is outside [0, 1)", "use e.g. tolerance=0.05"
        )
    check_epochs(epochs, f"suite {name}: epochs")
    check_confidence(confidence, f"suite {name}: confidence")
    # the answering function passed where the prompt goes (`define_eval(name, answer, cases, scorers)`) was
    # an AttributeError traceback at the first `workbench eval`
    if not isinstance(prompt, Prompt) or (target is not None and not callable(target)):
        wrong, what = ("prompt", prompt) if not isinstance(prompt, Prompt) else ("target", target)
        raise WorkbenchError(
            "WB_EVAL_SUITE_INVALID", f"suite {name}: its {wrong} is {type(what).__name__} {what!r:.80}",
            "pass define_eval(name, define_prompt(...), cases, scorers, target=your_function): the prompt second, "
            "a function that answers a case as target=",
        )
    suite = Suite(
        name=name, prompt=prompt, cases=_cases_from(cases, base), scorers=[scorer_of(item) for item in scorers],
        tolerance=tolerance, file=caller,
        baseline_path=resolve(baseline) if baseline else base / f"{name}.baseline.json",
        cassette_path=resolve(cassette) if cassette else base.parent / "cassettes" / f"{name}.json",
        target=target, judge=judge, concurrency=concurrency, providers=providers, epochs=epochs,
        confidence=confidence, errors_are_failures=errors_are_failures,
    )
    if not suite.scorers:
        raise WorkbenchError("WB_EVAL_SUITE_INVALID", f"suite {name} has no scorers", "pass scorers=[exact(), ...]")
    _suites[name] = suite
    return suite


def require_cases(suite: Suite) -> None:
    """A suite with no cases has nothing to judge: never a pass."""
    if not suite.cases:
        raise WorkbenchError(
            "WB_EVAL_SUITE_INVALID", f"suite {suite.name} ({suite.file}) has no cases, so there is nothing to judge",
            f"give define_eval({suite.name!r}, ...) at least one case",
        )


def check_epochs(epochs, where: str) -> int:
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise WorkbenchError("WB_EVAL_SUITE_INVALID", f"{where} is {epochs!r}, not a whole number of at least 1",
                             "use e.g. epochs=5 (or --epochs 5)")
    return epochs


def check_confidence(confidence, where: str) -> float:
    if not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise WorkbenchError("WB_EVAL_SUITE_INVALID", f"{where} is {confidence!r}, not between 0 and 1",
                             "use e.g. confidence=0.95 (or --confidence 0.95)")
    return float(confidence)


def load_suites(paths: list[Path]) -> dict[str, Suite]:
    """Import every suite file (a .py file, or every .py in a folder) and return the suites defined."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(item for item in path.glob("*.py") if not item.name.startswith("_"))
        elif path.is_file() and path.suffix == ".py":
            files.append(path)
        else:
            raise WorkbenchError(
                "WB_EVAL_SUITE_INVALID", f"{path} is not a suite file (.py) or folder", "pass evals/ or evals/<suite>.py"
            )
    found: dict[str, Suite] = {}
    for file in files:
        module_name = f"workbench_suite_{file.stem}_{abs(hash(str(file.resolve())))}"
        if module_name not in sys.modules:
            spec = importlib.util.spec_from_file_location(module_name, file)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # sys.exit() in a suite file is no verdict, never exit 0
                del sys.modules[module_name]
                if isinstance(exc, WorkbenchError):
                    raise
                what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
                raise WorkbenchError("WB_EVAL_SUITE_INVALID", f"{file} failed to import: {what}", f"fix {file}") from exc
        found.update({name: suite for name, suite in _suites.items() if suite.file == file.resolve()})
    return found


def find_suite(name_or_path: str, root: Path) -> Suite:
    path = Path(name_or_path)
    if path.suffix == ".py" or path.is_dir():
        suites = load_suites([path])
    else:
        # a suite's file is most often named after it: importing that one alone spares the other files'
        # imports (their own app code, often the slowest part of an eval's start) and their faults
        own_file = root / f"{name_or_path}.py"
        suites = load_suites([own_file]) if path.name == name_or_path and own_file.is_file() else {}
        if name_or_path not in suites:
            suites = load_suites([root])
        suites = {name: suite for name, suite in suites.items() if name == name_or_path}
    if len(suites) != 1:
        available = ", ".join(sorted(load_suites([root]))) if root.exists() else "none"
        raise WorkbenchError(
            "WB_EVAL_SUITE_INVALID", f"no single suite named {name_or_path!r} (suites under {root}: {available})",
            "pass a suite name or a suite file",
        )
    return next(iter(suites.values()))
