"""`workbench eval` of the 1,000-case replay suite (`eval_replay.py`'s) under two source trees, one
run of each in turn, in the same minutes: wall and own CPU of the eval, the time until its results
are in the store, the time after its exit until then, and the CPU its ingesters spend after its exit.

    git -C /work/main archive HEAD | tar -x -C /tmp/main-copy
    python benchmarks/eval_exit_ab.py /tmp/eval-ab 3 main=/tmp/main-copy branch=.

Each tree is put first on PYTHONPATH of the eval (and so of the ingesters it starts). The suite and
its cassette are recorded once into ROOT (with the first tree) and copied into a project of each
tree's own (ROOT/trees/NAME), so that each tree has its own store."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import eval_replay as er  # noqa: E402 - the benchmark's own helpers


def one(root: Path, tree: str) -> dict:
    env = er.offline_env(root, f"http://127.0.0.1:{er.free_port()}/v1")
    env["PYTHONPATH"] = tree
    ingester_cpu: dict[str, float] = {}
    own = [0.0]
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "workbench", "eval", "bench", "--evals", str(root / "evals")],
                             cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for pid in er._ingesters(root):
                ingester_cpu[pid] = max(ingester_cpu.get(pid, 0.0), er._own_cpu(pid))
            own[0] = max(own[0], er._own_cpu(str(child.pid)))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    errors = child.stderr.read()
    _, status, _ = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    at_exit = dict(ingester_cpu)
    while er._ingesters(root):
        time.sleep(0.01)
    stored = time.perf_counter() - started
    done.set()
    watcher.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"workbench eval failed:\n{errors.decode(errors='replace')[-2000:]}")
    return {"wall": wall, "own_cpu": own[0], "stored": stored, "after_exit_s": stored - wall,
            "after_exit_ingest_cpu": sum(cpu - at_exit.get(pid, 0.0) for pid, cpu in ingester_cpu.items()),
            "ingest_cpu": sum(ingester_cpu.values()),
            "ingesters": len(ingester_cpu), "load": os.getloadavg()[0]}


def main() -> None:
    root, repeats = Path(sys.argv[1]).resolve(), int(sys.argv[2])
    trees = {name: str(Path(path).resolve()) for name, path in (arg.split("=", 1) for arg in sys.argv[3:])}
    if not (root / "cassettes" / "bench.json").exists():
        suite = er.write_suite(root, "bench", 1000)
        env = {**er.offline_env(root, "http://127.0.0.1:9/v1"), "PYTHONPATH": next(iter(trees.values()))}
        recorded = er._child([sys.executable, "-c", er.RECORD_CODE, str(suite), "bench"], root, env)
        if recorded["rc"] != 0:
            raise SystemExit(recorded["err"])
    results: dict[str, list[dict]] = {name: [] for name in trees}
    # a project and store a tree: an older tree refuses a store a newer one migrated (its ingester
    # fails at once, and its "stored" time is then that failure's)
    projects = {name: root / "trees" / name for name in trees}
    for project in projects.values():
        if not project.exists():
            project.mkdir(parents=True)
            for part in ("evals", "cassettes"):
                shutil.copytree(root / part, project / part, ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copy(root / "models.toml", project / "models.toml")
    for _ in range(repeats):
        for name, tree in trees.items():
            er.settle(projects[name], {**er.offline_env(projects[name], "http://127.0.0.1:9/v1"), "PYTHONPATH": tree})
            result = one(projects[name], tree)
            results[name].append(result)
            print(name, {key: round(value, 3) if isinstance(value, float) else value for key, value in result.items()},
                  flush=True)
    for name, runs in results.items():
        def best_median(key: str) -> str:
            values = [run[key] for run in runs]
            return f"best {min(values):.3f} median {statistics.median(values):.3f}"

        print(f"{name}: wall {best_median('wall')} | own CPU {best_median('own_cpu')} | stored {best_median('stored')} "
              f"| after exit {best_median('after_exit_s')} | ingest CPU after exit {best_median('after_exit_ingest_cpu')} "
              f"| ingest CPU in all {best_median('ingest_cpu')} "
              f"| loads {[round(run['load'], 1) for run in runs]}")


if __name__ == "__main__":
    main()
