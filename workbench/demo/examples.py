"""The example project (`models.toml`, `evals/`, `cassettes/`): where it is, the copy the demo
writes into an empty folder, and its recording against the in-process fake provider:
`python -m workbench.demo.examples [ROOT]`. Deterministic, so re-running it changes no byte.

The summarizer's judge is graded as a judge at temperature > 0 would be: the same request gets a
slightly different score on its second and third asking, so the suite's epochs show a spread. The
classifier's matrix (two prompt versions on two models) is recorded too, so `workbench eval
compare` replays offline."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from workbench.demo.answers import respond
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, FakeRequest, FakeTransport, Reply
from workbench.evaluate.compare import run_matrix
from workbench.evaluate.gate import evaluate
from workbench.evaluate.prompts import prompts, write_lock
from workbench.evaluate.runner import Network
from workbench.evaluate.suite import load_suites

EXAMPLE = ("models.toml", "evals", "cassettes")


def example_project() -> Path:
    """The example project: the root of a source checkout, else the copy a wheel ships in
    `workbench/_example` (pyproject.toml maps it there)."""
    package = Path(__file__).resolve().parents[1]  # workbench/
    checkout = package.parent
    return checkout if all((checkout / name).exists() for name in EXAMPLE) else package / "_example"


def project_for_demo(folder: Path) -> tuple[Path, bool]:
    """The project whose suites the demo gates, and whether the example was written for it: the
    folder itself when it has `evals/` and `models.toml` (this checkout, or your project); a
    folder with none of the example's files gets a copy of the example, so the commands the demo
    suggests next run there; a folder with part of a project is left alone (the example is used
    where it is)."""
    if (folder / "evals").is_dir() and (folder / "models.toml").is_file():
        return folder, False
    if any((folder / name).exists() for name in EXAMPLE):
        return example_project(), False
    write_example(folder)
    return folder, True


def write_example(folder: Path) -> None:
    """A copy of the example project in `folder`: `models.toml`, `evals/`, `cassettes/`."""
    source = example_project()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "models.toml", folder / "models.toml")
    for name in ("evals", "cassettes"):
        shutil.copytree(source / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))


# the cells recorded for `workbench eval compare SUITE --versions ... --models ...`
MATRIX = {"classifier": (["v1", "v2"], ["claude-haiku-4-5", "gpt-4o-mini"])}
JUDGE_DRIFT = (0.0, 0.1, 0.05)  # taken off the judge's score on the 1st, 2nd, 3rd... asking of one request


class _JudgeAtTemperature:
    """The demo's answers, with the grading of a summary drifting from one asking to the next."""

    def __init__(self) -> None:
        self.asked: dict[bytes, int] = {}

    def __call__(self, request: FakeRequest) -> Reply | None:
        reply = respond(request)
        if reply is None or reply.text is None or '"score"' not in reply.text:
            return reply
        count = self.asked[request.body] = self.asked.get(request.body, 0) + 1
        graded = json.loads(reply.text)
        graded["score"] = round(max(0.0, graded["score"] - JUDGE_DRIFT[(count - 1) % len(JUDGE_DRIFT)]), 2)
        return Reply(text=json.dumps(graded, sort_keys=True))


def fake_network() -> Network:
    fake = FakeProvider(responder=_JudgeAtTemperature())
    return Network(sync=lambda: FakeTransport(fake), async_=lambda: AsyncFakeTransport(fake))


def record_examples(root: Path) -> None:
    suites = load_suites([root / "evals"])
    for suite in sorted(suites.values(), key=lambda item: item.name):
        network = fake_network()  # every suite's judge starts from its first asking
        # one case at a time: the fake's ids and prompt-cache writes then come in one order (a judge
        # runs on a thread, and concurrent cases would interleave with it by timing)
        suite.concurrency = 1
        for path in (suite.cassette_path, suite.judge_cassette_path):
            path.unlink(missing_ok=True)
        outcome = evaluate(suite, mode="record", record_baseline=True, network=network)
        if outcome.error is not None:
            raise outcome.error
        print(f"{suite.name}: mean {outcome.eval_run.mean:.3f}, {len(outcome.eval_run.results)} cases, "
              f"{outcome.eval_run.epochs} samples a case")
        if suite.name in MATRIX:
            versions, models = MATRIX[suite.name]
            matrix = run_matrix(suite, versions, models, mode="record", network=network)
            print("  matrix: " + ", ".join(f"{cell.label} {cell.eval_run.mean:.3f}" for cell in matrix.cells))
    print("lock:", write_lock(prompts.all(), root / "evals" / "prompts.lock") or "unchanged")


if __name__ == "__main__":
    record_examples(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
