"""Record the example suites' cassettes and baselines against the in-process fake provider:
`python -m workbench.demo.examples [ROOT]`. Deterministic, so re-running it changes no byte."""

from __future__ import annotations

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
