"""`workbench eval` starts the ingester its exit needs as it starts: the results reach the store
through that one process, already past its start-up when the gate answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from eval_support import OFFLINE_ENV
from reliability.faults import ingesters_of, ingesters_until_none
from test_examples import rows
from workbench.config import spool_dir_of


def test_the_eval_exit_hands_its_results_to_the_ingester_started_with_it(examples):
    db = examples / "wb.duckdb"
    eval_process = subprocess.Popen([sys.executable, "-m", "workbench", "eval", "classifier"], cwd=examples,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    env={**os.environ, **OFFLINE_ENV, "WORKBENCH_DB": str(db)})
    before_exit: set[int] = set()
    while eval_process.poll() is None:
        before_exit |= set(ingesters_of(db))
        time.sleep(0.01)
    assert eval_process.returncode == 0, eval_process.stderr.read()
    after_exit = ingesters_until_none(db)
    assert before_exit  # one stood by while the eval ran
    assert after_exit <= before_exit  # the exit started none of its own
    assert not list(spool_dir_of(db).glob("*.jsonl"))
    [eval_run] = rows(db, "SELECT suite, verdict FROM eval_runs")  # in the store with no reader's ingestion
    assert eval_run == {"suite": "classifier", "verdict": "pass"}
