"""The example project (`models.toml`, `evals/`, `cassettes/`): where it is, the copy the demo
writes into an empty folder, and its recording against the in-process fake provider:
`python -m workbench.demo.examples [ROOT]`. Deterministic, so re-running it changes no byte."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from workbench.demo.answers import respond
from workbench.demo.fake_provider import AsyncFakeTransport, FakeProvider, FakeTransport
from workbench.evaluate.gate import evaluate
from workbench.evaluate.prompts import prompts, write_lock
from workbench.evaluate.runner import Network
from workbench.evaluate.suite import load_suites

# other prompt versions recorded too, so `workbench eval compare` replays offline
EXTRA_VERSIONS = {"classifier": ["v2"]}
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


def fake_network() -> Network:
    fake = FakeProvider(responder=respond)
    return Network(sync=lambda: FakeTransport(fake), async_=lambda: AsyncFakeTransport(fake))


def record_examples(root: Path) -> None:
    network = fake_network()
    suites = load_suites([root / "evals"])
    for suite in sorted(suites.values(), key=lambda item: item.name):
        for path in (suite.cassette_path, suite.judge_cassette_path):
            path.unlink(missing_ok=True)
        outcome = evaluate(suite, mode="record", record_baseline=True, network=network)
        print(f"{suite.name}: mean {outcome.eval_run.mean:.3f}, {len(outcome.eval_run.results)} cases")
        for version in EXTRA_VERSIONS.get(suite.name, []):
            import asyncio

            from workbench.evaluate.runner import run_suite

            other = asyncio.run(run_suite(suite, "record", version, network=network))
            print(f"{suite.name}@{version}: mean {other.mean:.3f}")
    print("lock:", write_lock(prompts.all(), root / "evals" / "prompts.lock") or "unchanged")


if __name__ == "__main__":
    record_examples(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
