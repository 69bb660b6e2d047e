"""Peak memory of a burst of records appended while the spool thread is behind (asleep here: a
flush interval of an hour), until all of them are written: what waits in memory is bounded by
`MAX_WAITING`, past which the appending thread writes them itself.

    python benchmarks/spool_burst_memory.py [RECORDS ...]     # default 5000 20000 100000

Each record is a `call_body` row with a ~3 KB request body; one fresh process a size, so each peak is
that burst's alone. Compare trees with `cd /tmp && PYTHONPATH=<tree> python <tree>/benchmarks/spool_burst_memory.py`
(from outside a checkout: the child puts its working folder first on its path)."""

from __future__ import annotations

import subprocess
import sys

BURST = r"""
import resource, sys, tempfile
from pathlib import Path
from workbench.store.spool import Spool

folder = Path(tempfile.mkdtemp())
spool = Spool(folder / "wb.duckdb", folder / "spool", flush_interval_s=3600)
for index in range(int(sys.argv[1])):
    spool.append("call_body", {"call_id": f"c{index}", "request_json": f"{index} " + "x" * 3000})
spool.flush(ingest=False)
spool.stop()
assert spool.stats["written"] == int(sys.argv[1]) and spool.stats["dropped"] == 0
print(f"{int(sys.argv[1]):>9,} records: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
"""


def main() -> None:
    for records in sys.argv[1:] or ["5000", "20000", "100000"]:
        subprocess.run([sys.executable, "-c", BURST, records], check=True)


if __name__ == "__main__":
    main()
