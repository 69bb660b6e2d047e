"""The replay fast path against the full path, in one process, in turn: the CPU time of replaying a
suite's cases through `evaluate()` with the runtime's providers on the cassette's replay transport
(answered directly) and on the same transport with its fast path switched off (`fast_path=False`:
every call through httpx2's client, capture's transport and the replay transport, as before the
fast path).

    python benchmarks/replay_fast_path.py ROOT [--rounds 5]

ROOT holds `evals/bench.py` and its cassette, as `benchmarks/eval_replay.py` writes and records them
(its scale folders, e.g. /tmp/wb-eval-scale-*/scale-1000). Per round, one replay of each kind, in
turn; the figure to read is the least CPU of each (a loaded machine only adds time)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.chdir(args.root)
    os.environ["WORKBENCH_DB"] = str(args.root / "ab-store" / "wb.duckdb")
    os.environ.setdefault("BENCH_BASE_URL", "http://127.0.0.1:9/v1")

    from workbench.capture import flush
    from workbench.evaluate.gate import evaluate
    from workbench.evaluate.suite import load_suites

    suite = load_suites([args.root / "evals" / "bench.py"])["bench"]

    def without_fast_path(transport):
        transport.fast_path = False
        return suite.providers(transport)

    direct = suite
    full = dataclasses.replace(suite, providers=without_fast_path)
    times: dict[str, list[float]] = {"fast path": [], "full path": []}
    for _ in range(args.rounds):
        for name, variant in (("fast path", direct), ("full path", full)):
            started = time.process_time()
            outcome = evaluate(variant, mode="replay")
            flush()
            times[name].append(time.process_time() - started)
            if outcome.exit_code != 0:
                raise SystemExit(f"{name}: exit {outcome.exit_code}")
    cases = len(suite.cases)
    for name, values in times.items():
        print(f"{name}: least CPU {min(values):.3f} s = {min(values) / cases * 1000:.3f} ms a case "
              f"(all: {', '.join(f'{value:.2f}' for value in values)} s); load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
