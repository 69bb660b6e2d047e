"""`workbench store copy` between two local files (on the embedded DuckDB; the lake's directions are
in tests/lake): every row once, every micro kept, a second copy adds nothing."""

from __future__ import annotations

import json
import subprocess
import sys

from workbench.store.copy import totals
from workbench.store.db import open_store
from workbench.store.ingest import ingest_spools


def test_a_store_copied_twice_into_another_file_holds_every_row_once(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    with open(spool / "laptop-1-0000beef.jsonl", "w") as handle:
        for n in range(500):
            row = {"call_id": f"c{n}", "run_id": "r", "provider": "openai", "settled": True, "cost_micros": 1000 + n,
                   "input_tokens": 3, "output_tokens": 2, "started_at": "2026-11-30T10:00:00+00:00"}
            handle.write(json.dumps({"kind": "call", "row": row}) + "\n")
    source, target = tmp_path / "source.duckdb", tmp_path / "target.duckdb"
    ingest_spools(source, spool)
    for _ in range(2):
        done = subprocess.run([sys.executable, "-m", "workbench", "store", "copy", "--db", str(source), "--to",
                               str(target), "--format", "json"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        rows = {row["table"]: (row["source"], row["target"]) for row in json.loads(done.stdout)}
        assert rows["calls"] == (500, 500)
        assert rows["calls.cost_micros"] == (sum(1000 + n for n in range(500)),) * 2
    with open_store(source, read_only=True) as src, open_store(target, read_only=True) as dst:
        assert totals(src) == totals(dst)
